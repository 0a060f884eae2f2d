"""Location privacy for sparse mobile crowdsensing (the DP-applications course report, B).

L. Wang et al., "Differential location privacy for sparse mobile
crowdsensing" (ICDM 2016), the framework of the course report's figure: a few participants' phones sense a value (noise,
air quality, ...) where they are and upload it with their region; the server
infers the value of every region. The loop, step by step:

- **S1** (server, offline) :func:`sensing_matrix`: the ε-geo-indistinguishable
  obfuscation matrix that minimises the expected *data-quality* loss — the
  error of a reading uploaded from region i under region j's name — learned
  from historical sensing data (an LP, :func:`dpkit.local.location.optimal_matrix`
  with that loss). It is public and downloaded to every phone.
- **S2** (server, offline) :func:`fit_adjustment`: per pair of regions, a
  linear map from a reading in region i to the expected reading in region j,
  fitted on the history (least squares over cycles where both were sensed).
- **M1** (phone) :func:`upload`: the true region i becomes region j drawn
  from row i of the matrix.
- **M2** (phone) :func:`upload`: the reading v becomes f_{i→j}(v), so that it
  fits region j.
- **S3** (server) :func:`infer_map`: the full map from the sparse, obfuscated,
  adjusted uploads and the history's low-rank structure (the history's
  leading principal components fitted to the regions that received uploads,
  with ridge shrinkage).

Privacy statement — what is and is not covered. The *reported region* is
ε-geo-indistinguishable (M1 samples a certified matrix). The *reading* is
uploaded in the clear, as in the paper: it is the thing being collected, and
whatever it says about where it was taken is not covered by ε. The course
report presents the adjustment as accuracy only; dpkit's docs say plainly that it
is computed on the phone from the *true* region, so the adjusted value is a
function of the true region and can narrow it down for an adversary who
knows the history (e.g. when two regions' maps f_{i→j} differ a lot). Use it
when the readings are not what needs protecting; otherwise release the
readings through their own mechanism (e.g. :class:`dpkit.local.PiecewiseMean`).
The history is public input (earlier, consented or released data).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from dpkit.errors import DataError, InvalidParameterError
from dpkit.local.location.matrices import ObfuscationMatrix, optimal_matrix
from dpkit.local.location.regions import Regions

__all__ = [
    "Adjustment",
    "fit_adjustment",
    "infer_map",
    "quality_loss",
    "sensing_matrix",
    "upload",
]

_MIN_OVERLAP = 3  # cycles two regions need in common for a slope; fewer: shift only


def check_history(history: ArrayLike, n_regions: int) -> NDArray[np.float64]:
    """History as an (n regions, cycles) float array; NaN where a region was not sensed."""
    try:
        h = np.asarray(history, dtype=np.float64)
    except (TypeError, ValueError):
        raise InvalidParameterError(
            "history must be numbers: (regions, cycles), NaN if unsensed."
        ) from None
    if h.ndim != 2 or h.shape[0] != n_regions or h.shape[1] < 1:
        raise InvalidParameterError(
            "history must be an array of shape (regions, cycles) with one row per region."
        )
    if np.isinf(h).any():
        raise InvalidParameterError("history must be finite (NaN marks a cycle without a reading).")
    if np.isnan(h).all(axis=1).any():
        raise InvalidParameterError(
            "every region needs at least one historical reading: drop regions without history."
        )
    return h


@dataclass(frozen=True)
class Adjustment:
    """S2's data-adjustment functions f_{i→j}(v) = mean_j + slope[i, j]·(v - mean_i)."""

    means: NDArray[np.float64]
    slopes: NDArray[np.float64]

    def __call__(
        self, source: ArrayLike, target: ArrayLike, values: ArrayLike
    ) -> NDArray[np.float64]:
        """f_{source→target}(values), element-wise."""
        i = np.asarray(source, dtype=np.int64)
        j = np.asarray(target, dtype=np.int64)
        v = np.asarray(values, dtype=np.float64)
        return self.means[j] + self.slopes[i, j] * (v - self.means[i])


def fit_adjustment(history: ArrayLike) -> Adjustment:
    """S2: per pair (i, j), the least-squares slope of j's readings on i's over shared cycles.

    f_{i→i} is the identity; pairs with fewer than 3 shared cycles, or no
    variation in i, keep the shift (slope 0: the reading says nothing about j
    beyond j's mean). A function of the public history only.
    """
    h = np.asarray(history, dtype=np.float64)
    if h.ndim != 2:
        raise InvalidParameterError("history must be an array of shape (regions, cycles).")
    h = check_history(h, h.shape[0])
    means = np.nanmean(h, axis=1)
    seen = ~np.isnan(h)
    centred = np.where(seen, h - means[:, None], 0.0)
    both = seen.astype(np.float64) @ seen.T.astype(np.float64)
    cov = centred @ centred.T  # Σ over shared cycles of (h_i - m_i)(h_j - m_j)
    var_i = (centred**2) @ seen.T.astype(np.float64)  # Σ over cycles shared with j of (h_i - m_i)^2
    with np.errstate(divide="ignore", invalid="ignore"):
        slopes = np.where((both >= _MIN_OVERLAP) & (var_i > 0), cov / var_i, 0.0)
    np.fill_diagonal(slopes, 1.0)
    return Adjustment(means, slopes)


def quality_loss(history: ArrayLike, adjustment: Adjustment | None = None) -> NDArray[np.float64]:
    """L[i, j]: mean |reading in j - reading from i uploaded as j| over the history's cycles.

    Without an adjustment the reading is uploaded as it is; with one, as
    f_{i→j}(reading). Where i and j share no cycle, the difference of their means.
    """
    h = np.asarray(history, dtype=np.float64)
    h = check_history(h, h.shape[0])
    n = h.shape[0]
    loss = np.empty((n, n))
    means = np.nanmean(h, axis=1)
    for i in range(n):
        if adjustment is None:
            moved = np.broadcast_to(h[i], h.shape)
        else:
            moved = adjustment.means[:, None] + adjustment.slopes[i][:, None] * (
                h[i] - adjustment.means[i]
            )
        err = np.abs(h - moved)
        with np.errstate(invalid="ignore"):
            counts = (~np.isnan(err)).sum(axis=1)
            mean_err = np.where(counts > 0, np.nansum(err, axis=1) / np.maximum(counts, 1), np.nan)
        fallback = np.abs(means - (means[i] if adjustment is None else means))
        loss[i] = np.where(np.isnan(mean_err), fallback, mean_err)
    np.fill_diagonal(loss, 0.0)
    return loss


def sensing_matrix(
    regions: Regions,
    history: ArrayLike,
    epsilon: float,
    *,
    adjustment: Adjustment | None = None,
    prior: ArrayLike | None = None,
    method: str = "constraints",
    neighbours: int | None = 8,
) -> ObfuscationMatrix:
    """S1: the ε-geo-indistinguishable matrix of least expected data-quality loss (an LP).

    ``method`` as in :func:`optimal_matrix`; the default is the constraint LP,
    because a data-quality loss is not geometric: many matrices tie on it, and
    the constraint LP's optimum spreads reports over more regions than the
    mixture LP's, which S3's inference needs (fewer regions observed, a worse
    fit). Use ``"mixture"`` for region sets too large for the constraint LP.
    """
    h = check_history(history, regions.n)
    return optimal_matrix(
        regions,
        epsilon,
        prior=prior,
        loss=quality_loss(h, adjustment),
        method=method,
        neighbours=neighbours,
    )


def upload(
    matrix: ObfuscationMatrix,
    true_regions: ArrayLike,
    readings: ArrayLike,
    *,
    adjustment: Adjustment | None = None,
    rng: object = None,
) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    """M1 + M2 on each phone: (reported region, reading as uploaded).

    The reported region is ε-geo-indistinguishable; the reading is not
    protected, and an adjusted reading depends on the true region (see the
    module docstring).
    """
    try:
        v = np.asarray(readings, dtype=np.float64).ravel()
    except (TypeError, ValueError):
        raise DataError("readings must be numbers, one per participant.") from None
    reported = matrix.obfuscate(true_regions, rng)
    if v.shape[0] != reported.shape[0] or not np.isfinite(v).all():
        raise DataError("readings must be finite numbers, one per participant.")
    if adjustment is None:
        return reported, v
    return reported, adjustment(np.asarray(true_regions, dtype=np.int64), reported, v)


def infer_map(
    history: ArrayLike,
    reported_regions: ArrayLike,
    readings: ArrayLike,
    *,
    rank: int = 3,
    ridge: float = 1.0,
) -> NDArray[np.float64]:
    """S3: the value of every region from the uploads and the history's structure.

    The map is modelled as the history's mean plus a combination of its
    ``rank`` leading principal components (over cycles); the combination is
    fitted by ridge regression to the regions that received uploads (weighted
    by their number of uploads); a region with k uploads then blends its
    uploads' mean with the fit as (k·mean + fit)/(k + 1). Post-processing of
    the uploads: no privacy cost.
    """
    h = np.asarray(history, dtype=np.float64)
    if h.ndim != 2:
        raise InvalidParameterError("history must be an array of shape (regions, cycles).")
    h = check_history(h, h.shape[0])
    n = h.shape[0]
    j = np.asarray(reported_regions)
    v = np.asarray(readings, dtype=np.float64).ravel()
    if j.ndim != 1 or j.dtype.kind not in "iu" or j.shape != v.shape:
        raise DataError("uploads must be region indices and readings of the same length.")
    if j.size == 0:
        raise DataError("no uploads to infer from: collect at least one upload.")
    if int(j.min()) < 0 or int(j.max()) >= n or not np.isfinite(v).all():
        raise DataError("an upload names a region outside 0..n-1 or has a non-finite reading.")
    if not (isinstance(rank, int) and rank >= 0) or not (ridge > 0):
        raise InvalidParameterError("rank must be an integer >= 0 and ridge a number > 0.")
    means = np.nanmean(h, axis=1)
    counts = np.bincount(j, minlength=n).astype(np.float64)
    sums = np.bincount(j, weights=v, minlength=n)
    seen = counts > 0
    observed = np.where(seen, sums / np.maximum(counts, 1.0), 0.0)
    centred = np.where(np.isnan(h), 0.0, h - means[:, None])
    k = min(rank, min(centred.shape) - 1) if min(centred.shape) > 1 else 0
    fit = means.copy()
    if k > 0:
        u, s, _ = np.linalg.svd(centred, full_matrices=False)
        basis = u[:, :k] * s[:k] / np.sqrt(max(1, h.shape[1] - 1))
        w = counts[seen]
        b = basis[seen]
        lhs = b.T @ (w[:, None] * b) + ridge * np.eye(k)
        rhs = b.T @ (w * (observed[seen] - means[seen]))
        fit = means + basis @ np.linalg.solve(lhs, rhs)
    return np.where(seen, (counts * observed + fit) / (counts + 1.0), fit)
