"""scikit-learn's estimator checks on the DP classifiers.

The checks fit on data they generate, with labels they choose (0/1, 1/2/3,
strings, ...). A DP classifier cannot read its classes or bounds from the
data: they are public metadata. The harness below changes exactly that and
nothing else: its ``_public_metadata`` hook declares the labels and the
value range of each check's data (the production hook reads the ``classes``
and ``bounds`` parameters). Everything else - fit, predict, predict_proba,
validation, errors, cloning, pickling - runs the real code. See
docs/trees-classification.md ("scikit-learn compatibility").
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
from numpy.typing import NDArray
from sklearn.utils.estimator_checks import parametrize_with_checks

from dpkit.errors import PrivacyWarning
from dpkit.trees.classification._forest import DPRandomForestClassifier
from dpkit.trees.classification._tree import DPDecisionTreeClassifier
from dpkit.trees.engine._grid import Columns


def _declared(columns: Columns, y: NDArray[Any]) -> tuple[object, NDArray[Any]]:
    # TEST HARNESS ONLY: metadata taken from the check's own data.
    arrays = [np.asarray(a, dtype=np.float64) for a in columns.arrays]
    lows = np.array([np.nanmin(a) for a in arrays]) - 1.0
    highs = np.array([np.nanmax(a) for a in arrays]) + 1.0
    return (lows, highs), np.unique(np.asarray(y))


class HarnessTree(DPDecisionTreeClassifier):
    def _public_metadata(self, columns: Columns, y: NDArray[Any]) -> tuple[object, NDArray[Any]]:
        return _declared(columns, y)


class HarnessForest(DPRandomForestClassifier):
    def _public_metadata(self, columns: Columns, y: NDArray[Any]) -> tuple[object, NDArray[Any]]:
        return _declared(columns, y)


CHECK_INSTANCES = [
    HarnessTree(epsilon=1000.0, random_state=0),
    HarnessTree(epsilon=1000.0, algorithm="id3", max_depth=4, random_state=0),
    HarnessForest(epsilon=1000.0, n_estimators=3, random_state=0),
]


# Checks that ask fit to refuse values: a DP estimator cannot, because whether fit
# fails would then depend on one row. Undeclared labels (NaN, floats that are no
# class) are left out, text in a numeric column counts as missing.
EXPECTED_FAILURES = {
    "check_classifiers_regression_target": "undeclared labels are left out, not refused",
    "check_supervised_y_no_nan": "NaN labels are undeclared labels: left out, not refused",
    "check_dtype_object": "entries that are not numbers count as missing, not refused",
}


@parametrize_with_checks(CHECK_INSTANCES, expected_failed_checks=lambda _: EXPECTED_FAILURES)
def test_sklearn_contract(estimator: Any, check: Any) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        check(estimator)
