"""AIM (McKenna, Mullins, Sheldon & Miklau 2022): workload-adaptive marginals, measured round by round.

Guarantee: ρ-zCDP under add/remove one row (hence (ε, δ)-DP, ε the CKS
conversion of ρ at δ), for ``d >= 2`` discretised columns
(:mod:`dpkit.synth.domain`, public) and a public workload ``W`` of column
tuples (default: every pair). Everything below except the exact marginals
reads only public input or released values.

Candidates: the downward closure of ``W`` (every non-empty subset of a
workload tuple), each with the public weight ``w_c = Σ_{r ∈ W} |c ∩ r|``.

Budget, in exact fractions (``T = 16·d``, public):

1. **One-way marginals**: every column's counts with discrete Gaussian noise
   at ``ρ_m = (9/10)·ρ/T`` each (:meth:`DiscreteGaussian.from_rho
   <dpkit.mechanisms.DiscreteGaussian.from_rho>`, σ² = ⌈1/(2ρ_m)⌉, so its
   zCDP is at most ρ_m; a row is in one cell: ℓ2 sensitivity 1).
2. **Rounds** while budget is left, each spending ``ρ_m + ρ_s`` (measurement,
   selection; ``ρ_s = ρ/(10T)`` at first). If the budget left is below
   ``2(ρ_m + ρ_s)``, this round is the last: ``ρ_m = (9/10)·left``,
   ``ρ_s = left/10``. A round:

   * **selects** a candidate with the exponential mechanism at
     ``ε_s = √(8ρ_s)`` (rounded down so that ``ε_s²/8 <= ρ_s`` exactly; ε_s-DP
     hence ``ε_s²/8``-zCDP, Cesar & Rogers 2021) among the candidates whose
     model would stay below the public size limit ``max_size·spent/ρ`` MB (or
     whose clique the model already has: always the one-way ones). The
     quality of ``c`` is ``w_c·(Σ|x_c - round(x̂_c)| - round(√(2/π)·σ·n_c))``:
     ``x_c`` the exact counts, ``x̂_c`` the current model's (released values
     only), σ of this round's measurement, ``n_c`` the cells. It is an integer
     (computed exactly) and one row moves one cell of ``x_c`` by 1, so it
     moves by at most ``w_c <= max_c w_c``: the sensitivity, as in the paper.
   * **measures** the selected marginal at ``ρ_m`` (as in step 1), refits the
     model (``mbi``, warm-started), and if the fit moved the selected marginal
     by less than ``√(2/π)·σ·n_c`` in ℓ1 (a function of the model: released),
     **anneals**: ``ρ_m`` and ``ρ_s`` times 4 (σ halved, ε_s doubled).

**The budget never overspends** (``Σ`` of the rounds' ρ ``<= ρ``, exactly):
step 1 spends ``d·ρ_m = (9/10)·ρ/16 < ρ``. A round that is not the last runs
only when ``left >= 2(ρ_m + ρ_s)`` and spends ``ρ_m + ρ_s``, so it leaves at
least ``ρ_m + ρ_s > 0``; the last spends ``(9/10)·left + left/10 = left``
exactly. So the total spent is ``ρ`` when the loop ends, and at most ``ρ``
before. Each mechanism's own zCDP is at most its share (the discrete
Gaussian's σ² is rounded up, ε_s rounded down). **The rounds are bounded**:
shares only grow, so every round before the last spends at least ``ρ/T``
and, with step 1's ``> 0``, fewer than ``T`` of them fit: at most ``T``
rounds in all. Every share is at least ``(9/10)·ρ/T`` (measurement) and
``ρ/(10T)`` (selection) — the last round's ``left`` is at least the previous
round's spend, or ``ρ(1 - 9/160)`` — which :func:`check_shares` checks
before the charge. Adaptive zCDP composition (Bun & Steinke 2016) gives ρ.

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
    t = max_rounds(d)
    try:
        DiscreteGaussian.from_rho(MEASURE_SHARE * rho / t, delta=delta, sensitivity=1)
        check_epsilon(selection_epsilon((1 - MEASURE_SHARE) * rho / t, 1), share=True, warn=False)
    except InvalidParameterError:
        raise InvalidParameterError(
            f"rho={float(rho):g} is too small for AIM on {d} columns: its smallest share "
            f"(rho/{10 * t} for a selection) is below what the exact samplers support; give a "
            "larger rho (or epsilon) or fewer columns."
        ) from None


class RoundBudget:
    """The exact bookkeeping of the rounds (the module's proof): ``next_round``, ``anneal``.

    ``next_round()`` returns the (measurement, selection) ρ of the next round
    and sets ``done`` when it is the last; ``spent`` is the exact total so far.
    """

    def __init__(self, rho: Fraction, d: int) -> None:
        t = max_rounds(d)
        self.rho = rho
        self.r_m = MEASURE_SHARE * rho / t
        self.r_s = (1 - MEASURE_SHARE) * rho / t
        self.spent = d * self.r_m
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


def _projection(model: Any, columns: tuple[str, ...]) -> NDArray[np.float64]:
    return np.asarray(model.project(columns).datavector(flatten=True), dtype=np.float64)


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
    workload: Sequence[tuple[str, ...]],
    measurements: Sequence[Measurement],
    sizes: dict[str, int],
) -> dict[tuple[str, ...], float | None]:
    """Each workload marginal's expected ℓ1 error (counts) when a measurement covers it, else None.

    A measured clique ``c ⊇ r`` summed onto ``r`` has independent noise of
    variance ``σ²·n_c/n_r`` per cell: expected ℓ1 error ``√(2/π)·σ·√(n_c·n_r)``
    (the best such measurement). Computed from public values only.
    """
    out: dict[tuple[str, ...], float | None] = {}
    for r in workload:
        n_r = math.prod(sizes[a] for a in r)
        best = [
            math.sqrt(2 / math.pi)
            * m.sigma
            * math.sqrt(math.prod(sizes[a] for a in m.columns) * n_r)
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
    exact = dict(zip(weights, counts))
    sensitivity = max(weights.values())
    budget = RoundBudget(rho, d)
    measurements: list[Measurement] = counted(
        report,
        "one-way marginals",
        [
            lambda a=a: measure(marginal(engine, [a]), (a.name,), budget.r_m, delta, source)
            for a in attributes
        ],
    )
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
            fitted = np.rint(_projection(model, names[c])).astype(np.int64)
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
        m = measure(exact[pick], names[pick], r_m, delta, source)
        measurements.append(m)
        before = _projection(model, names[pick])
        model = fit_model(attributes, measurements, ROUND_ITERATIONS, warm_start=model)
        after = _projection(model, names[pick])
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
    errors = _error_estimates(workload, measurements, {a.name: a.size for a in attributes})
    return AIMOutcome(tuple(measurements), tuple(rounds), errors, codes)
