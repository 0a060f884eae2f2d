"""dpkit's imports show its architecture: layers, no cycles, no reaching into another package.

The import graph is read with ``ast`` from every import statement in every file
of ``src/dpkit`` — at module level and inside functions — except those under
``if TYPE_CHECKING:`` (types only, never executed). One exception: in a
package's ``__init__.py`` the ``TYPE_CHECKING`` block lists the lazy exports
(:mod:`dpkit._lazy`), imported on first attribute access, so there they count
(and :func:`test_lazy_exports_match_the_type_checking_imports` checks that the
two lists agree). Importing a submodule also runs its parents' ``__init__``;
those implicit edges are left out, because every ``__init__`` is lazy.

Rules:

(a) no cycle between modules;
(b) packages follow :data:`LAYERS`: a unit imports only units of a lower layer;
(c) no module imports a private module (``_name``) or a private name of another
    package; the root's private modules (``dpkit._checks``, ``dpkit._lazy``)
    are shared by the whole library, but not their private names; the CLI
    modules (each package's ``_cli``) form one unit and may import each other;
(d) nothing below them imports ``dpkit.reproduce``, ``dpkit.walkthroughs`` or
    ``dpkit.service``.

The checker is plain functions on a graph, tested on fake graphs below so that
each rule is shown to fail on a bad import.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
ROOT = SRC / "dpkit"

#: The layers, bottom to top. A unit is a top-level module or package of dpkit
#: (``dpkit.tables`` includes its ``engines``, which use the tables' query
#: language in ``queries`` and ``values``); the root ``__init__`` is "dpkit" (the
#: facade); every CLI module, wherever it lives (``dpkit.cli``, ``dpkit._cli_*``,
#: ``*._cli*``), is "cli". Units in one layer do not import each other.
LAYERS: tuple[frozenset[str], ...] = tuple(
    frozenset(layer)
    for layer in (
        {"dpkit.errors"},  # exceptions and warnings, no imports
        {
            "dpkit._checks",
            "dpkit._lazy",
            "dpkit._progress",
        },  # public-parameter checks; lazy exports; progress
        {"dpkit.accounting"},  # exact budgets, composition, the accountant and its ledger
        {"dpkit.privacy"},  # the one privacy report every release carries
        {"dpkit.release"},  # a scalar release
        {"dpkit.mechanisms"},  # noise with exact sampling (dpkit.mechanisms.sampling is shared)
        {"dpkit.histograms", "dpkit.local", "dpkit.audit"},  # publishers, local DP, audits
        {"dpkit.tables"},  # Session, query kinds, engines (DuckDB, Spark)
        {"dpkit.trees", "dpkit.demo", "dpkit.synth"},  # estimators, demo, synthetic data
        {"dpkit"},  # the facade: dpkit.Session, dpkit.trees, ...
        {"dpkit.service"},  # the HTTP service
        {"dpkit.client"},  # the analysts' side of the service
        {"dpkit.reproduce", "dpkit.walkthroughs"},  # scripts over the library
        {"cli"},  # the command line
    )
)

#: Units only the top layers may import.
APPLICATIONS = frozenset({"dpkit.reproduce", "dpkit.walkthroughs", "dpkit.service"})


@dataclass(frozen=True)
class Edge:
    """``source`` imports ``target`` (a dpkit module), naming ``names`` from it."""

    source: str
    target: str
    names: tuple[str, ...]
    line: int

    def __str__(self) -> str:
        shown = f" ({', '.join(self.names)})" if self.names else ""
        return f"{self.source}:{self.line} -> {self.target}{shown}"


# --------------------------------------------------------------------------
# Reading the graph
# --------------------------------------------------------------------------


def module_name(path: Path, src: Path = SRC) -> str:
    parts = path.relative_to(src).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_in(source: str, module: str, modules: set[str], *, is_package: bool) -> list[Edge]:
    """Every dpkit import in ``source`` (the text of ``module``), wherever it stands."""
    edges: list[Edge] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test) and not is_package:
                for other in child.orelse:
                    visit_one(other)
                continue
            visit_one(child)

    def visit_one(node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "dpkit":
                    edges.append(Edge(module, alias.name, (), node.lineno))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                here = module.split(".") if is_package else module.split(".")[:-1]
                here = here[: len(here) - node.level + 1]
                base = ".".join([*here, *([node.module] if node.module else [])])
            if base.split(".")[0] != "dpkit":
                return
            plain = []
            for alias in node.names:
                if f"{base}.{alias.name}" in modules:  # a submodule, not a name
                    edges.append(Edge(module, f"{base}.{alias.name}", (), node.lineno))
                else:
                    plain.append(alias.name)
            if plain:
                edges.append(Edge(module, base, tuple(plain), node.lineno))
        else:
            visit(node)

    visit(ast.parse(source))
    return edges


def read_graph(root: Path = ROOT) -> dict[str, list[Edge]]:
    paths = {module_name(p, root.parent): p for p in root.rglob("*.py")}
    modules = set(paths)
    return {
        name: imports_in(
            path.read_text(encoding="utf-8"),
            name,
            modules,
            is_package=path.name == "__init__.py",
        )
        for name, path in sorted(paths.items())
    }


# --------------------------------------------------------------------------
# The rules
# --------------------------------------------------------------------------


def is_cli(module: str) -> bool:
    last = module.split(".")[-1]
    return module == "dpkit.cli" or module.startswith("dpkit.cli.") or last.startswith("_cli")


def package_of(module: str, packages: Iterable[str]) -> str:
    """The top-level package a module belongs to ("dpkit" for the root's own modules)."""
    top = ".".join(module.split(".")[:2])
    return top if top in packages else "dpkit"


def unit_of(module: str) -> str:
    """The node of the package graph: a top-level module or package, "dpkit" or "cli"."""
    if is_cli(module):
        return "cli"
    return ".".join(module.split(".")[:2])


def find_cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The non-trivial strongly connected components (Tarjan), each as a sorted list."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph.get(v, ()):
                cycles.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(graph) + 100))
    for v in sorted(graph):
        if v not in index:
            connect(v)
    return cycles


def module_graph(graph: Mapping[str, list[Edge]]) -> dict[str, set[str]]:
    return {m: {e.target for e in edges if e.target in graph} for m, edges in graph.items()}


def layer_violations(
    edges: Iterable[Edge], layers: tuple[frozenset[str], ...] = LAYERS
) -> list[str]:
    rank = {unit: i for i, layer in enumerate(layers) for unit in layer}
    out = []
    for e in edges:
        a, b = unit_of(e.source), unit_of(e.target)
        if a == b:
            continue
        if a not in rank or b not in rank:
            out.append(f"{e}: {a if a not in rank else b} is not in the layer table (LAYERS)")
        elif rank[b] >= rank[a]:
            out.append(f"{e}: {a} (layer {rank[a]}) may not import {b} (layer {rank[b]})")
    return out


def private_violations(edges: Iterable[Edge], packages: Iterable[str]) -> list[str]:
    out = []
    for e in edges:
        home, there = package_of(e.source, packages), package_of(e.target, packages)
        if home == there or (is_cli(e.source) and is_cli(e.target)):  # the CLI is one unit
            continue
        inside = e.target.split(".")[len(there.split(".")) :]
        shared_root_module = there == "dpkit" and len(inside) == 1
        if any(part.startswith("_") for part in inside) and not shared_root_module:
            out.append(f"{e}: a private module of {there}")
        private_names = [n for n in e.names if n.startswith("_")]
        if private_names:
            out.append(f"{e}: private name(s) {', '.join(private_names)} of {there}")
    return out


def application_violations(edges: Iterable[Edge]) -> list[str]:
    """Imports of reproduce/walkthroughs/service from the library below them."""
    allowed = APPLICATIONS | {"dpkit.client", "cli"}
    return [
        f"{e}: the library may not import {unit_of(e.target)}"
        for e in edges
        if unit_of(e.target) in APPLICATIONS and unit_of(e.source) not in allowed
    ]


# --------------------------------------------------------------------------
# dpkit follows them
# --------------------------------------------------------------------------

GRAPH = read_graph()
EDGES = [e for edges in GRAPH.values() for e in edges]
PACKAGES = {f"dpkit.{p.name}" for p in ROOT.iterdir() if (p / "__init__.py").exists()}


def test_the_graph_is_read_in_full() -> None:
    assert len(GRAPH) > 150 and len(EDGES) > 500
    inside_functions = {str(e) for e in EDGES if e.source == "dpkit.cli"}
    assert any("dpkit.tables" in e for e in inside_functions)  # the CLI imports inside its verbs
    lazy = {e.target for e in GRAPH["dpkit"]}
    assert {"dpkit.tables", "dpkit.trees", "dpkit.accounting"} <= lazy  # the lazy exports count


def test_no_import_cycles_between_modules() -> None:
    assert find_cycles(module_graph(GRAPH)) == []


def test_packages_follow_the_layers() -> None:
    assert layer_violations(EDGES) == []


def test_no_package_imports_another_packages_private_modules() -> None:
    assert private_violations(EDGES, PACKAGES) == []


def test_the_library_does_not_import_reproduce_walkthroughs_or_the_service() -> None:
    assert application_violations(EDGES) == []


def test_every_unit_has_a_layer() -> None:
    units = {unit_of(m) for m in GRAPH}
    placed = set().union(*LAYERS)
    assert units - placed == set(), "place the new package in LAYERS"
    assert placed - units == set(), "LAYERS names a unit that no longer exists"


def _lazy_packages() -> list[str]:
    inits = {m: _path(m) for m in GRAPH if _path(m).name == "__init__.py"}
    return sorted(m for m, p in inits.items() if "= lazy_exports(" in p.read_text("utf-8"))


def _path(module: str) -> Path:
    base = SRC.joinpath(*module.split("."))
    return base / "__init__.py" if base.is_dir() else base.with_suffix(".py")


@pytest.mark.parametrize("package", _lazy_packages())
def test_lazy_exports_match_the_type_checking_imports(package: str) -> None:
    import importlib

    module = importlib.import_module(package)
    tree = ast.parse(_path(package).read_text("utf-8"))
    typed: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for imp in node.body:
                if isinstance(imp, ast.ImportFrom):
                    for alias in imp.names:
                        full = f"{imp.module}.{alias.name}"
                        typed[alias.asname or alias.name] = (
                            full if _path(full).exists() else str(imp.module)
                        )
    exports = dict(module._dpkit_exports)
    assert exports == typed, "the lazy table and the TYPE_CHECKING imports list the same names"
    assert set(module.__all__) - {"__version__"} == set(exports) | _eager_names(tree)
    assert set(module.__all__) <= set(dir(module))
    for name in exports:  # every name resolves, to what the TYPE_CHECKING import names
        value = getattr(module, name)
        source = importlib.import_module(exports[name])
        assert value is source or value is getattr(source, name)


def _eager_names(tree: ast.Module) -> set[str]:
    return {
        alias.asname or alias.name
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("dpkit.")
        for alias in node.names
        if alias.name != "lazy_exports"
    }


# --------------------------------------------------------------------------
# `import dpkit` loads no heavy dependency
# --------------------------------------------------------------------------

HEAVY = ("numba", "scipy", "duckdb", "pyarrow", "pandas", "sklearn", "numpy", "matplotlib")

_PROBE = """
import sys
import dpkit
heavy = sorted(m for m in {heavy!r} if m in sys.modules)
print("loaded:", heavy)
assert not heavy, heavy
assert {{"Session", "trees", "histograms", "PrivacyReport"}} <= set(dir(dpkit)), dir(dpkit)
import dpkit.histograms.dawa  # a submodule named like its function
assert callable(dpkit.histograms.dawa) and dpkit.histograms.dawa.__name__ == "dawa"
from dpkit.histograms import methods
assert methods.__name__ == "dpkit.histograms.methods"
assert dpkit.trees.DPDecisionTreeClassifier.__name__ == "DPDecisionTreeClassifier"
from dpkit import Budget, Session
assert Session is dpkit.tables.session.Session and Budget is dpkit.accounting.Budget
assert isinstance(dpkit.__version__, str)
print("ok")
"""


def test_import_dpkit_loads_no_heavy_dependency_and_names_stay_one_attribute_away() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE.format(heavy=HEAVY)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "loaded: []" in out.stdout and out.stdout.rstrip().endswith("ok")


# --------------------------------------------------------------------------
# The checker fails on bad imports (fake graphs)
# --------------------------------------------------------------------------


def test_a_cycle_hidden_inside_a_function_is_found() -> None:
    modules = {"dpkit.trees.a", "dpkit.reproduce.b"}
    a = "import numpy\n\ndef fit():\n    from dpkit.reproduce.b import paper\n    return paper()\n"
    b = "from dpkit.trees.a import fit\n"
    graph = {
        "dpkit.trees.a": imports_in(a, "dpkit.trees.a", modules, is_package=False),
        "dpkit.reproduce.b": imports_in(b, "dpkit.reproduce.b", modules, is_package=False),
    }
    assert find_cycles(module_graph(graph)) == [["dpkit.reproduce.b", "dpkit.trees.a"]]
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_type_checking_imports_are_left_out_except_in_a_lazy_init() -> None:
    text = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from dpkit.tables.session import Session\n"
        "else:\n    from dpkit.errors import DataError\n"
    )
    modules = {"dpkit.tables.session", "dpkit.errors"}
    plain = imports_in(text, "dpkit.x", modules, is_package=False)
    assert [e.target for e in plain] == ["dpkit.errors"]
    package = imports_in(text, "dpkit.x", modules, is_package=True)
    assert [e.target for e in package] == ["dpkit.tables.session", "dpkit.errors"]


def test_relative_imports_are_resolved() -> None:
    modules = {"dpkit.trees.engine._grid", "dpkit.trees.engine"}
    text = "from ._grid import make_grid\nfrom . import _grid\n"
    edges = imports_in(text, "dpkit.trees.engine.x", modules, is_package=False)
    assert {e.target for e in edges} == {"dpkit.trees.engine._grid"}


def test_an_upward_import_breaks_the_layers() -> None:
    bad = Edge("dpkit.mechanisms.laplace", "dpkit.tables.session", ("Session",), 1)
    good = Edge("dpkit.tables.session", "dpkit.mechanisms.laplace", ("laplace",), 1)
    assert layer_violations([good]) == []
    (message,) = layer_violations([bad])
    assert "dpkit.mechanisms (layer 5) may not import dpkit.tables (layer 7)" in message
    sibling = Edge("dpkit.histograms.dawa", "dpkit.local.mean", (), 3)
    assert layer_violations([sibling])
    unknown = Edge("dpkit.newthing.x", "dpkit.errors", (), 1)
    assert "not in the layer table" in layer_violations([unknown])[0]


def test_a_private_import_across_packages_is_refused() -> None:
    packages = {"dpkit.mechanisms", "dpkit.local", "dpkit.trees"}
    assert private_violations(
        [Edge("dpkit.local.mean", "dpkit.mechanisms._random", ("as_source",), 9)], packages
    )
    assert private_violations(
        [Edge("dpkit.local.mean", "dpkit.mechanisms.laplace", ("_check_size",), 9)], packages
    )
    assert private_violations(
        [Edge("dpkit.local.mean", "dpkit._checks", ("_is_real_scalar",), 9)], packages
    )
    allowed = [
        Edge("dpkit.cli", "dpkit.local._cli_survey", ("estimate_command",), 9),
        Edge("dpkit.local.mean", "dpkit.mechanisms.sampling", ("as_source",), 9),
        Edge("dpkit.trees.regression._tree", "dpkit.trees.engine._grid", ("_x",), 9),
        Edge("dpkit.local.mean", "dpkit._checks", ("check_epsilon",), 9),
    ]
    assert private_violations(allowed, packages) == []


def test_the_library_importing_the_service_is_refused() -> None:
    bad = Edge("dpkit.tables.session", "dpkit.service.encoding", ("encode",), 4)
    assert application_violations([bad])
    assert layer_violations([bad])
    ok = Edge("dpkit.cli", "dpkit.service._cli", ("serve",), 4)
    assert application_violations([ok]) == []
    assert layer_violations([ok]) == []
