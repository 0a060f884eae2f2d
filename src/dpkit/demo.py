"""``dpkit demo``: private answers about a synthetic patients table.

The table is generated (seeded) so the demo needs no data files; the noise is
always drawn from the secure default source.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from rich.console import Console
from rich.table import Table

from dpkit import mechanisms
from dpkit.tables import GroupedRelease, Session

DISTRICTS = ("Ba Dinh", "Hoan Kiem", "Dong Da", "Cau Giay", "Tay Ho")
#: The patients table's column types, declared (public metadata, never read from the rows).
PATIENT_TYPES = {"age": "DOUBLE", "weight": "DOUBLE", "condition": "BOOLEAN", "district": "VARCHAR"}


def patients(n: int = 5000, seed: int = 7) -> pd.DataFrame:
    """A synthetic patients table: age, weight, a sensitive condition, a district."""
    rng = np.random.default_rng(seed)
    age = np.clip(rng.normal(48, 17, n), 18, 95).round()
    weight = np.clip(rng.normal(68, 14, n) + 0.1 * (age - 48), 38, 160).round(1)
    risk = 1 / (1 + np.exp(-(age - 60) / 8 - (weight - 80) / 15))
    condition = rng.random(n) < 0.6 * risk
    district = rng.choice(DISTRICTS, size=n, p=[0.3, 0.15, 0.25, 0.2, 0.1])
    return pd.DataFrame(
        {"age": age, "weight": weight, "condition": condition, "district": district}
    )


@dataclass
class _Row:
    question: str
    answer: str
    epsilon: float
    bound: str


def _interval(ci: tuple[Any, Any] | None, digits: int = 1) -> str:
    if ci is None:
        return ""
    return f"[{float(ci[0]):,.{digits}f}, {float(ci[1]):,.{digits}f}]"


def run_demo(seed: int = 7, console: Console | None = None) -> list[_Row]:
    """Answer private questions through a :class:`dpkit.Session` with a total budget of 1."""
    console = console or Console()
    table = patients(seed=seed)
    session = Session.from_pandas(table, types=PATIENT_TYPES, epsilon=1.0)
    rows: list[_Row] = []

    def show(question: str, release: Any, digits: int = 1) -> None:
        rows.append(
            _Row(
                question,
                f"{release.value:,.{digits}f}",
                release.epsilon,
                _interval(release.ci, digits),
            )
        )

    # A count: sensitivity 1 under add/remove one row; geometric noise.
    show("patients with the condition", session.count(where={"condition": True}, epsilon=0.1), 0)
    # Bounded means: noisy clipped sum / noisy count, bounds declared (never read from the data).
    show("mean age (declared bounds 0-120)", session.mean("age", bounds=(0, 120), epsilon=0.15))
    # Group-by over a public list of districts: disjoint groups, so the cost is the max (parallel).
    by_district = session.mean(
        "weight", bounds=(30, 200), group_by="district", keys=list(DISTRICTS), epsilon=0.25
    )
    assert isinstance(by_district, GroupedRelease)
    for district in DISTRICTS:
        release = by_district[district]
        rows.append(
            _Row(
                f"  mean weight in {district}", f"{release.value:,.1f}", 0.0, _interval(release.ci)
            )
        )
    rows.insert(
        len(rows) - len(DISTRICTS),
        _Row(
            "mean weight by district (5 groups, one budget: parallel)", "", by_district.epsilon, ""
        ),
    )
    # A median by permute-and-flip over a public grid: never the raw middle value plus noise.
    quantiles: list[tuple[str, Any]] = [
        ("median age (permute-and-flip)", session.median("age", bounds=(0, 120), epsilon=0.2)),
        (
            "95th percentile of weight",
            session.quantile("weight", 0.95, bounds=(30, 200), epsilon=0.1),
        ),
    ]
    for question, quantile in quantiles:
        rank_error = quantile.details.get("rank_error", 0)
        rows.append(
            _Row(
                question,
                f"{quantile.value:,.1f}",
                quantile.epsilon,
                f"rank within ± {rank_error:,.0f} rows",
            )
        )

    # A local-DP survey: each patient answers through the coin-flip protocol (ln 3-DP, local).
    responses = mechanisms.coin_flip_survey(table["condition"].to_numpy())
    survey = mechanisms.coin_flip_estimate(responses)
    rows.append(
        _Row(
            "share with the condition (coin-flip survey, local DP)",
            f"{survey.value:.3f}",
            survey.epsilon,
            _interval(survey.ci, 3),
        )
    )

    out = Table(title=f"dpkit demo: {len(table):,} synthetic patients, central budget ε = 1")
    out.add_column("question")
    out.add_column("private answer", justify="right")
    out.add_column("ε", justify="right")
    out.add_column("95% confidence interval", justify="right")
    for row in rows:
        out.add_row(
            row.question, row.answer, f"{row.epsilon:.3g}" if row.epsilon else "", row.bound
        )
    console.print(out)
    console.print(
        f"Budget spent: {session.spent}; left: {session.remaining}. "
        "(The survey is local DP: each answer was randomised by the patient, ε = ln 3 per person.)"
    )
    return rows
