"""Group-by after the engine: align aggregates to keys, select private keys, assemble releases.

Public keys (given, or the schema's domains) are released all, absent ones as
zeros: the released key set is public. Private keys (``keys="private"``) go
through DP partition selection: a key is released only when its noisy count
(two-sided geometric, scale k/ε) reaches
:func:`~dpkit.tables.queries.partition_threshold`; a key present in only one
of two neighbours is released with probability at most δ. The rule this module
keeps: **nothing about which groups exist reaches a release except through the
thresholded groups themselves** — every mechanism is calibrated on public
numbers (ε, k, the declared bounds), never on how many groups were observed,
and ``details`` never count observed groups (only released ones).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from dpkit.privacy import PrivacyReport, neighbouring
from dpkit.release import Release
from dpkit.tables import queries as Q
from dpkit.tables.engines.base import Condition, Rows
from dpkit.tables.results import GroupedRelease
from dpkit.tables.validation import Grouping, ValidatedQuery
from dpkit.tables.values import from_engine

if TYPE_CHECKING:
    from dpkit.accounting import Budget

__all__ = [
    "aligned_columns",
    "dense_matrix",
    "finish",
    "keep_selected",
    "pushed_down",
    "select_keys",
]


def plain(v: Any) -> Any:
    """A Python scalar for an engine value (NumPy scalars, pandas timestamps)."""
    if isinstance(v, np.generic):
        return v.item()
    if hasattr(v, "to_pydatetime"):
        return v.to_pydatetime()
    return v


def pushed_down(rows: Rows, grouping: Grouping | None) -> Rows:
    """Public keys pushed into the filter (smaller results); only for drop-null group columns."""
    if grouping is None or grouping.keys is None:
        return rows
    extra = []
    for i, value in enumerate(grouping.values):
        if value.nulls == "drop":
            vals = tuple(dict.fromkeys(k[i] for k in grouping.keys))
            extra.append(Condition(value.column, "in", vals))
    return Rows(where=rows.where + tuple(extra), contribution=rows.contribution)


def _observed(frame: pd.DataFrame, grouping: Grouping) -> list[tuple[Any, ...]]:
    gcols = [f"_g{i}" for i in range(len(grouping.columns))]
    temporal = [v.temporal for v in grouping.values]
    return [
        tuple(from_engine(v) if t else plain(v) for v, t in zip(row, temporal))
        for row in frame[gcols].itertuples(index=False, name=None)
    ]


def _sorted_keys(keys: Sequence[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Observed keys in a fixed order (engines return groups in no fixed order)."""
    try:
        return sorted(keys)
    except TypeError:  # mixed types: order by type name, then text
        return sorted(keys, key=lambda k: tuple((type(v).__name__, repr(v)) for v in k))


def aligned_columns(
    frame: pd.DataFrame, grouping: Grouping | None, columns: Sequence[str]
) -> tuple[list[tuple[Any, ...]], dict[str, NDArray[Any]]]:
    """Aggregates aligned to keys: the public keys (absent ones as 0) or the observed ones."""
    if grouping is None:
        cols = {c: frame[c].to_numpy()[:1] if len(frame) else np.zeros(1) for c in columns}
        return [()], cols
    observed = _observed(frame, grouping)
    if grouping.keys is not None:
        keys = list(grouping.keys)
        position = {key: i for i, key in enumerate(keys)}
    else:
        keys = _sorted_keys(list(dict.fromkeys(observed)))
        position = {key: i for i, key in enumerate(keys)}
    rows_ix = np.array([position.get(key, -1) for key in observed], dtype=np.int64)
    present = rows_ix >= 0
    out: dict[str, NDArray[Any]] = {}
    for c in columns:
        weights = frame[c].to_numpy(dtype=np.float64)[present]
        out[c] = np.bincount(rows_ix[present], weights=weights, minlength=len(keys))
    return keys, out


def dense_matrix(
    frame: pd.DataFrame, grouping: Grouping | None, slots: NDArray[np.int64], width: int
) -> tuple[list[tuple[Any, ...]], NDArray[np.float64]]:
    """Counts as a (groups × width) matrix; slot -1 (not in the public domain) is ignored."""
    counts = frame["n"].to_numpy(dtype=np.float64)
    ok = slots >= 0
    if grouping is None:
        row = np.bincount(slots[ok], weights=counts[ok], minlength=width)
        return [()], np.asarray(row, dtype=np.float64).reshape(1, width)
    observed = _observed(frame, grouping)
    if grouping.keys is not None:
        keys = list(grouping.keys)
    else:
        keys = _sorted_keys(list(dict.fromkeys(observed)))
    position = {key: i for i, key in enumerate(keys)}
    rows_ix = np.array([position.get(key, -1) for key in observed], dtype=np.int64)
    ok &= rows_ix >= 0
    flat = rows_ix[ok] * width + slots[ok]
    matrix = np.bincount(flat, weights=counts[ok], minlength=len(keys) * width)
    return keys, np.asarray(matrix, dtype=np.float64).reshape(len(keys), width)


def select_keys(
    counts: NDArray[Any], epsilon: float, delta: float, k: int, rng: Any
) -> tuple[NDArray[np.bool_], NDArray[np.int64], int]:
    """DP partition selection: noisy counts (geometric, ε, sensitivity k) ≥ threshold.

    Each observed key is noised independently with the same public mechanism;
    the threshold depends on (ε, δ, k) only.
    """
    from dpkit.mechanisms import Geometric

    counts_i = np.asarray(counts, dtype=np.int64).reshape(-1)
    threshold = Q.partition_threshold(epsilon, delta, k)
    if counts_i.size == 0:
        return np.zeros(0, dtype=bool), counts_i, threshold
    mech = Geometric(epsilon=epsilon, sensitivity=k, size=counts_i.size)
    noisy = np.asarray(mech.randomise(counts_i, rng=rng), dtype=np.int64).reshape(-1)
    return noisy >= threshold, noisy, threshold


def keep_selected(
    v: ValidatedQuery,
    keys: list[tuple[Any, ...]],
    matrix: NDArray[np.float64],
    epsilon: float,
    rng: Any,
    details: dict[str, Any],
) -> tuple[list[tuple[Any, ...]], NDArray[np.float64]]:
    """With private keys, the rows of a (groups × width) count matrix that pass selection.

    Selection noises each row's total (the group's count); public keys pass unchanged.
    """
    if v.grouping is None or not v.grouping.private:
        return keys, matrix
    keep, _, threshold = select_keys(matrix.sum(axis=1), epsilon, v.delta, v.max_contributions, rng)
    details["threshold"] = threshold
    return [key for key, ok in zip(keys, keep) if ok], matrix[keep]


def selection_split(v: ValidatedQuery, epsilon: float) -> tuple[float, float]:
    """(ε for private partition selection, ε for the answers); public keys pay nothing."""
    if v.grouping is not None and v.grouping.private:
        first, second = Q.split_epsilon(epsilon, [Q.SELECTION_FRACTION, 1 - Q.SELECTION_FRACTION])
        return first, second
    return 0.0, epsilon


def finish(
    v: ValidatedQuery,
    keys: Sequence[tuple[Any, ...]],
    values: Sequence[Any],
    cis: Sequence[Any],
    mechanism: str,
    details: dict[str, Any],
    cost: Budget | None = None,
) -> Release | GroupedRelease:
    """The release: a :class:`Release` without grouping, else a :class:`GroupedRelease`.

    Its ``privacy`` report is public: the query's declared ε and δ (or
    ``cost``, what it was charged, when that differs: Gaussian steps are
    charged ``(ε', δ)`` with ρ), the session's privacy unit, and the
    mechanisms (private keys add partition selection).
    """
    used = tuple(m for m in mechanism.split("+") if m)
    if v.grouping is not None and v.grouping.private:
        used = ("partition selection", *used)
    epsilon, delta, rho = v.epsilon, v.delta, None
    if cost is not None:
        epsilon, delta, rho = cost.epsilon, cost.delta, cost.rho_declared
    report = PrivacyReport(
        epsilon=epsilon,
        delta=delta,
        rho=None if rho is None else float(rho),
        neighbouring=neighbouring(v.privacy_unit, v.max_contributions),
        mechanisms=used,
    )
    if v.grouping is None:
        return Release(
            value=values[0],
            ci=cis[0],
            level=v.level,
            mechanism=mechanism,
            details=details,
            privacy=report,
        )
    if v.grouping.labels is not None:  # public keys: all released, named as written
        keys = v.grouping.labels
    out_keys = tuple(k[0] if len(k) == 1 else k for k in keys)
    return GroupedRelease(
        group_by=v.grouping.columns,
        keys=out_keys,
        value=dict(zip(out_keys, values)),
        ci=dict(zip(out_keys, cis)),
        level=v.level,
        mechanism=mechanism,
        details={**details, "groups": len(out_keys), "composition": "parallel"},
        privacy=report,
    )
