"""Split policies: how a level decides which nodes split and where.

A policy is given true node sizes and split statistics by the core and must
release only noisy versions of them. Every query of a policy is made on the
disjoint nodes of one level at once, so its cost is charged once per level
(parallel composition); the estimator adds the levels up along a row's path.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from dpkit.trees.engine._choices import Choices
from dpkit.trees.engine._growth import Candidates, SplitDecision

UtilityFn = Callable[[Candidates], NDArray[np.float64]]
SelectFn = Callable[..., NDArray[np.int64]]


def _mechanisms():  # type: ignore[no-untyped-def]
    # Imported lazily: the tree package must import even where mechanisms are not built.
    import dpkit.mechanisms as mechanisms

    return mechanisms


def noisy_counts(
    counts: NDArray[np.int64], epsilon: float, rng: np.random.Generator | None, *, continuous: bool
) -> NDArray[np.float64]:
    """Counts of disjoint nodes plus noise: epsilon-DP (add/remove one row changes one count by 1).

    ``continuous=True`` uses Laplace noise (as the paper), else exact
    geometric (integer) noise; both have l1 sensitivity 1 for the vector.
    """
    mech = _mechanisms()
    if continuous:
        return np.asarray(
            mech.laplace(counts.astype(np.float64), sensitivity=1.0, epsilon=epsilon, rng=rng),
            dtype=np.float64,
        ).reshape(-1)
    return np.asarray(
        mech.geometric(counts.astype(np.int64), sensitivity=1, epsilon=epsilon, rng=rng),
        dtype=np.float64,
    ).reshape(-1)


#: ``selector=``: the private choice of one split per node (each epsilon-DP per node).
SELECTORS: Choices[Callable[[], SelectFn]] = Choices(
    "selector",
    {
        "exponential": lambda: _mechanisms().exponential,
        "permute_and_flip": lambda: _mechanisms().permute_and_flip,
    },
    why="both are epsilon-DP; permute_and_flip never has a worse expected utility",
)


def select(
    utilities: NDArray[np.float64],
    *,
    epsilon: float,
    sensitivity: float,
    monotonic: bool,
    rng: np.random.Generator | None,
    selector: str,
) -> NDArray[np.int64]:
    """One private choice per row of ``utilities`` (rows = disjoint nodes).

    ``selector`` "exponential" or "permute_and_flip" (never worse in expected
    utility); each is epsilon-DP per row for utilities of the given
    sensitivity, and rows on disjoint data compose in parallel.
    """
    fn = SELECTORS.lookup(selector)()
    chosen = fn(utilities, epsilon=epsilon, sensitivity=sensitivity, rng=rng, monotonic=monotonic)
    return np.asarray(chosen, dtype=np.int64).reshape(-1)


@dataclass
class GreedyPolicy:
    """Greedy splits chosen by the exponential mechanism over (feature, candidate) pairs.

    Per level (depth t < max_depth), in this order, on the level's disjoint nodes:

    1. optional noisy node count with ``count_epsilon[t]`` (l1 sensitivity 1);
       nodes whose noisy count is below ``min_split`` stop;
    2. one selection per splitting node with ``split_epsilon[t]``, utility
       ``utility(candidates)`` of l1 sensitivity ``sensitivity`` (over
       add/remove one row, for every candidate), ``monotonic`` if adding a row
       moves every candidate's utility the same way;
    3. optional noisy counts of the two children with ``child_epsilon[t]``
       (children are disjoint); if either is below ``min_leaf`` the node stays
       a leaf.

    A row meets at most one node per level, so the tree costs
    sum_t (count_epsilon[t] + split_epsilon[t] + child_epsilon[t]).
    """

    utility: UtilityFn
    sensitivity: float
    monotonic: bool
    split_epsilon: Sequence[float]
    weights: NDArray[np.float64] | None
    labels: NDArray[np.int64] | None = None
    n_labels: int = 0
    count_epsilon: Sequence[float] | None = None
    min_split: float = -np.inf
    child_epsilon: Sequence[float] | None = None
    min_leaf: float = -np.inf
    continuous_counts: bool = False
    selector: str = "exponential"
    rng: np.random.Generator | None = None
    needs_statistics: bool = True

    def should_split(self, depth: int, counts: NDArray[np.int64]) -> SplitDecision:
        if self.count_epsilon is None:
            return SplitDecision(np.ones(counts.size, dtype=bool))
        noisy = noisy_counts(
            counts, self.count_epsilon[depth], self.rng, continuous=self.continuous_counts
        )
        return SplitDecision(noisy >= self.min_split, noisy)

    def choose(
        self, depth: int, candidates: Candidates | None, n_nodes: int
    ) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        assert candidates is not None
        u = np.asarray(self.utility(candidates), dtype=np.float64)
        valid = candidates.valid if candidates.valid.ndim == 3 else candidates.valid[None]
        u = np.where(valid, u, -np.inf)
        width = u.shape[2]
        idx = select(
            u.reshape(n_nodes, -1),
            epsilon=self.split_epsilon[depth],
            sensitivity=self.sensitivity,
            monotonic=self.monotonic,
            rng=self.rng,
            selector=self.selector,
        )
        return idx // width, idx % width

    def accept(
        self, depth: int, left_counts: NDArray[np.int64], right_counts: NDArray[np.int64]
    ) -> NDArray[np.bool_] | None:
        if self.child_epsilon is None:
            return None
        both = np.stack([left_counts, right_counts], axis=1).ravel()
        noisy = noisy_counts(
            both, self.child_epsilon[depth], self.rng, continuous=self.continuous_counts
        )
        noisy = noisy.reshape(-1, 2)
        return np.all(noisy >= self.min_leaf, axis=1)


@dataclass
class RandomPolicy:
    """Data-independent splits: a uniformly random feature, then a uniform candidate of it.

    Reads no data (no histogram, no count), so it costs no budget: all of a
    random tree's budget can go to its leaves. Features and candidates are
    public, so the structure is independent of the data.
    """

    valid: NDArray[np.bool_]
    rng: np.random.Generator
    needs_statistics: bool = False
    weights: NDArray[np.float64] | None = None
    labels: NDArray[np.int64] | None = None
    n_labels: int = 0

    def should_split(self, depth: int, counts: NDArray[np.int64]) -> SplitDecision:
        return SplitDecision(np.ones(counts.size, dtype=bool))

    def choose(
        self, depth: int, candidates: Candidates | None, n_nodes: int
    ) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        n_cand = self.valid.sum(axis=1)
        usable = np.flatnonzero(n_cand > 0)
        feature = usable[self.rng.integers(0, usable.size, size=n_nodes)]
        return feature, self.rng.integers(0, n_cand[feature])

    def accept(
        self, depth: int, left_counts: NDArray[np.int64], right_counts: NDArray[np.int64]
    ) -> NDArray[np.bool_] | None:
        return None
