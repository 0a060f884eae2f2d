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
