"""Histograms over public bins (numeric edges) or a public domain (categories).

Privacy (add/remove one row; ``k`` per person): each row falls in one bin of
one group, so the matrix of counts has ℓ1 sensitivity ``k``. Without
``method``, two-sided geometric noise of scale ``k/ε`` per count is ε-DP; the
CI per bin is public (``± half_width``). With ``method=`` the count vector of
each group goes to :mod:`dpkit.histograms` with ε/k (group privacy: the
methods are ε-DP for a one-row change, so ε/k covers ``k`` rows); the
division is rounded *down* so the parts never spend more than was charged.
Values are clipped to the outer edges (documented in ``details["clipped"]``),
so the first and last bins also hold everything beyond them.

Gaussian noise (a session's ``noise="gaussian"``, or ``"auto"`` where it
gives the smaller half-width; without ``method`` only): every bin gets
discrete Gaussian noise of variance ``⌈k²/(2ρ)⌉``, ρ = ε²/2 (ε the bins'
share after any private-key selection), sampled exactly
(:func:`dpkit.tables.kinds.count.counting_noise`). ℓ2 sensitivity ``k``: a
person's ``k`` rows may all fall in one bin of one group (dpkit does not
bound a person's rows per bin, so no √k is claimed). With the session's
``max_groups=G`` a person keeps at most ``k`` rows in each of at most ``G``
groups (:class:`~dpkit.tables.engines.base.Contribution`): each group's bins
move by at most ``k`` in ℓ2, so the matrix by ``k·√G`` (ℓ1 ``k·G``, the
Laplace scale). Hence the matrix of counts is ρ-zCDP (Canonne, Kamath & Steinke 2020, Thm 14), charged
``(ε', δ_n)`` with ρ declared (ε' the zCDP→(ε, δ) conversion at the paying
accountant's δ_n). Private-key selection keeps its geometric threshold on the
groups' totals; the ``method=`` publishers stay pure ε-DP.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpkit._checks import exact, float_at_most
from dpkit.accounting.events import PrivacyEvent
from dpkit.errors import InvalidParameterError
from dpkit.histograms.labels import bin_labels
from dpkit.histograms.methods import PUBLISHERS_1D, publisher
from dpkit.tables import groups as G
from dpkit.tables.engines.base import Engine
from dpkit.tables.kinds.base import (
    COMMON,
    ExpectedError,
    Kind,
    amount,
    parameter,
    percent,
    pure,
    selection,
)
from dpkit.tables.kinds.count import counting_noise, gaussian_cost, noise_details, nonnegative
from dpkit.tables.kinds.mode import domain_slots
from dpkit.tables.validation import (
    TableContext,
    ValidatedQuery,
    category_value,
    check_memory,
    numeric_edges,
    numeric_value,
    public_domain,
)

__all__ = [
    "HISTOGRAM",
    "HistogramQuery",
    "expected_error",
    "release",
    "unit_epsilon",
    "validate",
]

#: Methods that take ``max_count``: StructureFirst's F; for ``auto``, the bound on rows.
_MAX_COUNT_METHODS = ("structure_first", "auto")


@dataclass(frozen=True)
class HistogramQuery(ValidatedQuery):
    """A validated histogram: a public domain (categories) or public edges, and the method."""

    domain: tuple[Any, ...] | None = None
    #: the domain as the analyst or schema wrote it (answers are reported in these terms)
    domain_labels: tuple[Any, ...] | None = None
    edges: tuple[float, ...] | None = None
    method: str | None = None
    max_count: int | None = None


def validate(spec: Any, ctx: TableContext, common: dict[str, Any]) -> HistogramQuery:
    """Public bins or domain, a known method and its options, within the memory ceiling."""
    column = spec.column
    grouping = common["grouping"]
    method = spec.method
    if method is not None and method not in PUBLISHERS_1D:  # the live registry
        raise InvalidParameterError(f"method must be one of {tuple(PUBLISHERS_1D)} or None.")
    schema_col = ctx.schema.get(column)
    categorical = spec.domain is not None or (
        spec.edges is None
        and spec.bins is None
        and spec.bounds is None
        and schema_col.domain is not None
        and schema_col.edges is None
    )
    max_count = _max_count(spec.max_count, method)
    if categorical:
        if spec.edges is not None or spec.bins is not None or spec.bounds is not None:
            raise InvalidParameterError(
                "give either domain= (categories) or edges=/bins= (numbers), not both."
            )
        domain, labels = public_domain(ctx, column, spec.domain, "histogram()")
        check_memory(grouping, len(domain), "the histogram")
        _check_method(method, len(domain), common["epsilon"], max_count)
        return HistogramQuery(
            statistic="histogram",
            value=category_value(ctx, column),
            domain=domain,
            domain_labels=labels,
            method=method,
            max_count=max_count,
            **common,
        )
    edges = numeric_edges(ctx, column, spec.edges, spec.bins, spec.bounds, grouping=grouping)
    check_memory(grouping, len(edges) - 1, "the histogram's bins")
    _check_method(method, len(edges) - 1, common["epsilon"], max_count)
    return HistogramQuery(
        statistic="histogram",
        value=numeric_value(ctx, column, (edges[0], edges[-1])),
        edges=edges,
        method=method,
        max_count=max_count,
        **common,
    )


def _check_method(method: str | None, n: int, epsilon: float, max_count: int | None) -> None:
    """The memory a :mod:`dpkit.histograms` method needs for n bins (public; before the charge)."""
    if method == "matrix_mechanism":
        from dpkit.histograms.matrix_mechanism import check_bins

        check_bins(n)
        return
    if method not in ("noise_first", "structure_first"):
        return  # the others need O(n log n) memory, covered by the bins' own check
    from dpkit.histograms.memory import check_memory, memory_needed
    from dpkit.histograms.structure_first import default_n_bins

    k = default_n_bins(n, epsilon, max_count) if method == "structure_first" else None
    check_memory(
        memory_needed(method, n, k),
        f"histogram(method={method!r}) over {n:,} bins",
        "use fewer bins or another method.",
    )


def _max_count(max_count: Any, method: str | None) -> int | None:
    if method == "structure_first" and max_count is None:
        raise InvalidParameterError(
            "histogram(method='structure_first') needs max_count=, a public upper bound on any "
            "one bin's count (e.g. the number of people the table may hold)."
        )
    if max_count is None:
        return None
    if method not in _MAX_COUNT_METHODS:
        raise InvalidParameterError(
            "max_count= is used by method='structure_first' (a bound on any bin's count) and "
            "method='auto' (a bound on the number of rows) only."
        )
    if (
        isinstance(max_count, bool)
        or not isinstance(max_count, int | float)
        or not (math.isfinite(max_count) and max_count >= 1)
    ):
        raise InvalidParameterError("max_count must be a number >= 1.")
    return math.ceil(max_count)


def unit_epsilon(epsilon: float, k: int) -> float:
    """The largest float whose exact value is at most ε/k (what a one-row method may spend)."""
    return float_at_most(exact(epsilon) / k)


def release(v: HistogramQuery, engine: Engine, rng: Any) -> Any:
    """The noisy or published counts; the privacy argument is this module's docstring."""
    assert v.value is not None
    grouping, k = v.grouping, v.max_contributions
    eps_sel, eps_hist = G.selection_split(v, v.epsilon)
    rows = G.pushed_down(v.rows, grouping)
    g_values = grouping.values if grouping else ()
    if v.domain is not None:
        assert v.domain_labels is not None
        frame = engine.value_counts(rows, v.value, g_values, v.domain)
        slots = domain_slots(frame["value"], v.domain, v.value.temporal)
        width = len(v.domain)
        details: dict[str, Any] = {"labels": list(v.domain_labels)}
    else:
        assert v.edges is not None
        frame = engine.bin_counts(rows, v.value, g_values, v.edges)
        width = len(v.edges) - 1
        bins = frame["bin"].to_numpy(dtype=np.int64)
        slots = np.where((bins >= 0) & (bins < width), bins, -1)
        details = {
            "edges": list(v.edges),
            "labels": bin_labels(v.edges),
            "clipped": "values below the first edge count in the first bin, above the last "
            "edge in the last bin",
        }
    keys, matrix = G.dense_matrix(frame, grouping, slots, width)
    keys, matrix = G.keep_selected(v, keys, matrix, eps_sel, rng, details)
    counts = matrix.astype(np.int64)
    values: list[Any] = []
    cis: list[Any] = []
    if v.method is not None:
        publish = publisher(v.method).publish
        eps_unit = unit_epsilon(eps_hist, k)
        published = None
        for row in counts:
            kwargs: dict[str, Any] = {"rng": rng}
            if v.edges is not None:
                kwargs["edges"] = np.asarray(v.edges)
            if v.max_count is not None:
                # auto's scale bound is on rows, StructureFirst's on any one bin.
                key = "max_records" if v.method == "auto" else "max_count"
                kwargs[key] = v.max_count
            published = publish(row, eps_unit, **kwargs)
            # A bin's count is never negative (post-processing); the unclipped
            # estimates stay in details["published"] for unbiased range queries.
            values.append(np.maximum(np.asarray(published.estimates), 0.0))
            cis.append(None)
        details.update(
            method=v.method,
            epsilon_per_row=eps_unit,
            published=published if grouping is None else None,
        )
        mechanism = v.method
    else:
        mech = counting_noise(v, eps_hist, size=max(counts.size, 1))
        h = mech.half_width(v.level)
        if counts.shape[0]:
            noisy = np.asarray(mech.randomise(counts.reshape(-1), rng=rng), dtype=np.int64).reshape(
                counts.shape
            )
            for row in noisy:
                released, lows, highs = nonnegative(row, h)
                values.append(released)
                cis.append((lows, highs))
        details.update(half_width=h, **noise_details(mech))
        mechanism = mech.name
    return G.finish(v, keys, values, cis, mechanism, details, cost=gaussian_cost(HISTOGRAM, v))


def parts(v: HistogramQuery) -> list[PrivacyEvent]:
    """Private keys' selection, then the bins' noise (:func:`counting_noise`; a method's pure ε)."""
    eps_sel, eps_hist = G.selection_split(v, v.epsilon)
    if v.method is not None:  # a data-adaptive publisher: known as ε-DP only
        return [*selection(v, eps_sel), pure(eps_hist)]
    return [*selection(v, eps_sel), counting_noise(v, eps_hist).event]


def expected_error(v: HistogramQuery, level: float) -> ExpectedError:
    """Each bin's ``± half_width`` (geometric noise: ε, ``k``, level); none for a ``method``.

    A :mod:`dpkit.histograms` method adapts its partition to the data, so its
    per-bin error is not known before it runs (its published histogram states
    range errors after).
    """
    if v.method is not None:
        return ExpectedError(
            level,
            f"method {v.method!r} adapts to the data: its error bars come with the answer "
            "(no public bar before it runs)",
        )
    eps = G.selection_split(v, v.epsilon)[1]
    h = counting_noise(v, eps).half_width(level)
    return ExpectedError(
        level, f"± {amount(h)} on each bin's count ({percent(level)})", half_width=h
    )


_HIST_DOC = """Noisy counts per public bin (numeric ``edges``, or ``bins`` over ``bounds``) or per domain value.

    One engine pass counts every bin. Each row is in exactly one bin
    (values are clipped into the end bins), so the count vector has ℓ1
    sensitivity 1 (``k``): geometric noise of scale ``k/ε`` on every bin
    is ε-DP for the whole histogram (parallel composition over bins).
    ``value`` is the array of noisy counts, ``ci`` a pair of arrays (each
    bin's own interval, ``value ± half_width``); ``details`` has the edges
    or labels. A bin's count is never negative: a negative noisy count ``x``
    is released as 0 with the interval ``(0, max(x + half_width, 0))``
    (post-processing), so every value lies in its own interval
    (``docs/queries.md``, "Values and intervals").
    With the session's ``noise="gaussian"`` (or ``"auto"`` where it is
    narrower) and no ``method``: discrete Gaussian noise of σ = ``k/ε`` per
    bin (ρ = ε²/2 zCDP, ℓ2 sensitivity ``k``), charged ``(ε', δ)`` with that
    ρ; ``mechanism`` is ``"discrete_gaussian"``, ``details`` has ``sigma``
    and ``rho``.

    ``method`` in ``dpkit.histograms.methods.PUBLISHERS_1D`` hands the exact counts to
    :mod:`dpkit.histograms` instead (with ``ε/k``: group privacy turns an
    ε/k-DP publication for one-row changes into ε-DP for ``k`` rows);
    ``value`` is then its estimates with negative ones raised to 0, ``ci``
    is ``None`` (the publishers state errors per range, not per bin) and
    ``details["published"]`` is the published histogram (unclipped, unbiased
    estimates for range queries, error estimates).
    ``method="structure_first"`` needs ``max_count``, a
    public upper bound on any bin's count (checked before the charge);
    ``method="auto"`` (the workload-aware default of
    :func:`dpkit.histograms.auto`, for range queries) takes ``max_count`` as
    a public bound on the number of rows.
    """

HISTOGRAM = Kind(
    name="histogram",
    summary="Noisy counts per public bin (numeric edges, or bins over bounds) or domain value.",
    doc=_HIST_DOC,
    parameters=(
        *COMMON,
        parameter(
            "edges", "public bin edges (increasing numbers)", "list", "Sequence[float] | None"
        ),
        parameter("bins", "the number of equal bins over bounds", "integer", "int | None"),
        parameter(
            "bounds",
            "(lo, hi): the range split into bins",
            "[lo, hi]",
            "tuple[float, float] | None",
        ),
        parameter(
            "domain", "the public categories (instead of bins)", "list", "Sequence[Any] | None"
        ),
        parameter(
            "method",
            "a publisher of dpkit.histograms (" + ", ".join(PUBLISHERS_1D) + "), or none",
            "string",
            "str | None",
        ),
        parameter(
            "max_count",
            "a public bound on any bin's count (structure_first) or on the rows (auto)",
            "integer",
            "int | None",
            check=_max_count,
        ),
    ),
    query_type=HistogramQuery,
    validate_query=validate,
    release_query=release,
    module_doc=__doc__ or "",
    error=expected_error,
    parts=parts,
)
