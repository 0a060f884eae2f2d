"""The trees package shows its architecture: engine, classification, regression, boosting.

No import cycles, here or anywhere in dpkit: ``tests/test_architecture.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import dpkit.trees

ROOT = Path(dpkit.trees.__file__).parent


def test_the_subpackages_mirror_the_design() -> None:
    subpackages = {p.name for p in ROOT.iterdir() if (p / "__init__.py").exists()}
    assert subpackages == {"engine", "classification", "regression", "boosting"}


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
    with pytest.raises(TypeError):
        cls(0.5)  # no positional shim: parameters by name only
