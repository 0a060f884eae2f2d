"""Small generated tables and sessions for the synthetic-data tests."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pandas as pd

from dpkit.errors import PrivacyWarning
from dpkit.tables import Session

TYPES = {"colour": "VARCHAR", "size": "DOUBLE", "ok": "VARCHAR"}
SCHEMA: dict[str, Any] = {
    "columns": {
        "colour": {"domain": ["red", "green", "blue"]},
        "size": {"bounds": [0, 100]},
        "ok": {"domain": ["yes", "no"]},
    }
}


def dependent(n: int = 2000, seed: int = 0) -> pd.DataFrame:
    """Three columns with strong dependence: colour -> size -> ok."""
    rng = np.random.default_rng(seed)
    colour = rng.choice(["red", "green", "blue"], n, p=[0.5, 0.3, 0.2])
    centre = np.select([colour == "red", colour == "green"], [15.0, 50.0], 85.0)
    size = np.clip(rng.normal(centre, 5.0), 0, 100)
    ok = np.where(size > 40, rng.choice(["yes", "no"], n, p=[0.9, 0.1]), "no")
    return pd.DataFrame({"colour": colour, "size": size, "ok": ok})


def session(
    frame: pd.DataFrame,
    types: dict[str, str] | None = None,
    columns: dict[str, Any] | None = None,
    **options: Any,
) -> Session:
    """A zCDP session on ``frame`` (extra columns' ``types`` and schema ``columns`` added)."""
    options.setdefault("epsilon", 50.0)
    options.setdefault("delta", 1e-6)
    options.setdefault("accountant", "zcdp")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        return Session.from_pandas(
            frame,
            types={**TYPES, **(types or {})},
            schema={"columns": {**SCHEMA["columns"], **(columns or {})}},
            **options,
        )
