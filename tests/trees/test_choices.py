"""Choices by name (criterion, selector, algorithm, partition, missing, leaf, loss): one registry each.

Every choice the estimators take by name is one ``engine._choices.Choices``;
its names are the only spellings accepted, the error lists them, and
scikit-learn's ``_parameter_constraints`` are built from the same registry.
The last test runs the worked example of docs/architecture.md ("how to add
an estimator": a registered criterion).
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
import pytest
from sklearn.base import clone

from dpkit.errors import InvalidParameterError
from dpkit.trees import (
    DPDecisionTreeClassifier,
    DPDecisionTreeRegressor,
    DPGradientBoostingClassifier,
    DPGradientBoostingRegressor,
    DPRandomForestClassifier,
    DPRandomForestRegressor,
)
from dpkit.trees.boosting.regressor import LOSSES
from dpkit.trees.classification._criteria import ALGORITHMS, CRITERIA
from dpkit.trees.classification._forest import PARTITIONS
from dpkit.trees.classification._inputs import MISSING_POLICIES
from dpkit.trees.engine._choices import Choices
from dpkit.trees.engine._policies import SELECTORS
from dpkit.trees.regression._criteria import LEAVES
from dpkit.trees.regression._forest import FOREST_ALGORITHMS
from dpkit.trees.regression._tree import TREE_ALGORITHMS

# (estimator, parameter, its registry)
WIRING: list[tuple[type, str, Choices[Any]]] = [
    (DPDecisionTreeClassifier, "algorithm", ALGORITHMS),
    (DPDecisionTreeClassifier, "criterion", CRITERIA),
    (DPDecisionTreeClassifier, "selector", SELECTORS),
    (DPDecisionTreeClassifier, "missing", MISSING_POLICIES),
    (DPRandomForestClassifier, "algorithm", ALGORITHMS),
    (DPRandomForestClassifier, "criterion", CRITERIA),
    (DPRandomForestClassifier, "selector", SELECTORS),
    (DPRandomForestClassifier, "missing", MISSING_POLICIES),
    (DPRandomForestClassifier, "partition", PARTITIONS),
    (DPDecisionTreeRegressor, "algorithm", TREE_ALGORITHMS),
    (DPDecisionTreeRegressor, "leaf", LEAVES),
    (DPRandomForestRegressor, "algorithm", FOREST_ALGORITHMS),
    (DPRandomForestRegressor, "leaf", LEAVES),
    (DPGradientBoostingClassifier, "missing", MISSING_POLICIES),
    (DPGradientBoostingRegressor, "loss", LOSSES),
]

FIT_DATA: dict[type, dict[str, Any]] = {
    DPDecisionTreeClassifier: {"classes": [0, 1]},
    DPRandomForestClassifier: {"classes": [0, 1]},
    DPGradientBoostingClassifier: {"classes": [0, 1]},
    DPDecisionTreeRegressor: {"target_bounds": (0, 1)},
    DPRandomForestRegressor: {"target_bounds": (0, 1)},
    DPGradientBoostingRegressor: {"target_bounds": (0, 1)},
}


def _ids(case: tuple[type, str, Choices[Any]]) -> str:
    return f"{case[0].__name__}.{case[1]}"


@pytest.mark.parametrize("case", WIRING, ids=[_ids(c) for c in WIRING])
def test_sklearn_constraints_are_built_from_the_registry(
    case: tuple[type, str, Choices[Any]],
) -> None:
    cls, parameter, registry = case
    (constraint,) = cls._parameter_constraints[parameter]  # type: ignore[attr-defined]
    assert constraint.options == set(registry.accepted)
    assert registry.parameter == parameter
    assert inspect.signature(cls).parameters[parameter].default in registry.accepted


@pytest.mark.parametrize("case", WIRING, ids=[_ids(c) for c in WIRING])
def test_an_unknown_name_is_refused_before_any_data_is_read_and_the_error_lists_the_names(
    case: tuple[type, str, Choices[Any]],
) -> None:
    cls, parameter, registry = case
    X = np.random.default_rng(0).random((40, 2))
    y = (X[:, 0] > 0.5).astype(int)
    model = cls(epsilon=1.0, bounds=(0, 1), random_state=0, **FIT_DATA[cls])
    model.set_params(**{parameter: "no-such-name"})
    with pytest.raises(InvalidParameterError) as caught:
        model.fit(X, y)
    message = str(caught.value)
    assert message.startswith(f"{parameter} must be one of ")
    assert all(repr(name) in message for name in registry.accepted)
    assert not hasattr(model, "privacy_")  # refused before the fit, nothing charged


def test_a_registry_has_one_spelling_per_name_and_one_lookup() -> None:
    choices: Choices[int] = Choices("colour", {"red": 1}, extra=("auto",), why="pick one")
    choices.register("blue", 2)
    assert list(choices) == ["red", "blue"] and choices.accepted == ("auto", "red", "blue")
    assert choices.lookup("blue") == 2
    with pytest.raises(ValueError, match="already registered"):
        choices.register("red", 3)
    with pytest.raises(
        InvalidParameterError, match=r"\['auto', 'red', 'blue'\], got 'Red': pick one"
    ):
        choices.check("Red")  # no second spelling
    with pytest.raises(InvalidParameterError, match="resolved before"):
        choices.lookup("auto")  # an extra name is the estimator's to resolve
    with pytest.raises(InvalidParameterError):
        choices.check(["red"])  # not a name at all
    choices.unregister("blue")
    assert "blue" not in choices.accepted


@pytest.mark.parametrize("cls", list(FIT_DATA), ids=lambda c: c.__name__)
def test_init_stores_exactly_its_parameters(cls: type) -> None:
    names = set(inspect.signature(cls).parameters)
    model = cls(epsilon=0.5)
    assert set(vars(model)) == names  # scikit-learn's contract: nothing else
    assert set(model.get_params()) == names and model.get_params()["epsilon"] == 0.5
    assert clone(model).get_params() == model.get_params()


def test_worked_example_how_to_add_an_estimator() -> None:
    """docs/architecture.md, "How to add an estimator": a new split criterion, by name."""
    # --- the example (docs/architecture.md) ---
    from dpkit.trees.classification._criteria import CRITERIA, Criterion, max_utility

    def misclassified(c):  # type: ignore[no-untyped-def]
        """Minus the rows the children's majority classes get wrong. Adding a row lowers
        it by 0 or 1 for every candidate: sensitivity 1, monotonic."""
        return max_utility(c) - c.total.sum(axis=-1)[:, None, None]

    CRITERIA.register(
        "misclassified", lambda n_classes: Criterion("misclassified", misclassified, 1.0, True)
    )
    model = DPDecisionTreeClassifier(epsilon=0.3, criterion="misclassified", max_depth=3,
                                     classes=[0, 1], bounds=(0, 1), random_state=0)  # fmt: skip
    # --- end of the example ---
    try:
        X = np.random.default_rng(1).random((500, 3))
        y = ((X[:, 0] > 0.3) ^ (X[:, 2] > 0.7)).astype(int)
        model.fit(X, y)
        assert model.criterion_ == "misclassified"
        (constraint,) = DPRandomForestClassifier._parameter_constraints["criterion"]
        assert constraint.is_satisfied_by("misclassified")  # the forest takes it too
        assert model.privacy_.epsilon == 0.3
        # Minus the errors is the max criterion shifted per node, and the exponential
        # mechanism is shift-invariant per node: the same seed grows the same tree.
        same = clone(model).set_params(criterion="max").fit(X, y)
        assert np.array_equal(model.tree_.feature, same.tree_.feature)
        assert np.array_equal(model.tree_.cut, same.tree_.cut)
        # ... and another criterion grows another tree from the same seed here, so the
        # equality above says the registered utility was the one used.
        gini = clone(model).set_params(criterion="gini").fit(X, y)
        assert not (
            np.array_equal(model.tree_.feature, gini.tree_.feature)
            and np.array_equal(model.tree_.cut, gini.tree_.cut)
        )
    finally:
        CRITERIA.unregister("misclassified")
    with pytest.raises(InvalidParameterError, match="criterion must be one of"):
        clone(model).fit(X, y)
    assert not constraint.is_satisfied_by("misclassified")
