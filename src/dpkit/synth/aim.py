"""AIM (McKenna, Mullins, Sheldon & Miklau 2022): workload-adaptive marginals, measured round by round.

Guarantee: ρ-zCDP under add/remove one row (hence (ε, δ)-DP, ε the CKS
conversion of ρ at δ), for ``d >= 2`` discretised columns
(:mod:`dpkit.synth.domain`, public) and a public workload ``W`` of column
tuples (default: every pair). Everything below except the exact marginals
reads only public input or released values.

Candidates: the downward closure of ``W`` (every non-empty subset of a
workload tuple), each with the public weight ``w_c = Σ_{r ∈ W} |c ∩ r|``.

Budget, in exact fractions (``T = 16·d``, public; ``s`` =
:data:`ONE_WAY_SHARE`, public, ``None`` (the paper's split) by default;
``R = (1 - s)·ρ``, or ``R = ρ`` for the paper's split):

1. **One-way marginals**: every column's counts with discrete Gaussian noise
   at ``ρ_1 = s·ρ/d`` each (:meth:`DiscreteGaussian.from_rho
   <dpkit.mechanisms.DiscreteGaussian.from_rho>`, σ² = ⌈1/(2ρ_1)⌉, so its
   zCDP is at most ρ_1; a row is in one cell: ℓ2 sensitivity 1). With
   ``s = None`` (the paper's split) ``ρ_1 = ρ_m`` below and ``R = ρ``.
   With :data:`MERGE_RARE_CELLS` (off by default, see below) each column's
   cells whose noisy count is below 3σ are then merged for every later step
   (:mod:`dpkit.synth.compression`: released values only, sensitivity
   still 1).
2. **Rounds** while budget is left, each spending ``ρ_m + ρ_s`` (measurement,
   selection; ``ρ_m = (9/10)·R/T`` and ``ρ_s = R/(10T)`` at first). If the
   budget left is below ``2(ρ_m + ρ_s)``, this round is the last:
   ``ρ_m = (9/10)·left``, ``ρ_s = left/10``. A round:

   * **selects** a candidate with the exponential mechanism at
     ``ε_s = √(8ρ_s)`` (rounded down so that ``ε_s²/8 <= ρ_s`` exactly; ε_s-DP
     hence ``ε_s²/8``-zCDP, Cesar & Rogers 2021) among the candidates whose
     model would stay below the public size limit ``max_size·spent/ρ`` MB (or
     whose clique the model already has: always the one-way ones). The
     quality of ``c`` is ``w_c·(Σ|x_c - round(x̂_c)| - round(√(2/π)·σ·n_c))``:
     ``x_c`` the exact counts (in merged cells), ``x̂_c`` the current model's
     (released values only), σ of this round's measurement, ``n_c`` the
     cells. It is an integer (computed exactly) and one row moves one cell of
     ``x_c`` by 1, so it moves by at most ``w_c <= max_c w_c``: the
     sensitivity, as in the paper.
   * **measures** the selected marginal at ``ρ_m`` (as in step 1), refits the
     model (``mbi``, warm-started), and if the fit moved the selected marginal
     by less than ``√(2/π)·σ·n_c`` in ℓ1 (a function of the model: released),
     **anneals**: ``ρ_m`` and ``ρ_s`` times 4 (σ halved, ε_s doubled).

**The budget never overspends** (``Σ`` of the shares ``<= ρ``, exactly):
step 1 spends ``s·ρ = ρ - R`` (the paper's split: ``d·ρ_m = (9/10)·ρ/16 <
ρ``). A round that is not the last runs only when ``left >= 2(ρ_m + ρ_s)``
and spends ``ρ_m + ρ_s``, so it leaves at least ``ρ_m + ρ_s > 0``; the last
spends ``(9/10)·left + left/10 = left`` exactly. So the total spent is ``ρ``
when the loop ends, and at most ``ρ`` before. Each mechanism's own zCDP is
at most its share (the discrete Gaussian's σ² is rounded up, ε_s rounded
down). **The rounds are bounded**: shares only grow, so every round before
the last spends at least ``R/T`` out of at most ``R`` left after step 1:
at most ``T`` rounds in all. Every share is at least ``(9/10)·R/T``
(measurement) and ``R/(10T)`` (selection) — the last round's ``left`` is at
least the previous round's spend, or all of ``R`` (the paper's split: ``ρ(1
- 9/160)``) — and ``ρ_1 >= (9/10)·R/T``; :func:`check_shares` checks the
smallest before the charge. Adaptive zCDP composition (Bun & Steinke 2016)
gives ρ.

**Why the paper's split and no merge by default**, measured (mean two-way
TV; ``benchmarks/synth.py`` rows ``dpkit-aim-halfoneway``, ``-merge``):

===========================  ==========================  ===========================
one-way share, merge         Titanic, ε = 0.3 (3 seeds)  California, ε = 1 (2 seeds)
===========================  ==========================  ===========================
the paper's, no merge        0.347                       0.084 (1 seed)
the paper's, merged          0.451                       0.077
½ (OpenDP's), no merge       0.262                       0.098
½, merged                    0.266                       0.097
===========================  ==========================  ===========================

Half of ρ on the one-way marginals (OpenDP's split; the paper's σ is about
3 times larger) wins at low signal and loses at high signal, where the
rounds need the budget; merging helps at high signal and hurts the paper's
split at low signal, where its one-way σ is so large that nearly every cell
merges and a round can no longer refine a merged one-way marginal. Neither
wins everywhere, so AIM stays the paper's until a schedule that adapts to the
released one-way marginals is measured.

The fits between rounds and the final fit and sampling (Private-PGM) read
only released values: post-processing. Which candidates are admissible, the
annealing and the number of rounds depend only on released values.

Differences from the paper's reference code: the exact discrete Gaussian;
integer qualities (the model's counts and the bias rounded, both public, so
that the data-dependent part is an exact integer); fewer mirror-descent
iterations between rounds (warm-started; post-processing).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from itertools import combinations
from typing import Any

import numpy as np
from numpy.typing import NDArray

from dpkit._checks import check_epsilon
from dpkit.errors import InvalidParameterError
from dpkit.mechanisms import DiscreteGaussian, as_source, exponential
from dpkit.synth.compression import cell_maps, grouped, merges_of
from dpkit.synth.domain import Attribute
from dpkit.synth.marginals import marginal
from dpkit.synth.mst import (
    FIT_ITERATIONS,
    Measurement,
    Progress,
    counted,
    fit_model,
    measure,
    sample_model,
    selection_epsilon,
)

__all__ = [
    "AIMOutcome",
    "Round",
    "RoundBudget",
    "candidates",
    "check_shares",
    "max_rounds",
    "run_aim",
]

#: The model-size limit (MB of the junction tree's cliques) of the paper's reference code.
MAX_MODEL_MB = 80.0
#: Mirror-descent iterations of each refit between rounds (warm-started; post-processing).
ROUND_ITERATIONS = 250
#: Shares: 9/10 of each round's ρ measures, 1/10 selects (the paper's split).
MEASURE_SHARE = Fraction(9, 10)
#: The share of ρ the one-way marginals spend, ``s·ρ/d`` each (``None``: the paper's, a round's
#: measurement share each); the rounds share the rest. Why the paper's: the module's docstring.
ONE_WAY_SHARE: Fraction | None = None
#: Merge each column's rare cells after the one-way step (:mod:`dpkit.synth.compression`), as
#: MST does. Off: see the module's docstring.
MERGE_RARE_CELLS = False


@dataclass(frozen=True)
class Round:
    """One AIM round: the selected clique, its measurement's σ and ρ, and the selection's ε, ρ."""

    clique: tuple[str, ...]
    sigma: float
    rho_measure: Fraction
    epsilon: float
    rho_select: Fraction


@dataclass(frozen=True)
class AIMOutcome:
    """What AIM releases: the measurements, the rounds, per-workload error estimates and codes."""

    measurements: tuple[Measurement, ...]
    rounds: tuple[Round, ...]
    errors: dict[tuple[str, ...], float | None]
    codes: dict[str, NDArray[np.int64]]


def max_rounds(d: int) -> int:
    """The paper's bound on the rounds (``16·d``; the loop can run no more, see the module)."""
    return 16 * d


def candidates(workload: Sequence[tuple[int, ...]]) -> dict[tuple[int, ...], int]:
    """Every non-empty subset of a workload tuple, with weight ``Σ_r |c ∩ r|`` (public)."""
    out: dict[tuple[int, ...], int] = {}
    for r in workload:
        for k in range(1, len(r) + 1):
            for c in combinations(sorted(r), k):
                out.setdefault(c, 0)
    for c in out:
        out[c] = sum(len(set(c) & set(r)) for r in workload)
    return dict(sorted(out.items(), key=lambda item: (len(item[0]), item[0])))


def check_shares(rho: Fraction, d: int, delta: float) -> None:
    """Build the smallest mechanisms AIM can use, from public input: refuse before the charge."""
    first = RoundBudget(rho, d, ONE_WAY_SHARE)
    try:
        DiscreteGaussian.from_rho(min(first.r_m, first.one_way), delta=delta, sensitivity=1)
        check_epsilon(selection_epsilon(first.r_s, 1), share=True, warn=False)
    except InvalidParameterError:
        raise InvalidParameterError(
            f"rho={float(rho):g} is too small for AIM on {d} columns: its smallest share "
            f"(a selection's, about rho/{round(float(rho / first.r_s))}) is below what the exact "
            "samplers support; give a larger rho (or epsilon) or fewer columns."
        ) from None


class RoundBudget:
    """The exact bookkeeping of the rounds (the module's proof): ``next_round``, ``anneal``.

    ``next_round()`` returns the (measurement, selection) ρ of the next round
    and sets ``done`` when it is the last; ``spent`` is the exact total so far.
    """

    def __init__(self, rho: Fraction, d: int, one_way: Fraction | None = None) -> None:
        if one_way is not None and not 0 < one_way < 1:
            raise ValueError("the one-way share must be in (0, 1): the rounds need a share")
        t = max_rounds(d)
        rest = rho if one_way is None else (1 - one_way) * rho
        self.rho = rho
        self.r_m = MEASURE_SHARE * rest / t
        self.r_s = (1 - MEASURE_SHARE) * rest / t
        self.one_way = self.r_m if one_way is None else one_way * rho / d
        self.spent = d * self.one_way
        self.done = False

    def next_round(self) -> tuple[Fraction, Fraction]:
        left = self.rho - self.spent
        if left < 2 * (self.r_m + self.r_s):
            self.r_m, self.r_s = MEASURE_SHARE * left, left - MEASURE_SHARE * left
            self.done = True
        self.spent += self.r_m + self.r_s
        return self.r_m, self.r_s

    def anneal(self) -> None:
        self.r_m, self.r_s = 4 * self.r_m, 4 * self.r_s


def _projection(
    model: Any,
    columns: tuple[str, ...],
    shape: tuple[int, ...],
    maps: Sequence[NDArray[np.int64] | None],
) -> NDArray[np.float64]:
    """The model's marginal on ``columns``, summed into merged cells (flat; released values only)."""
    cells = np.asarray(model.project(columns).datavector(flatten=True), dtype=np.float64)
    return grouped(cells.reshape(shape), maps).ravel()


def _admissible(
    model: Any, attributes: Sequence[Attribute], cands: Sequence[tuple[str, ...]], limit: float
) -> list[tuple[str, ...]]:
    """The candidates the model can take within ``limit`` MB, or whose clique it already has."""
    from mbi import Domain
    from mbi.junction_tree import hypothetical_model_size

    domain = Domain(tuple(a.name for a in attributes), tuple(a.size for a in attributes))
    have = [tuple(c) for c in model.cliques]
    free = {
        tuple(sorted(s)) for c in have for k in range(1, len(c) + 1) for s in combinations(c, k)
    }
    out = []
    for c in cands:
        if tuple(sorted(c)) in free or hypothetical_model_size(domain, [*have, c]) <= limit:
            out.append(c)
    return out


def _error_estimates(
    workload: Sequence[tuple[str, ...]], measurements: Sequence[Measurement]
) -> dict[tuple[str, ...], float | None]:
    """Each workload marginal's expected ℓ1 error (counts) when a measurement covers it, else None.

    A measured clique ``c ⊇ r`` summed onto ``r`` has independent noise of
    variance ``σ²·n_c/n_r`` per cell: expected ℓ1 error ``√(2/π)·σ·√(n_c·n_r)``
    (the best such measurement), ``n_c`` and ``n_r`` counted in the cells the
    measurement has (merged cells count once). From public values only.
    """
    out: dict[tuple[str, ...], float | None] = {}
    for r in workload:
        best = [
            math.sqrt(2 / math.pi)
            * m.sigma
            * math.sqrt(m.noisy.size * math.prod(m.noisy.shape[m.columns.index(a)] for a in r))
            for m in measurements
            if set(r) <= set(m.columns)
        ]
        out[r] = min(best) if best else None
    return out


def run_aim(
    engine: Any,
    attributes: Sequence[Attribute],
    workload: Sequence[tuple[str, ...]],
    rows: int,
    rho: Fraction,
    delta: float,
    rng: object,
    max_size: float = MAX_MODEL_MB,
    progress: Progress | None = None,
) -> AIMOutcome:
    """Measure the one-way marginals, then select, measure and refit until ρ is spent (see module).

    ``progress`` (optional, :data:`~dpkit.synth.mst.Progress`) hears each step's name and count;
    ``"rounds"`` counts the rounds run out of the public bound :func:`max_rounds`.
    """
    report: Progress = progress or (lambda step, done, total: None)
    source = as_source(rng)
    d = len(attributes)
    index = {a.name: i for i, a in enumerate(attributes)}
    weights = candidates([tuple(index[c] for c in r) for r in workload])
    names = {c: tuple(attributes[i].name for i in c) for c in weights}
    counts = counted(
        report,
        "candidate counts",
        [lambda c=c: marginal(engine, [attributes[i] for i in c]) for c in weights],
    )
    sensitivity = max(weights.values())
    budget = RoundBudget(rho, d, ONE_WAY_SHARE)
    measurements: list[Measurement] = counted(
        report,
        "one-way marginals",
        [
            lambda a=a: measure(marginal(engine, [a]), (a.name,), budget.one_way, delta, source)
            for a in attributes
        ],
    )
    # Post-processing of the released one-way marginals: rare cells merged for every round.
    merges = merges_of(measurements) if MERGE_RARE_CELLS else {}
    maps = {c: cell_maps(names[c], merges) for c in weights}
    shapes = {c: tuple(attributes[i].size for i in c) for c in weights}
    exact = {c: grouped(x, maps[c]) for c, x in zip(weights, counts)}
    model = fit_model(attributes, measurements, ROUND_ITERATIONS)
    rounds: list[Round] = []
    report("rounds", 0, max_rounds(d))
    while not budget.done:
        r_m, r_s = budget.next_round()
        sigma = float(DiscreteGaussian.from_rho(r_m, delta=delta, sensitivity=1).sigma)
        eps = selection_epsilon(r_s, 1)
        limit = max_size * float(budget.spent / rho)
        admissible = set(_admissible(model, attributes, list(names.values()), limit))
        pool = [c for c in weights if names[c] in admissible]
        qualities = []
        for c in pool:
            fitted = np.rint(_projection(model, names[c], shapes[c], maps[c])).astype(np.int64)
            l1 = int(np.abs(exact[c].ravel() - fitted).sum())  # integer: exact, sensitivity 1
            bias = round(math.sqrt(2 / math.pi) * sigma * exact[c].size)
            qualities.append(float(weights[c] * (l1 - bias)))
        pick = pool[
            int(
                exponential(
                    qualities, epsilon=eps, sensitivity=sensitivity, integral=True, rng=source
                )
            )
        ]
        m = measure(exact[pick], names[pick], r_m, delta, source, maps[pick])
        measurements.append(m)
        before = _projection(model, names[pick], shapes[pick], maps[pick])
        model = fit_model(attributes, measurements, ROUND_ITERATIONS, warm_start=model)
        after = _projection(model, names[pick], shapes[pick], maps[pick])
        rounds.append(Round(names[pick], m.sigma, r_m, eps, r_s))
        if float(np.abs(after - before).sum()) <= math.sqrt(2 / math.pi) * m.sigma * m.noisy.size:
            budget.anneal()
        report("rounds", len(rounds), max_rounds(d))
    report("model fit", 0, 1)
    model = fit_model(attributes, measurements, FIT_ITERATIONS, warm_start=model)
    report("model fit", 1, 1)
    seed = int(source.words(1)[0] % np.uint64(2**32))
    report("sampling", 0, 1)
    codes = sample_model(model, attributes, rows, seed)
    report("sampling", 1, 1)
    errors = _error_estimates(workload, measurements)
    return AIMOutcome(tuple(measurements), tuple(rounds), errors, codes)
