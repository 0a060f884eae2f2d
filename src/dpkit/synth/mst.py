"""MST (McKenna, Miklau & Sheldon 2021): marginals on a private maximum spanning tree of pairs.

Guarantee: ρ-zCDP under add/remove one row (hence (ε, δ)-DP, ε the CKS
conversion of ρ at δ), for a table of ``d >= 2`` discretised columns
(:mod:`dpkit.synth.domain`, public). The budget is split in three equal
thirds, as in the paper:

1. **One-way marginals** (ρ/3): every column's counts get discrete Gaussian
   noise calibrated to ρ/(3d) each (:meth:`DiscreteGaussian.from_rho
   <dpkit.mechanisms.DiscreteGaussian.from_rho>`, σ² = ⌈1/(2ρᵢ)⌉, sampled
   exactly). A row is in exactly one cell of each marginal, so each count
   vector has ℓ2 sensitivity 1 and is (ρ/(3d))-zCDP.
2. **Selection** (ρ/3): ``d - 1`` rounds of the exponential mechanism build a
   spanning tree of column pairs (Kruskal's order: candidates are the pairs
   joining two components). A pair's utility is ``Σ |x_ab - round(x̂_ab)|``,
   the ℓ1 distance between its exact two-way counts ``x_ab`` and the
   independence model ``x̂_ab`` of the *noisy* one-way marginals (public after
   step 1); it is an integer (so computed exactly), and one row moves one cell
   of ``x_ab`` by 1: sensitivity 1. Before it, each column's cells whose
   noisy one-way count is below 3σ are merged (:mod:`dpkit.synth.compression`:
   a function of the released one-way marginals, so post-processing), and
   ``x_ab`` and ``x̂_ab`` are counted in the merged cells: a merged count is
   an exact sum, and one row still moves one of them by 1. Each round is ε_s-DP with
   ε_s = √(8·(ρ/3)/(d - 1)) (rounded down), hence ε_s²/8-zCDP (bounded range:
   Cesar & Rogers 2021), (ρ/3)-zCDP over the ``d - 1`` rounds.
3. **Pair marginals** (ρ/3): the ``d - 1`` selected pairs' counts in the
   merged cells, discrete Gaussian noise calibrated to ρ/(3(d - 1)) each, ℓ2
   sensitivity 1 as above.

Adaptive zCDP composition (Bun & Steinke 2016) gives ρ in all. The fit of a
graphical model to the noisy marginals (Private-PGM, the ``mbi`` package:
mirror descent on the squared error of each measurement weighted by 1/σ) and
the sampling of ``rows`` records from it read only released values:
post-processing. The one-way step's estimate of the total (the mean of the
noisy marginals' sums) is post-processing too.

Differences from the paper's reference code: the exact discrete Gaussian
instead of floating-point Gaussian noise; the selection's model of the
one-way marginals is their independence product in closed form (what a
Private-PGM fit of one-way cliques gives, without its optimiser); the model
stays over every declared cell (the merged measurements enter its fit as
sums of cells), where the reference code fits the merged domain and draws a
merged cell's value uniformly.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from itertools import combinations
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from dpkit._checks import check_epsilon
from dpkit.errors import InvalidParameterError
from dpkit.mechanisms import DiscreteGaussian, as_source, exponential
from dpkit.synth.compression import GroupedQuery, cell_maps, grouped, merges_of
from dpkit.synth.domain import Attribute
from dpkit.synth.marginals import marginal

__all__ = [
    "MSTOutcome",
    "Measurement",
    "Progress",
    "check_shares",
    "counted",
    "fit_model",
    "measure",
    "run_mst",
    "sample_model",
    "selection_epsilon",
]

#: Mirror-descent iterations of the final Private-PGM fit (the reference code's 5000 converge slowly
#: on small tables too; the fit is post-processing, so this only trades time for accuracy).
FIT_ITERATIONS = 3000

#: ``progress(step, done, total)``: called with ``done = 0`` when a step starts and after each of
#: its ``total`` units. Only public parameters pass through it: a step's name and a count fixed by
#: the columns and the method (AIM's ``"rounds"``: the round just run, out of the public bound
#: ``16·d``; how many run is a function of released values, listed in the report anyway).
Progress = Callable[[str, int, int], None]


def _silent(step: str, done: int, total: int) -> None:
    """No progress shown."""


def counted(progress: Progress, step: str, units: Sequence[Any]) -> list[Any]:
    """``units`` run one by one (each a thunk), reported as ``step`` ``0..len(units)``."""
    progress(step, 0, len(units))
    out = []
    for i, unit in enumerate(units, 1):
        out.append(unit())
        progress(step, i, len(units))
    return out


@dataclass(frozen=True)
class Measurement:
    """One released marginal: its columns, noise σ, the ρ it spends and its noisy counts."""

    columns: tuple[str, ...]
    sigma: float
    rho: Fraction
    noisy: NDArray[np.int64]
    #: Each column's map from code to merged cell (:mod:`dpkit.synth.compression`), ``None``
    #: where a column's cells are measured one by one; ``noisy`` has the merged shape.
    merges: tuple[NDArray[np.int64] | None, ...] | None = None

    @property
    def merged(self) -> bool:
        return self.merges is not None and any(m is not None for m in self.merges)


@dataclass(frozen=True)
class MSTOutcome:
    """What MST releases: the measurements, the selected pairs and the sampled codes."""

    measurements: tuple[Measurement, ...]
    selected: tuple[tuple[str, str], ...]
    selection_epsilon: float
    codes: dict[str, NDArray[np.int64]]


def selection_epsilon(rho: Fraction, rounds: int) -> float:
    """The largest float ε with ``rounds·ε²/8 <= rho`` (exactly), for each selection round."""
    eps = math.sqrt(8 * float(rho) / rounds)
    while rounds * Fraction(eps) ** 2 / 8 > rho:
        eps = math.nextafter(eps, 0.0)
    return eps


def check_shares(rho: Fraction, d: int, delta: float) -> None:
    """Build every mechanism the release will use, from public input: refuse before the charge.

    A share too small for the exact samplers (or a selection ε below
    dpkit's floor) is an :class:`~dpkit.errors.InvalidParameterError` here,
    rather than a failure after the budget was charged.
    """
    third = rho / 3
    try:
        for share in (third / d, third / (d - 1)):
            DiscreteGaussian.from_rho(share, delta=delta, sensitivity=1)
        check_epsilon(selection_epsilon(third, d - 1), share=True, warn=False)
    except InvalidParameterError:
        raise InvalidParameterError(
            f"rho={float(rho):g} is too small for {d} columns: MST splits it into {2 * d - 1} "
            "measurements and d - 1 selections, and a share this small is below what the "
            "exact samplers support; give a larger rho (or epsilon) or fewer columns."
        ) from None


def measure(
    counts: NDArray[np.int64],
    columns: tuple[str, ...],
    rho: Fraction,
    delta: float,
    source: Any,
    maps: Sequence[NDArray[np.int64] | None] | None = None,
) -> Measurement:
    """``counts`` (ℓ2 sensitivity 1) with exact discrete Gaussian noise, ``rho``-zCDP (σ² = ⌈1/(2ρ)⌉).

    ``maps``: when ``counts`` were summed into merged cells
    (:func:`dpkit.synth.compression.grouped`, one row still moves one cell by
    1), each column's merge map, recorded for the model fit.
    """
    mech = DiscreteGaussian.from_rho(rho, delta=delta, sensitivity=1, size=counts.size)
    noisy = np.asarray(mech.randomise(counts.ravel(), rng=source), dtype=np.int64)
    kept = None if maps is None or all(m is None for m in maps) else tuple(maps)
    return Measurement(columns, float(mech.sigma), rho, noisy.reshape(counts.shape), kept)


def _independent(
    one_way: Sequence[NDArray[np.int64]],
) -> tuple[list[NDArray[np.float64]], float]:
    """Each column's distribution (noisy counts clipped at 0, normalised) and the estimated total."""
    total = max(1.0, float(np.mean([m.sum() for m in one_way])))
    shares = []
    for m in one_way:
        p = np.maximum(m.astype(np.float64), 0.0)
        s = p.sum()
        shares.append(p / s if s > 0 else np.full(p.shape, 1.0 / p.size))
    return shares, total


def _select(
    exact_pairs: dict[tuple[int, int], NDArray[np.int64]],
    one_way: Sequence[NDArray[np.int64]],
    epsilon: float,
    source: Any,
) -> list[tuple[int, int]]:
    """d - 1 pairs by the exponential mechanism over the pairs joining two components."""
    shares, total = _independent(one_way)
    d = len(one_way)
    errors: dict[tuple[int, int], int] = {}
    for (a, b), exact in exact_pairs.items():
        model = np.rint(total * np.outer(shares[a], shares[b])).astype(np.int64)
        errors[a, b] = int(np.abs(exact - model).sum())  # integer: exact, sensitivity 1
    parent = list(range(d))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    chosen: list[tuple[int, int]] = []
    for _ in range(d - 1):
        # which pairs are candidates depends only on earlier (released) choices
        candidates = [e for e in errors if root(e[0]) != root(e[1])]
        utilities = tuple(float(errors[e]) for e in candidates)
        pick = candidates[
            int(exponential(utilities, epsilon=epsilon, sensitivity=1, integral=True, rng=source))
        ]
        chosen.append(pick)
        parent[root(pick[0])] = root(pick[1])
    return chosen


def run_mst(
    engine: Any,
    attributes: Sequence[Attribute],
    rows: int,
    rho: Fraction,
    delta: float,
    rng: object,
    progress: Progress | None = None,
) -> MSTOutcome:
    """Measure, select, measure, fit and sample (after the charge; the proof is the module's).

    ``progress`` (optional, :data:`Progress`) hears each step's name and count.
    """
    report = progress or _silent
    source = as_source(rng)
    d = len(attributes)
    third = rho / 3
    one_way: list[Measurement] = counted(
        report,
        "one-way marginals",
        [
            lambda a=a: measure(marginal(engine, [a]), (a.name,), third / d, delta, source)
            for a in attributes
        ],
    )
    # Post-processing of the released one-way marginals: rare cells merged for what follows.
    merges = merges_of(one_way)
    names = [a.name for a in attributes]
    index = list(combinations(range(d), 2))
    counts = counted(
        report,
        "pair counts",
        [
            lambda a=a, b=b: grouped(
                marginal(engine, [attributes[a], attributes[b]]),
                cell_maps((names[a], names[b]), merges),
            )
            for a, b in index
        ],
    )
    exact_pairs = dict(zip(index, counts))
    eps = selection_epsilon(third, d - 1)
    report("selection", 0, d - 1)
    noisy_one_way = [grouped(m.noisy, cell_maps(m.columns, merges)) for m in one_way]
    pairs = _select(exact_pairs, noisy_one_way, eps, source)
    report("selection", d - 1, d - 1)
    two_way: list[Measurement] = counted(
        report,
        "pair marginals",
        [
            lambda a=a, b=b: measure(
                exact_pairs[a, b],
                (names[a], names[b]),
                third / (d - 1),
                delta,
                source,
                cell_maps((names[a], names[b]), merges),
            )
            for a, b in pairs
        ],
    )
    measurements = (*one_way, *two_way)
    seed = int(source.words(1)[0] % np.uint64(2**32))
    report("model fit and sampling", 0, 1)
    codes = fit_and_sample(attributes, measurements, rows, seed)
    report("model fit and sampling", 1, 1)
    selected = tuple((attributes[a].name, attributes[b].name) for a, b in pairs)
    return MSTOutcome(measurements, selected, eps, codes)


def fit_and_sample(
    attributes: Sequence[Attribute],
    measurements: Sequence[Measurement],
    rows: int,
    seed: int,
    iterations: int = FIT_ITERATIONS,
) -> dict[str, NDArray[np.int64]]:
    """Private-PGM (``mbi``): a graphical model fitted to the noisy marginals, ``rows`` records drawn.

    Post-processing of released values only (:func:`fit_model`, :func:`sample_model`).
    """
    return sample_model(fit_model(attributes, measurements, iterations), attributes, rows, seed)


def fit_model(
    attributes: Sequence[Attribute],
    measurements: Sequence[Measurement],
    iterations: int,
    warm_start: Any = None,
) -> Any:
    """An ``mbi`` graphical model fitted to the noisy marginals (mirror descent; post-processing).

    ``warm_start``: an earlier model of the same domain, whose potentials start
    the optimisation (AIM refits after each round). JAX runs in 64-bit mode
    (set here, process-wide: mbi warns that 32 bits stall on large totals).
    """
    import jax

    jax.config.update("jax_enable_x64", True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # mbi's advice about JAX's settings, at import
        from mbi import Domain, LinearMeasurement, estimation

    domain = Domain(tuple(a.name for a in attributes), tuple(a.size for a in attributes))
    # Repeated measurements of one marginal, combined by inverse variance (the same least-squares
    # loss up to a constant): one term per marginal, so that JAX compiles once per set of marginals.
    # A marginal measured on merged cells (compression.py) is a different query of the same
    # clique: it has its own term, whose query sums the model's cells into the merged ones.
    groups: dict[tuple[tuple[str, ...], Any], list[Measurement]] = {}
    for m in measurements:
        cells = (
            None
            if not m.merged
            else tuple(None if x is None else x.tobytes() for x in m.merges or ())
        )
        groups.setdefault((m.columns, cells), []).append(m)
    sizes = {a.name: a.size for a in attributes}
    loss = []
    for (columns, cells), group in groups.items():
        weights = [1.0 / m.sigma**2 for m in group]
        y = sum(w * m.noisy.ravel().astype(np.float64) for w, m in zip(weights, group))
        stddev = sum(weights) ** -0.5
        if cells is not None:
            query = GroupedQuery.of([sizes[c] for c in columns], group[0].merges or ())
            loss.append(LinearMeasurement(y / sum(weights), columns, stddev=stddev, query=query))
        else:
            loss.append(LinearMeasurement(y / sum(weights), columns, stddev=stddev))
    return estimation.MirrorDescent().estimate(
        domain, loss, iters=iterations, warm_start=warm_start
    )


def sample_model(
    model: Any, attributes: Sequence[Attribute], rows: int, seed: int
) -> dict[str, NDArray[np.int64]]:
    """``rows`` records drawn from a fitted model (post-processing).

    mbi draws with NumPy's global generator: it is seeded with ``seed`` for
    this call and put back as it was afterwards.
    """
    state = np.random.get_state()  # noqa: NPY002
    np.random.seed(seed)  # noqa: NPY002
    try:
        data = model.synthetic_data(rows=rows).data
    finally:
        np.random.set_state(state)  # noqa: NPY002
    return {a.name: np.asarray(data[a.name], dtype=np.int64) for a in attributes}


def decode(attributes: Sequence[Attribute], codes: dict[str, NDArray[np.int64]]) -> pd.DataFrame:
    """The synthetic table: category labels (object) and bin midpoints (float, NaN if missing)."""
    out = {}
    for a in attributes:
        c = np.clip(codes[a.name], 0, a.size - 1)
        if a.numeric:
            mids = np.array([np.nan if x is None else float(x) for x in a.labels])
            out[a.name] = mids[c]
        else:
            labels = np.empty(a.size, dtype=object)
            labels[:] = list(a.labels)
            out[a.name] = labels[c]
    return pd.DataFrame(out)
