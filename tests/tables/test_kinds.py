"""The registry of query kinds: every kind is one complete object, and every layer reads it.

Checks that each registered kind has parameters, a proof (guarantee, neighbouring
relation, sensitivity), a label, a cost and a release; that the Session, the remote
client, the spec (``QUERY_KINDS``/``PARAMETERS``), the service's encoding and its
``GET /api/v1/query-kinds`` expose exactly the registry; that the methods keep their
signatures; and runs the worked example of docs/architecture.md: adding a kind is one
module-like object and one registry line.
"""

from __future__ import annotations

import inspect
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pytest

from dpkit.accounting import Budget
from dpkit.client import RemoteDataset
from dpkit.errors import InvalidParameterError
from dpkit.tables import QUERY_KINDS, Query, QuerySpec, Session
from dpkit.tables import kinds as K
from dpkit.tables.query_methods import QueryMethods
from dpkit.tables.specs import PARAMETERS
from dpkit.tables.validation import TableContext, ValidatedQuery

# ----------------------------------------------------------------------------- every kind


@pytest.mark.parametrize("name", list(K.REGISTRY))
def test_every_kind_is_complete(name: str) -> None:
    kind = K.REGISTRY[name]
    assert isinstance(kind, K.QueryKind)
    assert kind.name == name
    assert kind.parameters and kind.parameters[0].name == "epsilon"
    assert all(p.doc and p.type for p in kind.parameters)
    proof = kind.proof.lower()
    assert "add/remove one row" in proof  # the neighbouring relation
    assert "sensitivity" in proof and "ε" in proof
    assert kind.summary and kind.doc
    assert issubclass(kind.query_type, ValidatedQuery)
    for step in (kind.validate, kind.label, kind.cost, kind.release):
        assert callable(step)


def test_spec_names_and_parameters_are_views_of_the_registry() -> None:
    assert tuple(QUERY_KINDS) == tuple(K.REGISTRY)
    assert set(PARAMETERS) == set(K.REGISTRY)
    for name, kind in K.REGISTRY.items():
        assert PARAMETERS[name] == tuple(p.field for p in kind.parameters)


def test_session_and_client_expose_exactly_the_registry() -> None:
    declared = {n for n in QueryMethods.__annotations__ if not n.startswith("_")}  # static view
    assert declared == set(K.REGISTRY)
    for cls in (Session, RemoteDataset):
        for name, kind in K.REGISTRY.items():
            method = getattr(cls, name)
            assert method.__doc__ == kind.doc
            params = list(inspect.signature(method).parameters)
            assert params[1] == kind.column
    public = {n for n in dir(QueryMethods) if not n.startswith("_")}
    assert public - {"answer"} == set(K.REGISTRY)


def test_methods_keep_their_signatures() -> None:
    def shape(name: str) -> list[tuple[str, str, Any]]:
        sig = inspect.signature(getattr(Session, name))
        return [(p.name, p.kind.name, p.default) for p in list(sig.parameters.values())[1:4]]

    empty = inspect.Parameter.empty
    assert shape("count")[0] == ("column", "POSITIONAL_OR_KEYWORD", None)
    assert shape("mean")[:2] == [
        ("column", "POSITIONAL_OR_KEYWORD", empty),
        ("epsilon", "KEYWORD_ONLY", empty),
    ]
    assert shape("quantile")[:2] == [
        ("column", "POSITIONAL_OR_KEYWORD", empty),
        ("q", "POSITIONAL_OR_KEYWORD", empty),
    ]
    assert shape("histogram2d")[:2] == [
        ("x", "POSITIONAL_OR_KEYWORD", empty),
        ("y", "POSITIONAL_OR_KEYWORD", empty),
    ]
    assert inspect.signature(Session.min).parameters["q"].default == 0.01
    assert inspect.signature(Session.max).parameters["q"].default == 0.99
    assert "q" not in inspect.signature(Session.median).parameters
    assert inspect.signature(Session.sum).parameters["delta"].default == 0.0


def _people(n: int = 200) -> pd.DataFrame:
    rng = np.random.default_rng(3)
    return pd.DataFrame(
        {"age": rng.integers(18, 90, n).astype(float), "district": rng.choice(["A", "B"], n)}
    )


TYPES = {"age": "DOUBLE", "district": "VARCHAR"}


def _session(**options: Any) -> Session:
    return Session.from_pandas(_people(), types=TYPES, epsilon=10.0, rng=7, **options)


def test_methods_build_the_same_spec_as_a_query() -> None:
    """A method call and ``answer(Query(...))`` with the defaults are one query: same draws."""
    a = _session().mean("age", bounds=(0, 120), epsilon=0.5, where={"district": "A"})
    b = _session().answer(
        Query("mean", "age", epsilon=0.5, bounds=(0, 120), where={"district": "A"}, delta=0.0)
    )
    assert a.value == b.value and a.ci == b.ci
    q1 = _session().quantile("age", 0.3, bounds=(0, 120), epsilon=1.0, grid_size=101)
    q2 = _session().quantile("age", q=0.3, bounds=(0, 120), epsilon=1.0, grid_size=101)
    assert q1.value == q2.value


def test_session_arguments_bind_like_a_function() -> None:
    s = _session()
    with pytest.raises(TypeError, match="median"):
        s.median("age", q=0.5, epsilon=1.0, bounds=(0, 120))  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="epsilon"):
        s.mean("age", bounds=(0, 120))
    assert s.spent == Budget(0.0, 0.0)


def test_remote_client_sends_only_what_was_given() -> None:
    sent: list[QuerySpec] = []

    class Recorder(RemoteDataset):
        def __init__(self) -> None:
            pass

        def answer(self, spec: QuerySpec) -> Any:
            sent.append(spec)
            return None

    r = Recorder()
    r.mean("age", bounds=(0, 120), epsilon=0.1)
    r.quantile("age", 0.5, epsilon=0.1)
    r.histogram2d("age", "income", epsilon=1.0, bins=4)
    r.count(epsilon=0.2, where={"district": "A"})
    assert sent[0].to_dict() == {
        "kind": "mean",
        "column": "age",
        "epsilon": 0.1,
        "bounds": [0, 120],
    }
    assert sent[1].q == 0.5 and sent[2].y_column == "income" and sent[3].column is None
    with pytest.raises(InvalidParameterError, match="median\\(\\) takes no q"):
        r.median("age", q=0.5, epsilon=0.1)
    with pytest.raises(InvalidParameterError, match="needs epsilon"):
        r.mean("age", bounds=(0, 1))


def test_describe_is_json_and_lists_the_registry() -> None:
    described = json.loads(json.dumps(K.describe()))
    assert [d["name"] for d in described] == list(K.REGISTRY)
    mean = next(d for d in described if d["name"] == "mean")
    assert {p["name"] for p in mean["parameters"]} == set(PARAMETERS["mean"])
    eps = next(p for p in mean["parameters"] if p["name"] == "epsilon")
    assert eps["required"] is True and eps["type"] == "number"
    h2 = next(d for d in described if d["name"] == "histogram2d")
    assert h2["column"] == {"name": "x", "required": True}
    assert any(p["name"] == "y_column" and p["required"] for p in h2["parameters"])


def test_the_service_accepts_exactly_the_registry(tmp_path: Any) -> None:
    from fastapi.testclient import TestClient

    from dpkit.service.app import create_app
    from dpkit.service.demo import build_demo

    config, _ = build_demo(tmp_path, rows=50)
    http = TestClient(create_app(config))
    served = http.get("/api/v1/query-kinds")
    assert served.status_code == 200
    assert [k["name"] for k in served.json()["kinds"]] == list(K.REGISTRY)
    for name in K.REGISTRY:  # the service's encoding (QuerySpec JSON) knows every kind
        assert QuerySpec.from_dict({"kind": name, "column": "age", "epsilon": 1}).kind == name
    with pytest.raises(InvalidParameterError, match="unknown query"):
        QuerySpec.from_dict({"kind": "toy", "epsilon": 1})


# ----------------------------------------------------------------------------- worked example
# How to add a query kind (docs/architecture.md): a module like this one, and one line.


@dataclass(frozen=True)
class RowsQuery(ValidatedQuery):
    """What the toy kind needs beyond the common fields: the public unit."""

    unit: float


def _validate(spec: Any, ctx: TableContext, common: dict[str, Any]) -> RowsQuery:
    unit = spec.unit
    if isinstance(unit, bool) or not isinstance(unit, int | float) or not unit > 0:
        raise InvalidParameterError("unit must be a number > 0.")
    return RowsQuery(statistic="rows", value=None, unit=float(unit), **common)


def _release(v: RowsQuery, engine: Any, rng: Any) -> Any:
    from dpkit.mechanisms import Geometric
    from dpkit.tables import groups as G

    frame = engine.moments(v.rows, None, ())
    _, cols = G.aligned_columns(frame, None, ["n"])
    mech = Geometric(epsilon=v.epsilon, sensitivity=v.max_contributions)
    noisy = int(np.asarray(mech.randomise(cols["n"].astype(np.int64), rng=rng)).reshape(-1)[0])
    return G.finish(v, [()], [noisy / v.unit], [None], "geometric", {"unit": v.unit})


TOY_PROOF = """Rows counted in a public unit (e.g. thousands).

Privacy: ε-DP under add/remove one row (k rows per person): the count has
sensitivity k, so two-sided geometric noise of scale k/ε makes it ε-DP;
dividing by the public unit is post-processing.
"""

ROWS = K.Kind(
    name="rows_in",
    summary="The number of rows, in a public unit.",
    doc="The number of rows divided by ``unit`` (ε-DP; see the kind's proof).",
    parameters=(
        K.COMMON[0],  # epsilon
        K.COMMON[1],  # where
        K.COMMON[5],  # level
        K.parameter("unit", "the public unit", "number", "float", default=1000.0),
    ),
    query_type=RowsQuery,
    validate_query=_validate,
    release_query=_release,
    module_doc=TOY_PROOF,
    column_required=False,
)


@pytest.fixture
def toy_kind() -> Iterator[K.QueryKind]:
    kind = K.register(ROWS)  # the one registry line
    try:
        yield kind
    finally:
        K.unregister(ROWS.name)


def test_a_new_kind_runs_through_a_session_end_to_end(toy_kind: K.QueryKind) -> None:
    test_every_kind_is_complete(toy_kind.name)
    assert "rows_in" in QUERY_KINDS and PARAMETERS["rows_in"] == (
        "epsilon",
        "where",
        "level",
        "unit",
    )
    s = _session()
    r = s.rows_in(epsilon=1.0, unit=10, where={"district": "A"})  # type: ignore[attr-defined]
    exact = int((_people()["district"] == "A").sum())
    assert r.details["unit"] == 10.0 and math.isfinite(r.value)
    assert abs(r.value * 10 - exact) < 40  # scale 1/ε = 1: far beyond 40 is p < 1e-15
    assert s.spent.epsilon == pytest.approx(1.0)
    spec = Query("rows_in", epsilon=0.5, unit=100)
    assert QuerySpec.from_json(spec.to_json()) == spec and spec.unit == 100
    assert Query("rows_in", epsilon=0.5, unit=10) != Query("rows_in", epsilon=0.5, unit=100)
    assert s.prepare(spec).label == "rows_in(*)"
    assert inspect.signature(s.rows_in).parameters["unit"].default == 1000.0  # type: ignore[attr-defined]
    with pytest.raises(InvalidParameterError, match="unit must be"):
        s.answer(Query("rows_in", epsilon=0.5, unit=-1))
    assert any(d["name"] == "rows_in" for d in K.describe())


def test_unregistered_kinds_are_gone_and_built_ins_stay(toy_kind: K.QueryKind) -> None:
    K.unregister("rows_in")
    assert "rows_in" not in QUERY_KINDS
    with pytest.raises(InvalidParameterError):
        Query("rows_in", epsilon=1.0)
    with pytest.raises(InvalidParameterError, match="built-in"):
        K.unregister("mean")
    with pytest.raises(InvalidParameterError, match="new, public name"):
        K.register(K.REGISTRY["mean"])
