"""How close a synthetic table is to the real one: two-way total-variation distances.

NOT differentially private: it reads the real table as it is. It is a tool
for the data owner (who may see the data) to judge a release before
publishing it; its numbers must not be published as if they were DP.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations

import numpy as np
import pandas as pd

from dpkit.errors import InvalidParameterError

__all__ = ["Evaluation", "evaluate"]


@dataclass(frozen=True)
class Evaluation:
    """``mean`` and ``max`` of ``pairs`` (each column pair's two-way total-variation distance)."""

    mean: float
    max: float
    pairs: dict[tuple[str, str], float]


def _cells(values: pd.Series, edges: Sequence[float] | None) -> pd.Series:
    """Each value's cell: its bin under ``edges`` (clamped to the end bins), else the value itself.

    Missing values (None, NaN, ±inf) form one cell of their own.
    """
    if edges is None:
        return values.astype(object).where(values.notna(), "<missing>").astype(str)
    x = pd.to_numeric(values, errors="coerce").to_numpy(dtype=np.float64)
    e = np.asarray(edges, dtype=np.float64)
    codes = np.clip(np.searchsorted(e, x, side="right") - 1, 0, len(e) - 2)
    return pd.Series(np.where(np.isfinite(x), codes.astype(str), "<missing>"), index=values.index)


def evaluate(
    real: pd.DataFrame,
    synthetic: pd.DataFrame,
    columns: Sequence[str],
    *,
    edges: Mapping[str, Sequence[float]] | None = None,
) -> Evaluation:
    """Mean and max total-variation distance between the two tables' two-way marginals.

    For every pair of ``columns``, TV = ½ Σ |p_real(cell) - p_synth(cell)|
    over the cells of the pair (each table's counts divided by its own
    rows). A column named in ``edges`` is compared by bin (values beyond the
    outer edges in the end bins: the rule of :mod:`dpkit.synth.domain`, so a
    synthetic column of bin midpoints compares with the real values); other
    columns by value. For a table from ``Session.synthesize``, pass
    ``edges=result.report.edges`` (numeric columns hold bin midpoints).

    Not DP: run by the data owner, on the real data; see the module docstring.
    """
    names = list(columns)
    if len(names) < 2:
        raise InvalidParameterError("evaluate needs at least two columns.")
    for frame, what in ((real, "real"), (synthetic, "synthetic")):
        missing = [c for c in names if c not in frame.columns]
        if missing:
            raise InvalidParameterError(f"the {what} table has no column(s) {missing}.")
    edges = dict(edges or {})
    r = {c: _cells(real[c], edges.get(c)) for c in names}
    s = {c: _cells(synthetic[c], edges.get(c)) for c in names}
    pairs: dict[tuple[str, str], float] = {}
    for a, b in combinations(names, 2):
        p = pd.crosstab(r[a], r[b], normalize=True).stack()
        q = pd.crosstab(s[a], s[b], normalize=True).stack()
        p, q = p.align(q, fill_value=0.0)
        pairs[a, b] = float(0.5 * np.abs(p.to_numpy() - q.to_numpy()).sum())
    values = list(pairs.values())
    return Evaluation(float(np.mean(values)), float(np.max(values)), pairs)
