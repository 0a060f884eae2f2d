"""Differentially private gradient boosting of additive models (cyclic Newton boosting).

* :class:`DPGradientBoostingClassifier`: log loss, two or more classes.
* :class:`DPGradientBoostingRegressor`: squared loss on a bounded target.

The fitting loop and its privacy argument are in ``_cyclic``; the noise plan
(zCDP with exact discrete Gaussian noise, or pure epsilon) in ``_noise``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dpkit._lazy import lazy_exports

if TYPE_CHECKING:
    from dpkit.trees.boosting.classifier import DPGradientBoostingClassifier
    from dpkit.trees.boosting.regressor import DPGradientBoostingRegressor

__all__ = [
    "DPGradientBoostingClassifier",
    "DPGradientBoostingRegressor",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "DPGradientBoostingClassifier": "dpkit.trees.boosting.classifier",
        "DPGradientBoostingRegressor": "dpkit.trees.boosting.regressor",
    },
)
