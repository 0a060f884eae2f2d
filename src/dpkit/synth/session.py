"""``Session.synthesize(method="mst" | "aim")``: validate, cost, charge, measure, release.

The order is the guarantee's structure (``docs/architecture.md``, "The flow of
a query"): every check below reads public input only (the schema, the column
kinds, the parameters) and runs before the charge; after the charge the
engine is read and the release cannot fail or branch differently because of
the data (an engine failure is the one generic
:class:`~dpkit.errors.ReleaseFailedError` of
:func:`~dpkit.accounting.charge_and_run`).
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from itertools import combinations
from typing import Any

import numpy as np
import pandas as pd

from dpkit._checks import check_delta, check_epsilon
from dpkit.accounting import Budget, charge_and_run, largest_rho, zcdp_to_dp
from dpkit.accounting.events import ZCDPEvent
from dpkit.errors import InvalidParameterError
from dpkit.privacy import PrivacyReport, neighbouring
from dpkit.synth import aim
from dpkit.synth.domain import Attribute, check_bins, discretise
from dpkit.synth.mst import Measurement, Progress, check_shares, decode, run_mst
from dpkit.tables.synthesis import SynthesisInputs

__all__ = ["MAX_CELLS", "MAX_COLUMNS", "MAX_ROWS", "SynthesisReport", "SynthesisResult"]

#: The most synthetic rows one call draws.
MAX_ROWS = 10_000_000
#: The most columns one synthetic table has (MST measures every pair for its selection).
MAX_COLUMNS = 64
#: The most cells of one two-way marginal.
MAX_CELLS = 1 << 20
#: The most marginals of an AIM workload.
MAX_WORKLOAD = 4096


@dataclass(frozen=True)
class MeasuredMarginal:
    """One released noisy marginal: its columns, noise σ, its ρ and the noisy counts (DP output)."""

    columns: tuple[str, ...]
    sigma: float
    rho: float
    counts: np.ndarray = field(repr=False)
    #: For a marginal measured on merged cells (:mod:`dpkit.synth.compression`): each merged
    #: column's map from its code to the cell of ``counts`` (a function of the released one-way
    #: marginals). Empty when every cell was measured on its own.
    merges: dict[str, tuple[int, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class SynthesisReport:
    """What a synthetic table is made of (all DP outputs or public parameters).

    ``steps``: the ρ of each step (``"one-way marginals"``, ``"selection"``,
    ``"pair marginals"``, a third each); ``marginals``: every measured
    marginal with its σ and noisy counts (in merged cells after the one-way
    step: each one's ``merges``, :mod:`dpkit.synth.compression`); ``selected``: the column pairs
    chosen by the private selection (AIM: the clique of each round, in order);
    ``selection_epsilon``: the ε of each of its exponential-mechanism rounds
    (AIM: the largest; ``selection_epsilons``: each round's); ``cells``: each
    column's code labels; ``errors`` (AIM): each workload marginal's expected
    ℓ1 error in counts when a measurement covers it, else ``None``; ``edges``:
    each numeric column's bin edges (public, from the schema), to compare a
    real table with the synthetic one by bin:
    ``dpkit.synth.evaluate(real, result.table, columns, edges=result.report.edges)``.
    """

    method: str
    rows: int
    rho: float
    steps: dict[str, float]
    marginals: tuple[MeasuredMarginal, ...]
    selected: tuple[tuple[str, ...], ...]
    selection_epsilon: float
    cells: dict[str, tuple[Any, ...]]
    selection_epsilons: tuple[float, ...] = ()
    errors: dict[tuple[str, ...], float | None] = field(default_factory=dict)
    edges: dict[str, tuple[float, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class SynthesisResult:
    """A DP synthetic table: ``table`` (pandas), ``report`` and ``privacy`` (what was charged).

    ``table``: one column per synthesized column. A categorical column holds
    its declared categories (``None`` for the missing cell); a numeric column
    holds the *midpoint* of its bin (NaN for the missing cell):
    ``report.cells`` lists each code's label and the schema's bounds/edges
    give the intervals.
    """

    table: pd.DataFrame = field(repr=False)
    report: SynthesisReport
    privacy: PrivacyReport


def _check_rows(rows: object) -> int:
    if (
        isinstance(rows, bool)
        or not isinstance(rows, int | np.integer)
        or not 1 <= rows <= MAX_ROWS
    ):
        raise InvalidParameterError(
            f"rows must be an integer from 1 to {MAX_ROWS:,} (the synthetic table's size)."
        )
    return int(rows)


def _check_columns(columns: object, inputs: SynthesisInputs) -> tuple[str, ...]:
    names = tuple(inputs.kinds) if columns is None else columns
    if isinstance(names, str) or not isinstance(names, Sequence):
        raise InvalidParameterError("columns must be a list of column names (or None: all).")
    out = tuple(names)
    for name in out:
        if not isinstance(name, str) or name not in inputs.kinds:
            raise InvalidParameterError(
                f"unknown column {name!r}; the table's columns are {sorted(inputs.kinds)}."
            )
    if len(set(out)) != len(out):
        raise InvalidParameterError("columns lists a column twice.")
    if not 2 <= len(out) <= MAX_COLUMNS:
        raise InvalidParameterError(
            f"a synthetic table needs from 2 to {MAX_COLUMNS} columns, got {len(out)}."
        )
    return out


def _check_categories(attributes: Sequence[Attribute], inputs: SynthesisInputs) -> None:
    """Every declared category as a value of its column's type (public; an error names the column).

    The engines compare categories by the same reading
    (:func:`~dpkit.tables.values.category_value`), where one the column cannot
    hold would match nothing: refused here instead, before the charge.
    """
    from dpkit.tables.values import canonical

    for a in attributes:
        if a.coding.categories is None:
            continue
        kind, type_name = inputs.kinds[a.name], inputs.types[a.name]
        for v in a.coding.categories:
            canonical(v, a.name, kind, type_name, "domain value")  # type: ignore[arg-type]


def _check_cells(attributes: Sequence[Attribute]) -> None:
    sizes = sorted(a.size for a in attributes)
    if sizes[-1] * sizes[-2] > MAX_CELLS:
        raise InvalidParameterError(
            f"the two largest columns have {sizes[-1]} and {sizes[-2]} cells, so a pair's "
            f"marginal would have more than {MAX_CELLS:,} cells; use fewer bins or categories."
        )


def _rho_and_delta(
    epsilon: object, delta: object, rho: object, accountant: Any
) -> tuple[Fraction, float]:
    """ρ to spend and the δ its (ε, δ) charge is stated at (public input only)."""
    if (epsilon is None) == (rho is None):
        raise InvalidParameterError(
            "give exactly one of epsilon= (with delta=, an (ε, δ) guarantee) or rho= (ρ-zCDP)."
        )
    if delta is None:
        delta = float(accountant.budget.delta)
        if delta == 0:
            raise InvalidParameterError(
                "a synthetic table is ρ-zCDP, stated as (ε, δ) with δ > 0; give delta= (e.g. "
                "1e-9), or open the session with a budget delta > 0."
            )
    d = check_delta(delta, allow_zero=False)
    if rho is not None:
        if isinstance(rho, bool) or not isinstance(rho, int | float) or not 0 < rho < math.inf:
            raise InvalidParameterError(f"rho must be a finite number > 0, got {rho!r}.")
        return Fraction(rho), d
    e = check_epsilon(epsilon)
    r = largest_rho(e, d)
    if r <= 0:
        raise InvalidParameterError("epsilon is too small for any ρ at this delta.")
    return r, d


@dataclass(frozen=True)
class _Prepared:
    """A call's public inputs, checked (before the charge)."""

    rows: int
    names: tuple[str, ...]
    attributes: tuple[Attribute, ...]
    rho: Fraction
    delta: float
    label: str


def _prepare(
    method: str,
    inputs: SynthesisInputs,
    rows: object,
    epsilon: object,
    delta: object,
    rho: object,
    columns: object,
    bins: object,
) -> _Prepared:
    """Every check that needs no data, shared by the methods (refusals before the charge)."""
    if inputs.privacy_unit is not None:
        raise InvalidParameterError(
            "synthesize does not support a privacy unit yet (a person's several rows would "
            "move each marginal by more than 1); open a session without privacy_unit= on a "
            "table with one row per person."
        )
    if importlib.util.find_spec("mbi") is None:
        raise InvalidParameterError(
            "synthesize needs the Private-PGM package mbi (and JAX): pip install 'dpkit[synth]'."
        )
    if not hasattr(inputs.engine, "coded_counts"):
        raise InvalidParameterError(
            "synthesize needs an engine that counts coded cells (DuckDB or Spark); this engine has none."
        )
    n_rows = _check_rows(rows)
    names = _check_columns(columns, inputs)
    n_bins = check_bins(bins)
    attributes = discretise(inputs.schema, inputs.kinds, names, n_bins)
    _check_categories(attributes, inputs)
    _check_cells(attributes)
    total, d = _rho_and_delta(epsilon, delta, rho, inputs.accountant)
    label = f"synthesize {method} columns={list(names)} rows={n_rows} bins={n_bins}"
    return _Prepared(n_rows, names, attributes, total, d, label)


def _charge_and_report(
    inputs: SynthesisInputs,
    prepared: _Prepared,
    label: str,
    release: Callable[[], Any],
    report: Callable[[Any], SynthesisReport],
) -> SynthesisResult:
    """Charge ρ (as ``ZCDPEvent(ρ, ε', δ)``), run ``release``, and build the result."""
    charge: Budget = zcdp_to_dp(prepared.rho, prepared.delta)
    event = ZCDPEvent(prepared.rho, epsilon=charge.epsilon_exact, delta=charge.delta_exact)
    outcome = charge_and_run(inputs.accountant, charge, label, release, event=event)
    privacy = PrivacyReport(
        epsilon=float(charge.epsilon_exact),
        delta=float(charge.delta_exact),
        rho=float(prepared.rho),
        neighbouring=neighbouring(None, 1, None),
        mechanisms=("discrete_gaussian", "exponential"),
        remaining=None if inputs.accountant is None else inputs.accountant.remaining_seen,
    )
    edges = {a.name: a.coding.edges for a in prepared.attributes if a.coding.edges is not None}
    shown = replace(report(outcome), edges=edges)
    return SynthesisResult(decode(prepared.attributes, outcome.codes), shown, privacy)


def synthesize_mst(
    inputs: SynthesisInputs,
    *,
    rows: int,
    epsilon: float | None = None,
    delta: float | None = None,
    rho: float | None = None,
    columns: Sequence[str] | None = None,
    bins: int = 16,
    workload: object = None,
    progress: Progress | None = None,
) -> SynthesisResult:
    """MST synthetic data through the session's engine and accountant.

    Guarantee: ρ-zCDP under add/remove one row (the session must have no
    privacy unit: with one, this refuses, before the charge), charged as the
    event ``ZCDPEvent(ρ, ε', δ)`` with ``(ε', δ)`` the CKS conversion of ρ
    (``ε' <= epsilon`` when ``epsilon=`` is given: ρ is the largest that fits).
    Sensitivity: each measured marginal is a vector of counts in which one row
    falls in exactly one cell (ℓ2 and ℓ1 sensitivity 1); the selection's
    utilities are integers that one row moves by at most 1. The 1/3 split of ρ
    between the one-way marginals, the selection and the pair marginals, and
    the proof, are in :mod:`dpkit.synth.mst`; the discretisation (public) is
    :mod:`dpkit.synth.domain`. MST has no workload (``workload=`` is refused).
    ``progress``: called with each step's name and count (public parameters
    only, :data:`dpkit.synth.mst.Progress`).
    """
    p = _prepare("mst", inputs, rows, epsilon, delta, rho, columns, bins)
    if workload is not None:
        raise InvalidParameterError(
            "MST takes no workload (it selects a tree of pairs itself); use method='aim' to "
            "give a workload."
        )
    check_shares(p.rho, len(p.attributes), p.delta)

    def release() -> Any:
        return run_mst(inputs.engine, p.attributes, p.rows, p.rho, p.delta, inputs.rng, progress)

    third = float(p.rho / 3)

    def report(outcome: Any) -> SynthesisReport:
        return SynthesisReport(
            method="mst",
            rows=p.rows,
            rho=float(p.rho),
            steps={"one-way marginals": third, "selection": third, "pair marginals": third},
            marginals=tuple(_shown(m) for m in outcome.measurements),
            selected=outcome.selected,
            selection_epsilon=outcome.selection_epsilon,
            cells={a.name: a.labels for a in p.attributes},
        )

    return _charge_and_report(inputs, p, p.label, release, report)


def _check_workload(workload: object, names: tuple[str, ...]) -> tuple[tuple[str, ...], ...]:
    """The workload as sorted-by-position column tuples (default: every pair of ``names``)."""
    if workload is None:
        return tuple(combinations(names, 2))
    if isinstance(workload, str) or not isinstance(workload, Sequence) or not workload:
        raise InvalidParameterError(
            "workload must be a non-empty list of column tuples, e.g. [('age', 'sex')]."
        )
    if len(workload) > MAX_WORKLOAD:
        raise InvalidParameterError(f"workload has more than {MAX_WORKLOAD} marginals.")
    position = {n: i for i, n in enumerate(names)}
    out: list[tuple[str, ...]] = []
    for item in workload:
        if isinstance(item, str) or not isinstance(item, Sequence) or not 1 <= len(item) <= 2:
            raise InvalidParameterError(
                "each workload entry must be a tuple of 1 or 2 column names (AIM's candidates "
                "are the workload's one- and two-way marginals)."
            )
        for c in item:
            if not isinstance(c, str) or c not in position:
                raise InvalidParameterError(
                    f"workload names column {c!r}, which is not among the synthesized columns "
                    f"{list(names)}."
                )
        if len(set(item)) != len(item):
            raise InvalidParameterError("a workload entry lists a column twice.")
        entry = tuple(sorted(item, key=position.__getitem__))
        if entry not in out:
            out.append(entry)
    return tuple(out)


def synthesize_aim(
    inputs: SynthesisInputs,
    *,
    rows: int,
    epsilon: float | None = None,
    delta: float | None = None,
    rho: float | None = None,
    columns: Sequence[str] | None = None,
    bins: int = 16,
    workload: Sequence[Sequence[str]] | None = None,
    progress: Progress | None = None,
) -> SynthesisResult:
    """AIM synthetic data through the session's engine and accountant.

    Guarantee: ρ-zCDP under add/remove one row (no privacy unit: refused
    before the charge), charged as ``ZCDPEvent(ρ, ε', δ)`` as for MST.
    Sensitivity: each measured marginal has ℓ2 sensitivity 1 (one row, one
    cell); a selection round's qualities are integers that one row moves by
    at most the largest candidate weight (the number of workload columns a
    candidate shares, summed over the workload: public). The rounds, their
    exact budget (never more than ρ in all, at most ``16·d`` rounds) and the
    proof are in :mod:`dpkit.synth.aim`. ``workload``: the marginals the
    synthetic table should preserve (public; default every pair of
    ``columns``), each of one or two columns. The report gives, for every
    workload marginal a measurement covers, its expected ℓ1 error (counts).
    ``progress``: as for MST; ``"rounds"`` counts the rounds out of ``16·d``.
    """
    p = _prepare("aim", inputs, rows, epsilon, delta, rho, columns, bins)
    work = _check_workload(workload, p.names)
    aim.check_shares(p.rho, len(p.attributes), p.delta)
    label = f"{p.label} workload={[list(w) for w in work]}"

    def release() -> Any:
        return aim.run_aim(
            inputs.engine, p.attributes, work, p.rows, p.rho, p.delta, inputs.rng,
            progress=progress,
        )  # fmt: skip

    def report(outcome: Any) -> SynthesisReport:
        rounds = outcome.rounds
        d = len(p.attributes)
        one_way = float(sum((m.rho for m in outcome.measurements[:d]), Fraction(0)))
        return SynthesisReport(
            method="aim",
            rows=p.rows,
            rho=float(p.rho),
            steps={
                "one-way marginals": one_way,
                "selection": float(sum((r.rho_select for r in rounds), Fraction(0))),
                "selected marginals": float(sum((r.rho_measure for r in rounds), Fraction(0))),
            },
            marginals=tuple(_shown(m) for m in outcome.measurements),
            selected=tuple(r.clique for r in rounds),
            selection_epsilon=max((r.epsilon for r in rounds), default=0.0),
            cells={a.name: a.labels for a in p.attributes},
            selection_epsilons=tuple(r.epsilon for r in rounds),
            errors=outcome.errors,
        )

    return _charge_and_report(inputs, p, label, release, report)


def _shown(m: Measurement) -> MeasuredMarginal:
    merges = {
        c: tuple(int(x) for x in cells)
        for c, cells in zip(m.columns, m.merges or ())
        if cells is not None
    }
    return MeasuredMarginal(m.columns, m.sigma, float(m.rho), m.noisy, merges)
