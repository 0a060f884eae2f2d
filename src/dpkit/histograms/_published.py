"""The object every histogram publisher returns, and range queries on it.

Everything here is post-processing of a differentially private release: it
reads only the published estimates and public parameters, so it costs no
budget and may be called any number of times.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from dpkit.errors import InvalidParameterError
from dpkit.privacy import PrivacyReport

if TYPE_CHECKING:
    from matplotlib.figure import Figure

# (left, right) inclusive unit-bin indices -> variance of the noise in the range sum.
RangeVariance = Callable[[NDArray[np.int64], NDArray[np.int64]], NDArray[np.float64]]


@dataclass(frozen=True)
class PublishedHistogram:
    """A differentially private histogram: bin boundaries plus one value per unit bin.

    Attributes:
        estimates: the published estimate of every unit bin (length n).
        bins: the published bin boundaries as unit-bin positions,
            ``[0, r_1, ..., n]``; published bin j covers unit bins
            ``bins[j] .. bins[j+1] - 1`` and all of them carry the same estimate
            (unit-bin methods publish ``bins = 0..n``).
        epsilon: the privacy cost of the whole release (epsilon-DP when
            ``delta`` is 0).
        method: the publisher's name.
        errors: the standard deviation of the noise in each unit estimate,
            given the published structure (from public parameters only). It
            does not include the approximation error of merging unit bins into
            one bin (which cannot be known without spending budget), so for
            NoiseFirst/StructureFirst it is a lower bound on the root mean
            squared error; see ``docs/histograms.md``.
        edges: the value-space edges of the unit bins (length n + 1), public;
            ``0..n`` when no edges were given.
        details: public parameters of the run (noise scales, k, split, ...).
            ``details["remaining"]`` (the budget left when an accountant paid)
            is deprecated: read ``privacy.remaining``; it goes in the next release.
        delta: the δ of an (epsilon, delta)-DP release (Gaussian noise); 0.0
            for the pure-ε publishers.
        rho: the ρ-zCDP guarantee of a Gaussian release (``epsilon``/``delta``
            is then its conversion), else ``None``.

    ``privacy`` is the :class:`dpkit.PrivacyReport` (ε, neighbouring relation,
    mechanism, remaining budget). There is no ``ci``: ``errors`` is a standard
    deviation of the noise only, and merged-bin methods add an approximation
    error that cannot be known without spending budget, so no interval with a
    stated coverage can be given from public facts.
    """

    estimates: NDArray[np.float64]
    bins: NDArray[np.int64]
    epsilon: float
    method: str
    errors: NDArray[np.float64]
    edges: NDArray[np.float64]
    details: dict[str, Any] = field(default_factory=dict)
    range_variance: RangeVariance | None = field(default=None, repr=False, compare=False)
    delta: float = 0.0
    rho: float | None = None

    @property
    def privacy(self) -> PrivacyReport:
        """What this release cost, as the :class:`dpkit.PrivacyReport` every release carries.

        (ε, δ)-DP (δ = 0 but for Gaussian releases, which also state ρ) under
        add/remove one row (one row moves one unit count by 1); ``remaining``
        is the budget the accountant had left when one paid, else None.
        """
        return PrivacyReport(
            epsilon=self.epsilon,
            delta=self.delta,
            rho=self.rho,
            mechanisms=(self.method,),
            remaining=self.details.get("remaining"),
        )

    @property
    def n_units(self) -> int:
        """Number of unit bins n."""
        return int(self.estimates.size)

    @property
    def n_bins(self) -> int:
        """Number of published bins k."""
        return int(self.bins.size - 1)

    @property
    def bin_edges(self) -> NDArray[np.float64]:
        """Value-space edges of the published bins (length k + 1)."""
        return np.asarray(self.edges[self.bins], dtype=np.float64)

    @property
    def bin_estimates(self) -> NDArray[np.float64]:
        """The per-unit estimate of each published bin (length k)."""
        return np.asarray(self.estimates[self.bins[:-1]], dtype=np.float64)

    def answer(self, left: ArrayLike, right: ArrayLike) -> Any:
        """Estimate the count of unit bins ``left .. right`` (0-based, both inclusive).

        Accepts integers (returns a float) or equal-shape integer arrays (one
        answer per pair). The answer is the sum of the unit estimates in the
        range; post-processing, no budget.
        """
        lo, hi, scalar = self._ranges(left, right)
        prefix = np.concatenate(([0.0], np.cumsum(self.estimates)))
        out = prefix[hi + 1] - prefix[lo]
        return float(out[0]) if scalar else out

    def answer_error(self, left: ArrayLike, right: ArrayLike) -> Any:
        """Standard deviation of the noise in :meth:`answer` for the same ranges.

        Exact for the published structure (Laplace, hierarchical, StructureFirst);
        for NoiseFirst it treats the structure as fixed. Excludes the
        approximation error of merged bins, like ``errors``.
        """
        lo, hi, scalar = self._ranges(left, right)
        if self.range_variance is None:
            variance = self._variance_from_bins(lo, hi)
        else:
            variance = self.range_variance(lo, hi)
        out = np.sqrt(np.maximum(variance, 0.0))
        return float(out[0]) if scalar else out

    def _variance_from_bins(
        self, lo: NDArray[np.int64], hi: NDArray[np.int64]
    ) -> NDArray[np.float64]:
        # Estimates within a bin share one noise draw; bins are independent.
        starts, ends = self.bins[:-1], self.bins[1:] - 1
        overlap = np.clip(
            np.minimum(hi[:, None], ends[None, :]) - np.maximum(lo[:, None], starts[None, :]) + 1,
            0,
            None,
        )
        unit_var = self.errors[starts] ** 2
        return np.asarray((overlap.astype(np.float64) ** 2 * unit_var).sum(axis=1))

    def _ranges(
        self, left: ArrayLike, right: ArrayLike
    ) -> tuple[NDArray[np.int64], NDArray[np.int64], bool]:
        scalar = np.ndim(left) == 0 and np.ndim(right) == 0
        lo_raw, hi_raw = np.atleast_1d(np.asarray(left)), np.atleast_1d(np.asarray(right))
        if lo_raw.dtype.kind not in "iu" or hi_raw.dtype.kind not in "iu":
            raise InvalidParameterError(
                "range ends must be integer unit-bin indices (0-based, inclusive)."
            )
        if lo_raw.shape != hi_raw.shape:
            raise InvalidParameterError("left and right must have the same shape.")
        lo, hi = lo_raw.astype(np.int64).ravel(), hi_raw.astype(np.int64).ravel()
        n = self.n_units
        if np.any(lo < 0) or np.any(hi >= n) or np.any(lo > hi):
            raise InvalidParameterError(
                f"a range [left, right] must satisfy 0 <= left <= right <= {n - 1} "
                f"(this histogram has {n} unit bins; indices are 0-based and inclusive)."
            )
        return lo, hi, scalar

    def plot(self, ax: Any = None, **kwargs: Any) -> Figure:
        """Draw this histogram with error bars; see :func:`dpkit.histograms.plot.plot_histogram`."""
        from dpkit.histograms.plot import plot_histogram

        return plot_histogram(self, ax=ax, **kwargs)


def answer(histogram: PublishedHistogram, left: ArrayLike, right: ArrayLike) -> Any:
    """Range query ``[left, right]`` (0-based, inclusive) on a published histogram."""
    return histogram.answer(left, right)
