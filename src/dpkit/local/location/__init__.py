"""Location privacy: geo-indistinguishability and obfuscation over regions.

- :class:`PlanarLaplace`: ε-geo-indistinguishable reports (ε per unit of
  distance), sampled exactly on a lattice and truncated to a declared area.
- :class:`Regions`, :func:`grid_regions`: the declared places.
- :func:`exponential_matrix`, :func:`optimal_matrix`: certified
  ε-geo-indistinguishable obfuscation matrices (:class:`ObfuscationMatrix`),
  the second the LP optimum of Bordenabe et al. (CCS 2014);
  :func:`realised_epsilon` checks any matrix; :func:`bayes_remap` is both
  the optimal remapping (utility) and the Bayesian adversary (privacy).
- The DP-applications course report's sparse mobile crowdsensing loop: :func:`sensing_matrix`
  (S1), :func:`fit_adjustment` (S2), :func:`upload` (M1, M2),
  :func:`infer_map` (S3).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dpkit._lazy import lazy_exports

if TYPE_CHECKING:
    from dpkit.local.location.channels import planar_laplace_channel, project_km, unproject_km
    from dpkit.local.location.crowdsensing import (
        Adjustment,
        fit_adjustment,
        infer_map,
        quality_loss,
        sensing_matrix,
        upload,
    )
    from dpkit.local.location.matrices import (
        ObfuscationMatrix,
        bayes_remap,
        exponential_matrix,
        optimal_matrix,
        realised_epsilon,
    )
    from dpkit.local.location.planar_laplace import PlanarLaplace
    from dpkit.local.location.regions import Regions, grid_regions

__all__ = [
    "Adjustment",
    "ObfuscationMatrix",
    "PlanarLaplace",
    "Regions",
    "bayes_remap",
    "exponential_matrix",
    "fit_adjustment",
    "grid_regions",
    "infer_map",
    "optimal_matrix",
    "planar_laplace_channel",
    "project_km",
    "quality_loss",
    "realised_epsilon",
    "sensing_matrix",
    "unproject_km",
    "upload",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "Adjustment": "dpkit.local.location.crowdsensing",
        "ObfuscationMatrix": "dpkit.local.location.matrices",
        "PlanarLaplace": "dpkit.local.location.planar_laplace",
        "Regions": "dpkit.local.location.regions",
        "bayes_remap": "dpkit.local.location.matrices",
        "exponential_matrix": "dpkit.local.location.matrices",
        "fit_adjustment": "dpkit.local.location.crowdsensing",
        "grid_regions": "dpkit.local.location.regions",
        "infer_map": "dpkit.local.location.crowdsensing",
        "optimal_matrix": "dpkit.local.location.matrices",
        "planar_laplace_channel": "dpkit.local.location.channels",
        "project_km": "dpkit.local.location.channels",
        "quality_loss": "dpkit.local.location.crowdsensing",
        "realised_epsilon": "dpkit.local.location.matrices",
        "sensing_matrix": "dpkit.local.location.crowdsensing",
        "unproject_km": "dpkit.local.location.channels",
        "upload": "dpkit.local.location.crowdsensing",
    },
)
