"""Counts: rows (or non-missing values of a column), overall or per group.

Privacy: ε-DP under add/remove one row (``k`` rows per person with a privacy
unit). A row changes one count by 1, so the count (or the vector of group
counts: each row is in one group) has ℓ1 sensitivity ``k``; two-sided
geometric noise of scale ``k/ε`` makes it ε-DP. With ``keys="private"`` the
released keys are those whose noisy count reaches the partition threshold;
the same noisy counts are the answers, so the whole release is (ε, δ)-DP.
Released values and intervals agree (post-processing of the noisy count
``x``, :func:`nonnegative`): a count is never negative, so the value is
``max(x, 0)`` and the CI is ``x ± half_width`` (exact for the geometric noise,
public) intersected with ``[0, ∞)``: ``(max(x - h, 0), max(x + h, 0))``. It
contains the released value and covers the true count whenever ``x ± h``
does. (A sum of released counts is therefore biased up where counts are
near 0; ``docs/queries.md``, "Values and intervals".)

Gaussian noise (a session's ``noise="gaussian"``, or ``"auto"`` where it
gives the smaller half-width; :mod:`dpkit.tables.noise`): the counts get
discrete Gaussian noise of variance ``⌈k²/(2ρ)⌉`` with ρ = ε²/2, sampled
exactly (:meth:`~dpkit.mechanisms.DiscreteGaussian.from_rho`). Its ℓ2
sensitivity is ``k`` too: a person's ``k`` rows may all fall in one group,
so the count vector moves by at most ``k`` in ℓ2 — unless the session bounds
a person's groups (``max_groups=G``: at most ``k`` rows in each of at most
``G`` groups, :class:`~dpkit.tables.engines.base.Contribution`); the vector
then moves by at most ``k`` in each of ``G`` coordinates: ℓ1 ``k·G`` (the
Laplace scale), ℓ2 ``k·√G`` (the Gaussian σ). The release is ρ-zCDP (Canonne, Kamath & Steinke 2020, Thm 14), charged as
``(ε', δ_n)`` with ρ declared: ε' the zCDP→(ε, δ) conversion at the paying
accountant's δ_n. Same post-processing, with the discrete Gaussian's exact
half-width. With ``keys="private"`` the counts are the selection's own
geometric counts, whatever the session's noise (the threshold is calibrated
to them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from dpkit.accounting import Budget
from dpkit.accounting.events import PrivacyEvent
from dpkit.tables import groups as G
from dpkit.tables.engines.base import Engine
from dpkit.tables.kinds.base import COMMON, ExpectedError, Kind, amount, percent, selection
from dpkit.tables.noise import additive
from dpkit.tables.validation import TableContext, ValidatedQuery, count_value


@dataclass(frozen=True)
class CountQuery(ValidatedQuery):
    """A validated count: nothing beyond the common fields (``value`` is the column, if any)."""


def validate(spec: Any, ctx: TableContext, common: dict[str, Any]) -> CountQuery:
    return CountQuery(statistic="count", value=count_value(ctx, spec.column), **common)


def nonnegative(
    noisy: NDArray[np.int64], half_width: float
) -> tuple[NDArray[np.int64], NDArray[np.float64], NDArray[np.float64]]:
    """Noisy counts and their intervals, made to agree with ``count >= 0`` (post-processing).

    Returns ``max(x, 0)`` and ``(max(x - h, 0), max(x + h, 0))``: the interval
    ``x ± h`` intersected with the counts' range, so it still covers the true
    count whenever ``x ± h`` does, and ``lo <= value <= hi`` always holds.
    It reads only the noisy counts and public ``h``, so it costs nothing.
    """
    x = np.asarray(noisy, dtype=np.int64)
    return (
        np.maximum(x, 0),
        np.maximum(x - half_width, 0.0).astype(np.float64),
        np.maximum(x + half_width, 0.0).astype(np.float64),
    )


def counting_noise(v: ValidatedQuery, epsilon: float, size: int = 1) -> Any:
    """The mechanism of one step adding noise to counts, spending ``epsilon`` (``v.noise``).

    ℓ1 and ℓ2 sensitivity ``k`` (each row is in one count; a person's ``k``
    rows may all be in one), integer answers: geometric noise of scale
    ``k/ε`` under Laplace, else discrete Gaussian noise calibrated to
    ρ = ε²/2 (:func:`dpkit.tables.noise.additive`). Grouped with the session's
    ``max_groups=G`` (``k`` rows in each of at most ``G`` groups): ℓ1 ``k·G``,
    ℓ2 ``k·√G`` (:attr:`~dpkit.tables.validation.ValidatedQuery.l2_contributions`).
    The one construction the release, its event (``parts``) and its error bar
    (``expected_error``) use, so the noise added, the event charged and the
    bar said before spending agree.
    """
    k, l2 = v.max_contributions, v.l2_contributions
    return additive(v.noise, epsilon=epsilon, l1=k, l2=l2, level=v.level, size=size, integer=True)


def noise_details(mech: Any) -> dict[str, Any]:
    """The public facts of the counts' noise: scale (geometric) or sigma and ρ (Gaussian)."""
    if mech.name == "geometric":
        return {"scale": mech.scale}
    return {"sigma": mech.sigma, "rho": float(mech.charged_rho)}


def release(v: CountQuery, engine: Engine, rng: Any) -> Any:
    """The noisy count(s); the privacy argument is this module's docstring."""
    from dpkit.mechanisms import Geometric

    grouping, k = v.grouping, v.max_contributions
    frame = engine.moments(
        G.pushed_down(v.rows, grouping), v.value, grouping.values if grouping else ()
    )
    keys, cols = G.aligned_columns(frame, grouping, ["n"])
    counts = cols["n"].astype(np.int64)
    private = grouping is not None and grouping.private
    if private:  # the selection's own geometric counts are the answers
        mech = Geometric(epsilon=v.epsilon, sensitivity=k, size=max(counts.size, 1))
    else:  # counts.size: 1, or the number of public keys
        mech = counting_noise(v, v.epsilon, size=max(counts.size, 1))
    details: dict[str, Any] = {"sensitivity": k, **noise_details(mech)}
    if private:
        keep, noisy, threshold = G.select_keys(counts, v.epsilon, v.delta, k, rng)
        details["threshold"] = threshold
    else:
        noisy = np.asarray(mech.randomise(counts, rng=rng), dtype=np.int64).reshape(-1)
        keep = np.ones(counts.size, dtype=bool)
    h = mech.half_width(v.level)
    details["half_width"] = h
    released, lows, highs = nonnegative(noisy[keep], h)
    values = [int(x) for x in released]
    cis = list(zip(lows.tolist(), highs.tolist()))
    kept = [key for key, ok in zip(keys, keep) if ok]
    return G.finish(v, kept, values, cis, mech.name, details, cost=gaussian_cost(COUNT, v))


def gaussian_cost(kind: Kind, v: ValidatedQuery) -> Budget | None:
    """The query's charge for its release's report when some step may be Gaussian, else None.

    ``None`` keeps today's report (the declared ε, δ) for Laplace-only sessions.
    """
    return None if v.noise.laplace_only else kind.cost(v)


def parts(v: CountQuery) -> list[PrivacyEvent]:
    """The release's event: the counts' noise (:func:`counting_noise`) on sensitivity ``k``.

    With private keys the same noisy counts also select the keys: the whole
    release is (ε, δ)-DP, known by that pair only.
    """
    chosen = selection(v, v.epsilon)
    if chosen:
        return chosen
    return [counting_noise(v, v.epsilon).event]


def expected_error(v: CountQuery, level: float) -> ExpectedError:
    """``± half_width`` of the counts' noise at ``level``: ε, ``k``, the noise and the level only."""
    from dpkit.mechanisms import Geometric

    if v.grouping is not None and v.grouping.private:
        h = Geometric(epsilon=v.epsilon, sensitivity=v.max_contributions).half_width(level)
    else:
        h = counting_noise(v, v.epsilon).half_width(level)
    each = " on each group's count" if v.grouping is not None else ""
    return ExpectedError(level, f"± {amount(h)}{each} ({percent(level)})", half_width=h)


COUNT = Kind(
    name="count",
    summary="Noisy number of rows (with a column: rows where it is not dropped as missing).",
    doc="""Noisy number of rows (with ``column``: rows where it is not dropped as missing).

    Privacy: ε-DP (add/remove one row changes the count by 1, or by ``k``
    per person: two-sided geometric noise of scale ``k/ε``). With
    ``group_by`` each row is in one group, so the vector of counts has ℓ1
    sensitivity ``k`` and the whole result costs ε (parallel
    composition). With ``keys="private"``, (ε, δ)-DP: only keys whose
    noisy count reaches :func:`~dpkit.tables.queries.partition_threshold`
    are released, the same noisy counts being the answers.
    ``ci``: ``value ± half_width`` (exact for the geometric noise), within
    ``[0, ∞)``: a negative noisy count is released as 0 with the interval
    ``(0, max(x + half_width, 0))``, so the value always lies in its interval
    (``docs/queries.md``, "Values and intervals").
    With the session's ``noise="gaussian"`` (or ``"auto"`` where it is
    narrower): discrete Gaussian noise of σ = ``k/ε`` (ρ = ε²/2 zCDP, ℓ2
    sensitivity ``k``; grouped with the session's ``max_groups=G``, scale
    ``k·G/ε`` and σ = ``k·√G/ε``), charged ``(ε', δ)`` with that ρ; ``mechanism`` is
    ``"discrete_gaussian"`` and ``details`` has ``sigma``, ``rho`` and
    ``half_width``. Private keys keep geometric counts (the threshold's).
    """,
    parameters=COMMON,
    query_type=CountQuery,
    validate_query=validate,
    release_query=release,
    module_doc=__doc__ or "",
    column_required=False,
    error=expected_error,
    parts=parts,
)

__all__ = [
    "COUNT",
    "CountQuery",
    "counting_noise",
    "expected_error",
    "nonnegative",
    "release",
    "validate",
]
