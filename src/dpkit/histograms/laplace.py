"""The baseline: Laplace noise on every unit bin (Dwork, McSherry, Nissim, Smith 2006)."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from dpkit.accounting import Budget, as_accountant, charge_and_run
from dpkit.histograms._common import check_counts, check_edges, epsilon_of, source_for
from dpkit.histograms._published import PublishedHistogram


def laplace(
    counts: ArrayLike,
    epsilon: float,
    *,
    rng: object = None,
    accountant: Any = None,
    edges: ArrayLike | None = None,
) -> PublishedHistogram:
    """Publish every unit count plus independent Lap(1/epsilon) noise.

    Privacy: epsilon-DP. Neighbouring datasets differ by adding or removing one
    row, which changes exactly one unit count by 1, so the vector of counts has
    l1 sensitivity 1 and the Laplace mechanism with scale 1/epsilon on the whole
    vector is epsilon-DP (noise from :func:`dpkit.mechanisms.laplace`, sampled
    exactly on a fine grid; its scale is 1/epsilon up to 2^-10).

    Args:
        counts: the true count of each of the n unit bins (finite, >= 0).
        epsilon: the privacy budget (> 0).
        rng: ``None`` (secure randomness), an int seed or a NumPy Generator
            (reproducible; for tests and experiments only).
        accountant: optional :class:`dpkit.accounting.Accountant`; epsilon is
            charged before anything is computed.
        edges: public value-space edges of the unit bins (n + 1), for labels.

    Returns:
        A :class:`PublishedHistogram` with unit bins; ``errors`` is the noise
        standard deviation sqrt(2) * scale of every unit estimate; estimates are
        unbiased.
    """
    from dpkit.mechanisms import Laplace

    x = check_counts(counts)
    eps = epsilon_of(epsilon)
    unit_edges = check_edges(edges, x.size)
    mechanism = Laplace(epsilon=eps, sensitivity=1.0, size=x.size)
    payer = as_accountant(accountant)

    def release() -> PublishedHistogram:
        remaining = None if payer is None else payer.remaining
        noisy = np.asarray(mechanism.randomise(x, rng=source_for(rng)), dtype=np.float64)
        std = np.sqrt(2.0) * mechanism.scale
        return PublishedHistogram(
            estimates=noisy,
            bins=np.arange(x.size + 1, dtype=np.int64),
            epsilon=eps,
            method="laplace",
            errors=np.full(x.size, std),
            edges=unit_edges,
            details={"scale": mechanism.scale, "sensitivity": 1.0, "remaining": remaining},
        )

    return charge_and_run(payer, Budget(eps), "histogram: laplace", release)
