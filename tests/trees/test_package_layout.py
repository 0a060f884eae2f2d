"""The trees package shows its architecture: engine, classification, regression, boosting; no cycles."""

from __future__ import annotations

import ast
import warnings
from pathlib import Path

import pytest

import dpkit.trees

ROOT = Path(dpkit.trees.__file__).parent


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _top_level_imports(path: Path) -> set[str]:
    """Modules of dpkit.trees imported at module level (imports inside functions are lazy)."""
    out = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.module.startswith("dpkit.trees")
        ):
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("dpkit.trees")}
    return out


def test_no_import_cycles_inside_the_trees_package() -> None:
    graph = {_module_name(p): _top_level_imports(p) for p in ROOT.rglob("*.py")}
    assert sum(len(deps) for deps in graph.values()) > 30  # the graph was really read
    state: dict[str, int] = {}

    def visit(module: str, path: list[str]) -> None:
        if state.get(module) == 2:
            return
        assert state.get(module) != 1, "import cycle: " + " -> ".join([*path, module])
        state[module] = 1
        for dep in graph.get(module, ()):
            # "from dpkit.trees import X" loads the package, not a cycle through X
            if dep != "dpkit.trees" and dep in graph:
                visit(dep, [*path, module])
        state[module] = 2

    for module in graph:
        visit(module, [])


def test_the_subpackages_mirror_the_design() -> None:
    subpackages = {p.name for p in ROOT.iterdir() if (p / "__init__.py").exists()}
    assert subpackages == {"engine", "classification", "regression", "boosting"}


@pytest.mark.parametrize(
    ("old", "name"),
    [
        ("classifier", "DPDecisionTreeClassifier"),
        ("forest_classifier", "DPRandomForestClassifier"),
        ("regressor", "DPDecisionTreeRegressor"),
        ("forest", "DPRandomForestRegressor"),
    ],
)
def test_old_module_paths_still_work_and_say_they_are_deprecated(old: str, name: str) -> None:
    import importlib
    import sys

    sys.modules.pop(f"dpkit.trees.{old}", None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(f"dpkit.trees.{old}")
    assert getattr(module, name) is getattr(dpkit.trees, name)
    assert any(issubclass(w.category, DeprecationWarning) for w in caught)


ESTIMATORS = [
    dpkit.trees.DPDecisionTreeClassifier,
    dpkit.trees.DPRandomForestClassifier,
    dpkit.trees.DPDecisionTreeRegressor,
    dpkit.trees.DPRandomForestRegressor,
    dpkit.trees.DPGradientBoostingClassifier,
    dpkit.trees.DPGradientBoostingRegressor,
]


@pytest.mark.parametrize("cls", ESTIMATORS, ids=lambda c: c.__name__)
def test_every_estimator_takes_its_parameters_by_name(cls: type) -> None:
    import inspect

    params = list(inspect.signature(cls).parameters.values())
    assert params and all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params)
    assert "accountant" in {p.name for p in params}


@pytest.mark.parametrize(
    "cls", [dpkit.trees.DPDecisionTreeClassifier, dpkit.trees.DPRandomForestClassifier]
)
def test_the_old_positional_calls_still_work_with_a_deprecation(cls: type) -> None:
    with pytest.warns(FutureWarning, match="by position"):
        model = cls(0.5)
    assert model.epsilon == 0.5
