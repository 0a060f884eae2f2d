"""The most frequent value of a column, by the exponential mechanism over a public domain.

Privacy (add/remove one row; ``k`` per person): the candidates are the
declared domain's values, never values read from the data (a rare value's
mere presence would leak). A candidate's utility is its count; one row
raises or lowers counts in one direction only (monotonic utilities), by at
most ``k`` (the utilities' sensitivity), so selecting with probability ∝ exp(ε·count/k) is ε-DP.
``details["count_error"]``: with probability at least the level, the chosen
value's count is within ``(k/ε)·ln(|domain|/(1 - level))`` of the largest.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpkit.accounting.events import PrivacyEvent
from dpkit.tables import groups as G
from dpkit.tables.engines.base import Engine
from dpkit.tables.kinds.base import (
    COMMON,
    ExpectedError,
    Kind,
    parameter,
    percent,
    pure,
    selection,
)
from dpkit.tables.validation import (
    TableContext,
    ValidatedQuery,
    category_value,
    check_memory,
    public_domain,
)
from dpkit.tables.values import from_engine

__all__ = ["MODE", "ModeQuery", "domain_slots", "expected_error", "release", "validate"]


@dataclass(frozen=True)
class ModeQuery(ValidatedQuery):
    """A validated mode: the public domain (canonical values, and as written)."""

    domain: tuple[Any, ...]
    #: the domain as the analyst or schema wrote it (answers are reported in these terms)
    domain_labels: tuple[Any, ...]


def validate(spec: Any, ctx: TableContext, common: dict[str, Any]) -> ModeQuery:
    """A public domain of distinct values of the column's type, within the memory ceiling."""
    column = spec.column
    domain, labels = public_domain(ctx, column, spec.domain, "mode()")
    check_memory(common["grouping"], len(domain), "mode() over the domain")
    return ModeQuery(
        statistic="mode",
        value=category_value(ctx, column),
        domain=domain,
        domain_labels=labels,
        **common,
    )


def domain_slots(values: Any, domain: tuple[Any, ...], temporal: bool = False) -> np.ndarray:
    """Index of each engine value in the (canonical) domain; -1 if it is not in it."""
    lookup = {d: i for i, d in enumerate(domain)}
    read = from_engine if temporal else G.plain
    return np.array([lookup.get(read(x), -1) for x in values], dtype=np.int64)


def release(v: ModeQuery, engine: Engine, rng: Any) -> Any:
    """The chosen domain value(s); the privacy argument is this module's docstring."""
    from dpkit.mechanisms import exponential

    assert v.value is not None
    grouping, k = v.grouping, v.max_contributions
    eps_sel, eps_em = G.selection_split(v, v.epsilon)
    frame = engine.value_counts(
        G.pushed_down(v.rows, grouping), v.value, grouping.values if grouping else (), v.domain
    )
    keys, matrix = G.dense_matrix(
        frame, grouping, domain_slots(frame["value"], v.domain, v.value.temporal), len(v.domain)
    )
    details: dict[str, Any] = {
        "domain": v.domain_labels,
        "count_error": k / eps_em * math.log(len(v.domain) / (1 - v.level)),
    }
    keys, matrix = G.keep_selected(v, keys, matrix, eps_sel, rng, details)
    if matrix.shape[0] == 0:
        return G.finish(v, [], [], [], "exponential", details)
    chosen = np.atleast_1d(
        exponential(matrix, epsilon=eps_em, sensitivity=k, monotonic=True, integral=True, rng=rng)
    )
    labels = [v.domain_labels[i] for i in chosen]
    return G.finish(v, keys, labels, [None] * len(keys), "exponential", details)


def parts(v: ModeQuery) -> list[PrivacyEvent]:
    """Private keys' selection, then the exponential mechanism (known as ε-DP only)."""
    eps_sel, eps_em = G.selection_split(v, v.epsilon)
    return [*selection(v, eps_sel), pure(eps_em)]


def expected_error(v: ModeQuery, level: float) -> ExpectedError:
    """How many rows fewer the chosen value may have than the mode: ε, the domain, ``k``, level."""
    eps_em = G.selection_split(v, v.epsilon)[1]
    rows = v.max_contributions / eps_em * math.log(len(v.domain) / (1 - level))
    return ExpectedError(
        level,
        f"its count within {rows:,.0f} rows of the most frequent value's ({percent(level)})",
        half_width=rows,
        unit="count",
    )


MODE = Kind(
    name="mode",
    summary="The most frequent value of a public domain, by the exponential mechanism.",
    doc="""The most frequent value of a public ``domain``, by the exponential mechanism.

    One engine pass counts each domain value; the counts are the
    utilities. Adding a row raises one count by 1 and lowers none, so the
    utilities are monotonic with sensitivity 1 (``k``) and the selection
    uses ``P ∝ exp(ε · count / k)``: ε-DP. ``ci`` is ``None``;
    ``details["count_error"]`` bounds, with probability ≥ ``level``, how
    many rows fewer the chosen value may have than the true mode.
    """,
    parameters=(
        *COMMON,
        parameter(
            "domain",
            "the public list of candidate values (else the schema's)",
            "list",
            "Sequence[Any] | None",
        ),
    ),
    query_type=ModeQuery,
    validate_query=validate,
    release_query=release,
    module_doc=__doc__ or "",
    error=expected_error,
    parts=parts,
)
