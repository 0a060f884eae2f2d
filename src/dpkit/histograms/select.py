"""The workload-aware default: DAWA, the matrix mechanism, Hb or AHP, by a public rule and probes.

The public part (:func:`choose_method`) is a function of the number of unit
bins n, epsilon, a public bound on the number of records (the scale) and the
workload; it never looks at the counts. For prefixes and ranges it takes the
matrix mechanism's optimised strategy from a modest signal on
(:func:`data_blind_choice` confirms its exact expected error is below Hb's).
Where it says Hb instead (single bins, larger domains) at high signal, the
one kind of data on which DAWA stays well ahead of Hb — very sparse,
concentrated counts — is told apart by a *concentration probe* that spends
:data:`PROBE_SHARE` of epsilon. Where it says the matrix mechanism for all
ranges at a high signal but with the sampling spread of a bin below the noise,
a *ties probe* (:data:`TIES_PROBE_SHARE` of epsilon) asks whether the counts
nearly take a few values, the data on which AHP's clusters beat it. Both
parts were derived from
``benchmarks/histograms_dpbench.py`` (DPBench's protocol on the shared data's
shapes); the table behind them is in ``docs/histograms.md``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from dpkit.accounting import Budget, as_accountant, charge_and_run
from dpkit.errors import InvalidParameterError
from dpkit.histograms._common import (
    check_counts,
    check_edges,
    check_positive,
    epsilon_of,
    source_for,
)
from dpkit.histograms._published import PublishedHistogram
from dpkit.histograms._workload import WORKLOADS
from dpkit.histograms.methods import publisher
from dpkit.histograms.structure_first import split_budget

#: Records per unit bin times epsilon from which the matrix mechanism is chosen
#: over DAWA (prefixes and ranges up to :data:`MATRIX_MAX_BINS` bins). On the
#: benchmark's 1,024-bin grid (20 runs a cell) it beats DAWA in every cell from
#: s·epsilon/n = 9.8 on (0.49-0.80x DAWA's error, the sparse fare shape
#: included) and not at 0.98 (0.67-1.43x); on the 4,096-bin grid (100 runs a
#: cell) it also wins at 2.44 (29 of 30 cells, up to 1.71x better than DAWA).
#: Any threshold in (0.98, 2.44] gives the same choices on both grids.
MATRIX_ABOVE = 2.0
#: Records per unit bin times epsilon below which the data-aware DAWA is chosen
#: over Hb (single bins, larger domains).
#: On the benchmark's grid the signal s·epsilon/n takes the values 0.01 .. 9,766
#: in factors of 10; any threshold between 10 and 97 gives the same choices.
DAWA_BELOW = 50.0
#: Share of epsilon the concentration probe spends where the public rule says Hb.
#: The chosen algorithm runs with the rest, so its noise grows by 1/(1 - share),
#: about 1%.
PROBE_SHARE = 0.01
#: The probe asks what share of the rows the largest n/64 unit bins hold ...
PROBE_TOP_DIVISOR = 64
#: ... and chooses DAWA when it is above this. On the benchmark's shapes with
#: n = 256 .. 2,048 bins the top n/64 hold 0.49 .. 0.66 of the Titanic fares
#: (where DAWA beats Hb) and at most 0.39 of the four others (where Hb beats
#: DAWA); see ``docs/histograms.md``.
CONCENTRATED_ABOVE = 0.45
#: The probe runs from this many unit bins on; below it the public rule stands
#: (with 128 bins DAWA's gain on the fare shape's ranges was matched by its
#: loss on prefixes).
PROBE_MIN_BINS = 256
#: l1 sensitivity of :func:`concentration_margin` under add/remove one row.
PROBE_SENSITIVITY = 1.0
#: The registered publishers :func:`auto`'s public rule may choose (the range of
#: :func:`choose_method`).
AUTO_CHOICES = ("dawa", "hb", "matrix_mechanism")
#: What a probe may switch to: DAWA (concentration probe), AHP (ties probe).
PROBE_CHOICES = ("dawa", "ahp")
#: The ties probe (below) runs from this signal s·epsilon/n on (the public rule says
#: the matrix mechanism there): AHP's clusters need levels far apart next to the
#: noise; on the benchmark's grid AHP loses every cell of signal 2.44 (by 3.6-237x).
TIES_MIN_SIGNAL = 10.0
#: ... and where a typical bin's sampling spread sqrt(s/n) is well below the noise
#: scale 1/epsilon (epsilon·sqrt(s/n) < this): only then can bins with equal shares of
#: the population stay equal within the noise, which is what AHP's averaging needs.
#: On the fare shape (all ranges, signal 24-98, 100 runs) AHP's error over the matrix
#: mechanism's is 0.80 at a spread of 0.49 (4,096 bins), 1.13 at 0.99 (1,024 bins)
#: and 1.24 at 1.56 (4,096 bins); 0.7 is the geometric middle of 0.49 and 0.99.
TIES_MAX_SPREAD = 0.7
#: Share of epsilon the ties probe spends.
TIES_PROBE_SHARE = 0.02
#: The number K of levels the ties probe fits to the counts ...
TIES_LEVELS = 32
#: ... and AHP is chosen when the counts are within this many noise scales (1/epsilon)
#: per bin of K levels: D_K(x) < TIES_BELOW·n/epsilon. On the 4,096-bin grid the fare
#: shape at s = 10⁷, epsilon = 0.01 (where AHP wins) has D_32·epsilon/n = 0.027, the
#: births shape in the same cell 0.128 and the three dense shapes 0.30-0.41
#: (``docs/histograms.md``).
TIES_BELOW = 0.06
#: l1 sensitivity of :func:`ties_margin` under add/remove one row.
TIES_SENSITIVITY = 1.0
#: Largest number of unit bins for which the rule weighs the matrix mechanism
#: (its strategy is optimised once per (n, workload) and cached). Beyond it Hb
#: wins: p-Identity's error grows about like n/p, and at 8,192 bins it only
#: breaks even (``benchmarks/histograms_strategies.py``).
MATRIX_MAX_BINS = 4096


def data_blind_choice(
    n: int, epsilon: float, workload: str, max_records: float | None = None
) -> str:
    """``"matrix_mechanism"`` or ``"hb"``: the smaller exact expected error (public).

    Both errors are mean noise variances over the same public sample of the
    workload's ranges (:func:`dpkit.histograms._workload.workload_ranges`),
    computed from n, epsilon and the workload only. Single-bin workloads
    (``"units"``), domains beyond :data:`MATRIX_MAX_BINS` and a public bound
    ``max_records`` of 2³³ rows or more (the matrix mechanism computes its
    measurements exactly below that total) keep Hb.
    """
    from dpkit.histograms.hb import expected_variance as hb_variance

    if workload not in WORKLOADS:
        raise InvalidParameterError(f"workload must be one of {', '.join(WORKLOADS)}.")
    if not _matrix_applies(n, workload, max_records):
        return "hb"
    from dpkit.histograms.matrix_mechanism import expected_variance as matrix_variance

    if matrix_variance(n, epsilon, workload) < hb_variance(n, epsilon, workload):
        return "matrix_mechanism"
    return "hb"


def choose_method(n: int, epsilon: float, max_records: float | None, workload: str) -> str:
    """The data-blind part of :func:`auto`'s rule: ``"dawa"``, ``"matrix_mechanism"`` or ``"hb"``.

    With s records spread over n bins, s·epsilon/n is the typical count of a
    bin in units of the noise scale. For prefixes and ranges over at most
    :data:`MATRIX_MAX_BINS` bins: from :data:`MATRIX_ABOVE` on the matrix
    mechanism (its optimised strategy; :func:`data_blind_choice` confirms its
    exact expected error is below Hb's), below it DAWA, whose data-aware
    buckets pay off when the noise is large next to the counts. Elsewhere
    (single bins, larger domains, s >= 2³³): DAWA below :data:`DAWA_BELOW`,
    Hb (flat for single bins) above — except on very sparse, concentrated
    data, where DAWA stays ahead of Hb (up to 1.29x on the benchmark's
    ``fare`` shape). A rule blind to the data cannot see that, so where this
    returns ``"hb"`` (and n >= :data:`PROBE_MIN_BINS`) :func:`auto` spends a
    small share of epsilon on a concentration probe and may switch to DAWA.
    The matrix mechanism needs no probe: it beats DAWA on that shape too.
    Without ``max_records`` DAWA is used: it is never far from the best when
    the counts are large, while Hb can be far from it when they are small.
    """
    if workload not in WORKLOADS:
        raise InvalidParameterError(f"workload must be one of {', '.join(WORKLOADS)}.")
    if max_records is None:
        return "dawa"
    signal = max_records * epsilon / n
    if signal >= MATRIX_ABOVE and _matrix_applies(n, workload, max_records):
        if data_blind_choice(n, epsilon, workload, max_records) == "matrix_mechanism":
            return "matrix_mechanism"
    return tree_rule(signal)


def tree_rule(signal: float) -> str:
    """DAWA below :data:`DAWA_BELOW`, else Hb: the rule where the matrix mechanism does not apply."""
    return "dawa" if signal < DAWA_BELOW else "hb"


def _matrix_applies(n: int, workload: str, max_records: float | None) -> bool:
    from dpkit.histograms.matrix_mechanism import EXACT_TOTAL

    too_many = max_records is not None and max_records >= EXACT_TOTAL
    return workload != "units" and not too_many and 2 <= n <= MATRIX_MAX_BINS


def probe_top_bins(n: int) -> int:
    """How many of the largest unit bins the concentration probe sums (public: n/64, >= 1)."""
    return max(1, int(n) // PROBE_TOP_DIVISOR)


def concentration_margin(
    x: NDArray[np.float64], top: int, threshold: float = CONCENTRATED_ABOVE
) -> float:
    """S_top(x) - threshold · sum(x): positive when the ``top`` largest bins hold more.

    S_top(x) is the sum of the ``top`` largest counts. Sensitivity under
    add/remove one row (one count moves by 1) is at most max(threshold,
    1 - threshold) <= 1; see :func:`auto`.
    """
    top_sum = float(np.partition(x, x.size - top)[x.size - top :].sum())
    return top_sum - threshold * float(x.sum())


def ties_probe_applies(n: int, epsilon: float, max_records: float | None, workload: str) -> bool:
    """Whether :func:`auto` runs the ties probe (public: n, epsilon, the bound, the workload).

    All ranges (the workload where AHP's clusters can beat the matrix mechanism;
    on prefixes it lost every cell of the benchmark, by 1.6x or more), a
    signal s·epsilon/n of at least :data:`TIES_MIN_SIGNAL`, and a sampling
    spread epsilon·sqrt(s/n) below :data:`TIES_MAX_SPREAD`. :func:`auto` asks
    this only where the public rule says the matrix mechanism.
    """
    if max_records is None or workload != "ranges":
        return False
    signal = max_records * epsilon / n
    return signal >= TIES_MIN_SIGNAL and epsilon * np.sqrt(max_records / n) < TIES_MAX_SPREAD


def ties_margin(x: NDArray[np.float64], epsilon: float) -> float:
    """TIES_BELOW·n/epsilon - D_K(x): positive when the counts nearly take K values.

    D_K is :func:`dpkit.histograms._levels.level_deviation` with K =
    :data:`TIES_LEVELS`, 1-Lipschitz in l1; the first term is public, so the
    margin's sensitivity under add/remove one row is at most 1.
    """
    from dpkit.histograms._levels import level_deviation

    return TIES_BELOW * x.size / epsilon - level_deviation(x, TIES_LEVELS)


def ties_probe(epsilon_probe: float) -> Any:
    """The ties probe's mechanism: Laplace noise of scale :data:`TIES_SENSITIVITY`/epsilon_probe."""
    from dpkit.mechanisms import Laplace

    return Laplace(epsilon=epsilon_probe, sensitivity=TIES_SENSITIVITY)


def probe_for(
    method: str, n: int, epsilon: float, max_records: float | None, workload: str
) -> tuple[str | None, float, str]:
    """Which probe :func:`auto` runs after the public rule chose ``method`` (public).

    Returns (kind, share of epsilon, the method a positive probe switches to):
    the ties probe (AHP) where the rule says the matrix mechanism and
    :func:`ties_probe_applies`; the concentration probe (DAWA) where it says Hb
    on at least :data:`PROBE_MIN_BINS` bins; otherwise no probe
    (``(None, 0.0, method)``).
    """
    if method == "matrix_mechanism" and ties_probe_applies(n, epsilon, max_records, workload):
        return "ties", TIES_PROBE_SHARE, "ahp"
    if method == "hb" and n >= PROBE_MIN_BINS:
        return "concentration", PROBE_SHARE, "dawa"
    return None, 0.0, method


def concentration_probe(epsilon_probe: float) -> Any:
    """The probe's mechanism: Laplace noise of scale :data:`PROBE_SENSITIVITY`/epsilon_probe."""
    from dpkit.mechanisms import Laplace

    return Laplace(epsilon=epsilon_probe, sensitivity=PROBE_SENSITIVITY)


def auto(
    counts: ArrayLike,
    epsilon: float,
    *,
    max_records: float | None = None,
    workload: str = "ranges",
    rng: object = None,
    accountant: Any = None,
    edges: ArrayLike | None = None,
) -> PublishedHistogram:
    """Publish with DAWA, the matrix mechanism, Hb or AHP: whichever suits the scale, workload and shape.

    Privacy: epsilon-DP for add/remove one row (neighbouring count vectors
    x, x' = x ± e_i: one unit count changes by 1).

    * Where no probe applies — :func:`choose_method` (a function of n,
      epsilon, ``max_records`` and ``workload``, all public) names DAWA, or
      the matrix mechanism outside :func:`ties_probe_applies`, or Hb on fewer
      than :data:`PROBE_MIN_BINS` bins — the chosen publisher
      (:func:`dpkit.histograms.dawa`, :func:`dpkit.histograms.matrix_mechanism`
      or :func:`dpkit.histograms.hb`, each epsilon-DP with its own proof) runs
      with all of epsilon. Weighted (fractional) counts, which the matrix
      mechanism refuses, take the DAWA/Hb rule instead: adding or removing a
      row moves one count by 1, so neighbours are both whole or both
      fractional and get the same choice.
    * Where the public rule says Hb (n >= :data:`PROBE_MIN_BINS`): a
      concentration probe first. epsilon_0 = :data:`PROBE_SHARE` · epsilon
      releases m(x) = S_k(x) - c · |x| + Lap(1/epsilon_0), where S_k(x) is the
      sum of the k = max(1, floor(n/64)) largest counts, |x| the total and c =
      :data:`CONCENTRATED_ABOVE` (k and c public). Sensitivity: for
      x' = x + e_i, |x'| = |x| + 1 and S_k(x) <= S_k(x') <= S_k(x) + 1 (every
      k-set's sum grows by 0 or 1, so the largest one does too), so m moves
      by d - c with d in [0, 1]: |m(x') - m(x)| <= max(c, 1 - c) <= 1
      (removal is the same with x and x' swapped). DAWA runs if the noisy m
      is > 0, else Hb.
    * Where the public rule says the matrix mechanism and
      :func:`ties_probe_applies` (all ranges, signal s·epsilon/n >=
      :data:`TIES_MIN_SIGNAL`, epsilon·sqrt(s/n) < :data:`TIES_MAX_SPREAD`; s =
      ``max_records``): a ties probe first. epsilon_0 =
      :data:`TIES_PROBE_SHARE` · epsilon releases
      t(x) = tau·n/epsilon - D_K(x) + Lap(1/epsilon_0), where D_K(x) is the least
      l1 distance from x to a vector with at most K = :data:`TIES_LEVELS`
      distinct values (:func:`dpkit.histograms._levels.level_deviation`, computed
      exactly) and tau = :data:`TIES_BELOW` (n, epsilon, tau, K public).
      Sensitivity: for every fixed c, Σ|x_i - c_i| moves by at most 1 when one
      count moves by 1, so their minimum D_K does too, and |t(x') - t(x)| <= 1.
      AHP runs if the noisy t is > 0, else the matrix mechanism. Counts the
      matrix mechanism refuses (a total of 2³³ rows or more, beyond the
      declared bound) are refused before the charge, as on the public path,
      so that nothing after it can fail.
    * Either probe is therefore epsilon_0-DP (dpkit's exact grid Laplace,
      sensitivity 1); the choice is post-processing of its release, and the
      chosen publisher runs with epsilon_1 = epsilon - epsilon_0
      (epsilon_1-DP whichever it is: DAWA, Hb, AHP and the matrix mechanism
      each carry their proof). By sequential composition the whole release is
      (epsilon_0 + epsilon_1)-DP = epsilon-DP. One charge of epsilon is made
      before the counts are read; epsilon_0 and epsilon_1 are floats rounded
      down so that their exact sum is at most epsilon. Which probe runs, and
      its parameters, depend on public inputs only.

    ``details`` holds the chosen method (``auto_choice``), whether the probe
    ran (``auto_rule``: ``"public"`` or ``"probe"``; ``probe_kind``: None,
    ``"concentration"`` or ``"ties"``), ``epsilon_probe`` (0.0 when it did
    not run) and ``epsilon_method`` (epsilon_1, or epsilon), the probe's
    public parameters (``probe_share``, ``probe_threshold``, and
    ``probe_top_bins`` or ``probe_levels``; None where they do not apply) and
    its noisy value ``probe_margin`` (None when it did not run). Releasing
    that value costs nothing more: it is the epsilon_0-DP output itself,
    already paid for, and the choice is a function of it anyway.

    Accuracy: as the publisher chosen, run with epsilon_1 (1% more noise after
    the concentration probe, 2% after the ties probe). The concentration
    probe's noise, of scale 1/epsilon_0 = 100/epsilon, decides the choice only
    where the top bins' share of the rows is within about
    100/(epsilon·|x|) of c — 0.8% when |x| = s = 12,800/epsilon, the least
    high-signal scale at n = 256. The ties probe's, of scale 50/epsilon,
    decides it only where D_K·epsilon/n is within about 50/n of tau (0.012 at
    n = 4,096); near the thresholds either choice may be made.

    Args:
        counts, epsilon, rng, accountant, edges: as for :func:`dpkit.histograms.laplace`.
        max_records: a public upper bound on the number of records (e.g. the
            size of the population the table is drawn from); never from the data.
        workload: the queries you will ask: ``"ranges"`` (default),
            ``"prefixes"`` (cumulative counts) or ``"units"`` (single bins).
    """
    names = dict.fromkeys((*AUTO_CHOICES, *PROBE_CHOICES))
    publishers = {name: publisher(name).publish for name in names}  # before the charge
    x = check_counts(counts)
    eps = epsilon_of(epsilon)
    bound = None if max_records is None else check_positive(max_records, "max_records")
    method = choose_method(x.size, eps, bound, workload)
    if method == "matrix_mechanism" and not np.array_equal(x, np.floor(x)):
        # Weighted (fractional) counts: the matrix mechanism takes whole numbers only. One
        # row moves one count by 1, so neighbours are both whole or both not: same choice.
        method = tree_rule(float(bound) * eps / x.size)  # type: ignore[arg-type]
    kind, share, switch = probe_for(method, x.size, eps, bound, workload)
    top = probe_top_bins(x.size)
    public = {
        "max_records": bound,
        "probe_kind": kind,
        "probe_share": share,
        "probe_top_bins": top if kind == "concentration" else None,
        "probe_levels": TIES_LEVELS if kind == "ties" else None,
        "probe_threshold": {"ties": TIES_BELOW, "concentration": CONCENTRATED_ABOVE}.get(str(kind)),
    }
    if kind is None:
        published = publishers[method](
            x, eps, workload=workload, rng=rng, accountant=accountant, edges=edges
        )
        details = dict(
            published.details,
            auto_choice=method,
            auto_rule="public",
            epsilon_probe=0.0,
            epsilon_method=eps,
            probe_margin=None,
            probe_scale=None,
            **public,
        )
        return dataclasses.replace(published, details=details)

    check_edges(edges, x.size)  # the publisher runs after the charge: refuse bad edges now
    if kind == "ties":
        from dpkit.histograms.matrix_mechanism import exact_counts

        # The matrix mechanism may run after the charge: refuse what it would refuse now,
        # as it does itself before its own charge on the public path.
        exact_counts(x)
    eps_probe, eps_method = split_budget(eps, share)
    probe = ties_probe(eps_probe) if kind == "ties" else concentration_probe(eps_probe)
    payer = as_accountant(accountant)

    def margin_of(values: NDArray[np.float64]) -> float:
        if kind == "ties":
            return ties_margin(values, eps)
        return concentration_margin(values, top)

    def release() -> PublishedHistogram:
        remaining = None if payer is None else payer.remaining
        source = source_for(rng)
        margin = float(probe.randomise(margin_of(x), rng=source))
        chosen = switch if margin > 0.0 else method  # post-processing of the probe
        if chosen == "ahp":  # AHP's clusters serve any workload: it takes none
            published = publishers[chosen](x, eps_method, rng=source, edges=edges)
        else:
            published = publishers[chosen](
                x, eps_method, workload=workload, rng=source, edges=edges
            )
        details = dict(
            published.details,
            remaining=remaining,
            auto_choice=chosen,
            auto_rule="probe",
            epsilon_probe=eps_probe,
            epsilon_method=eps_method,
            probe_margin=margin,
            probe_scale=probe.scale,
            **public,
        )
        return dataclasses.replace(published, epsilon=eps, details=details)

    return charge_and_run(payer, Budget(eps), "histogram: auto", release)
