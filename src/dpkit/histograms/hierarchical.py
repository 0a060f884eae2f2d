"""A b-ary tree of noisy counts made consistent by constrained inference.

Hay, Rastogi, Miklau, Suciu, "Boosting the accuracy of differentially private
histograms through consistency", VLDB 2010. The unit bins are the leaves of a
complete b-ary tree (padded with public zero leaves up to a power of b); every
node holds the count of its leaves. All node counts get Laplace noise, then the
least-squares estimate consistent with "parent = sum of children" is computed
in two linear passes (Hay et al., Theorem 3) and the leaves are published.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from dpkit.accounting import Budget, as_accountant, charge_and_run
from dpkit.errors import InvalidParameterError
from dpkit.histograms._common import check_counts, check_edges, epsilon_of, source_for
from dpkit.histograms._published import PublishedHistogram

DEFAULT_BRANCHING = 4


def tree_levels(n: int, branching: int) -> int:
    """Number of levels h (leaves and root included) of the padded b-ary tree over n leaves."""
    levels, leaves = 1, 1
    while leaves < n:
        leaves *= branching
        levels += 1
    return levels


def node_counts(leaves: NDArray[np.float64], branching: int) -> list[NDArray[np.float64]]:
    """Counts of every level, leaves first; ``leaves`` has length b^(h-1)."""
    levels = [leaves]
    while levels[-1].size > 1:
        levels.append(levels[-1].reshape(-1, branching).sum(axis=1))
    return levels


def constrained_inference(
    noisy: list[NDArray[np.float64]], branching: int
) -> list[NDArray[np.float64]]:
    """Least-squares consistent node estimates from equally noisy node counts.

    Bottom-up: z_v = (b^i - b^(i-1))/(b^i - 1) y_v + (b^(i-1) - 1)/(b^i - 1) sum z_children
    (i = height, leaves i = 1); top-down: h_v = z_v + (h_parent - sum z_siblings)/b.
    The result satisfies parent = sum of children exactly (up to rounding) and
    equals the ordinary least-squares solution (Hay et al. 2010, Theorem 3).
    Works on trailing batch axes as well (shape (nodes, ...)).
    """
    b = branching
    z = [noisy[0]]
    for height in range(2, len(noisy) + 1):
        children = z[-1].reshape(-1, b, *z[-1].shape[1:]).sum(axis=1)
        bi, bi1 = float(b**height), float(b ** (height - 1))
        z.append((bi - bi1) / (bi - 1) * noisy[height - 1] + (bi1 - 1) / (bi - 1) * children)
    estimates = [z[-1]]
    for level in range(len(noisy) - 2, -1, -1):
        parent = estimates[0]
        zl = z[level]
        sibling_sum = zl.reshape(-1, b, *zl.shape[1:]).sum(axis=1)
        correction = np.repeat((parent - sibling_sum) / b, b, axis=0)
        estimates.insert(0, zl + correction)
    return estimates


def _projection_norms(
    lo: NDArray[np.int64], hi: NDArray[np.int64], block: int
) -> NDArray[np.float64]:
    """sum over blocks of size ``block`` of |[lo, hi] ∩ block|^2 / block."""
    first, last = lo // block, hi // block
    same = first == last
    head = np.where(same, hi - lo + 1, (first + 1) * block - lo).astype(np.float64)
    tail = np.where(same, 0, hi - last * block + 1).astype(np.float64)
    full = np.maximum(last - first - 1, 0).astype(np.float64)
    return (head * head + tail * tail) / block + full * block


def range_variance(
    lo: NDArray[np.int64], hi: NDArray[np.int64], branching: int, levels: int, node_variance: float
) -> NDArray[np.float64]:
    """Exact variance of the consistent estimate of the range sum [lo, hi].

    The estimate is the least-squares one, so its covariance is
    sigma^2 (X^T X)^-1 with X the tree's query matrix. X^T X = sum over levels of
    block-diagonal all-ones blocks of size b^l; those commute and share the Haar
    eigenspaces V_m (constant on b^m-blocks, zero-sum on b^(m+1)-blocks) with
    eigenvalue lambda_m = sum_{l <= m} b^l. So Var = sigma^2 sum_m |P_m w|^2 / lambda_m,
    |P_m w|^2 = q_m - q_(m+1), q_m the block norm computed by ``_projection_norms``.
    """
    b = branching
    q = [_projection_norms(lo, hi, b**m) for m in range(levels)]
    total = np.zeros(lo.shape, dtype=np.float64)
    for m in range(levels):
        lam = (b ** (m + 1) - 1) / (b - 1)
        proj = q[m] - (q[m + 1] if m + 1 < levels else 0.0)
        total += proj / lam
    return node_variance * total


def hierarchical(
    counts: ArrayLike,
    epsilon: float,
    *,
    branching: int = DEFAULT_BRANCHING,
    rng: object = None,
    accountant: Any = None,
    edges: ArrayLike | None = None,
) -> PublishedHistogram:
    """Publish unit counts through a noisy b-ary tree with constrained inference.

    Privacy: epsilon-DP. Adding or removing one row changes one unit count by
    1 and hence exactly one node per level by 1: the vector of all node counts
    has l1 sensitivity h (the number of levels, root and leaves included), so
    Laplace noise of scale h/epsilon on every node is epsilon-DP
    (:func:`dpkit.mechanisms.laplace` with sensitivity h). Padding leaves are
    zero for every dataset (public). Constrained inference is post-processing.

    Accuracy: the leaf estimates are unbiased; ``errors`` and
    :meth:`PublishedHistogram.answer_error` are the exact noise standard
    deviations of the least-squares estimates (see :func:`range_variance`). A
    range of any length touches O(b log_b n) noisy nodes, which is why this is
    the strong baseline for long range queries.

    Args:
        counts: the true count of each of the n unit bins (finite, >= 0).
        epsilon: the privacy budget (> 0).
        branching: b >= 2, the fan-out of the tree (default 4, chosen by the
            benchmark in ``docs/histograms.md``).
        rng, accountant, edges: as for :func:`dpkit.histograms.laplace`.
    """
    from dpkit.mechanisms import Laplace

    x = check_counts(counts)
    eps = epsilon_of(epsilon)
    unit_edges = check_edges(edges, x.size)
    if isinstance(branching, bool) or not isinstance(branching, int | np.integer) or branching < 2:
        raise InvalidParameterError("branching must be an integer >= 2 (e.g. 2, 4 or 16).")
    b = int(branching)
    levels = tree_levels(x.size, b)
    padded = np.zeros(b ** (levels - 1), dtype=np.float64)
    padded[: x.size] = x
    true_levels = node_counts(padded, b)
    flat = np.concatenate(true_levels)
    mechanism = Laplace(epsilon=eps, sensitivity=float(levels), size=flat.size)
    payer = as_accountant(accountant)

    def release() -> PublishedHistogram:
        remaining = None if payer is None else payer.remaining
        noisy_flat = np.asarray(mechanism.randomise(flat, rng=source_for(rng)), dtype=np.float64)
        splits = np.cumsum([level.size for level in true_levels])[:-1]
        noisy_levels = np.split(noisy_flat, splits)
        consistent = constrained_inference(noisy_levels, b)
        estimates = consistent[0][: x.size].copy()

        node_variance = 2.0 * mechanism.scale**2

        def variance(lo: NDArray[np.int64], hi: NDArray[np.int64]) -> NDArray[np.float64]:
            return range_variance(lo, hi, b, levels, node_variance)

        units = np.arange(x.size, dtype=np.int64)
        errors = np.sqrt(variance(units, units))
        return PublishedHistogram(
            estimates=estimates,
            bins=np.arange(x.size + 1, dtype=np.int64),
            epsilon=eps,
            method="hierarchical",
            errors=errors,
            edges=unit_edges,
            details={
                "branching": b,
                "levels": levels,
                "scale": mechanism.scale,
                "sensitivity": float(levels),
                "remaining": remaining,
                "nodes": consistent,
            },
            range_variance=variance,
        )

    return charge_and_run(payer, Budget(eps), "histogram: hierarchical", release)
