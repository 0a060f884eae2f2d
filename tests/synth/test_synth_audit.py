"""Statistical audit of a measured marginal cell: empirical ε at the charged δ ≤ the step's charge.

Claim checked: the noisy one-way marginal MST releases (discrete Gaussian
noise calibrated to its share ρᵢ of ρ, :mod:`dpkit.synth.mst`) is ρᵢ-zCDP
under add/remove one row, hence (εᵢ, δ)-DP with εᵢ the CKS conversion at δ.
The share ρᵢ is the one a real ``Session.synthesize`` call reports for that
marginal; the counts are the engine's (:func:`dpkit.synth.marginals.marginal`)
on a table and on the table plus one row in the audited cell. Samples of the
cell are drawn by the release's own measurement step (many independent draws
at once). :func:`dpkit.audit.audit_samples` bounds ε from below (Clopper–Pearson,
99 %); δ = 0.1 keeps the audit's power at a few thousand samples. The same
audit must refute a broken variant whose noise is a third of the charged σ.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd
import pytest
from tests.synth._tables import dependent, session

import dpkit.synth.mst as mst
from dpkit.accounting import zcdp_to_dp
from dpkit.audit import AuditResult, audit_samples
from dpkit.mechanisms import DiscreteGaussian, as_source
from dpkit.synth.domain import discretise
from dpkit.synth.marginals import marginal

DELTA = 0.1
RHO = 0.12  # two columns: each one-way marginal gets ρ/6 = 0.02, σ² = 25
FAST, FULL = 4000, 40000


class _ThirdSigma(DiscreteGaussian):
    """Broken: calibrated to 9ρ, so σ is about a third of what the charge assumes."""

    @classmethod
    def from_rho(cls, rho: Any, **kw: Any) -> DiscreteGaussian:  # type: ignore[override]
        return DiscreteGaussian.from_rho(Fraction(rho) * 9, **kw)


def _audit(samples: int, seed: int) -> AuditResult:
    frame = dependent(200, seed=3)
    neighbour = pd.concat(
        [frame, pd.DataFrame([{"colour": "red", "size": 10.0, "ok": "no"}])], ignore_index=True
    )
    columns = ["colour", "ok"]
    s = session(frame, delta=DELTA, epsilon=100.0)
    stub = lambda attributes, measurements, rows, seed, iterations=0: {  # noqa: E731
        a.name: np.zeros(rows, dtype=np.int64) for a in attributes
    }
    original = mst.fit_and_sample
    mst.fit_and_sample = stub
    try:
        report = s.synthesize(rows=1, rho=RHO, delta=DELTA, columns=columns).report
    finally:
        mst.fit_and_sample = original
    rho_step = Fraction(report.marginals[0].rho)
    assert report.marginals[0].columns == ("colour",)
    claimed = float(zcdp_to_dp(rho_step, DELTA).epsilon)

    source = as_source(np.random.default_rng(seed))
    draws = []
    for table in (frame, neighbour):
        t = session(table, delta=DELTA)
        (attribute,) = discretise(t.schema, t.column_kinds, ["colour"], 2)
        cell = marginal(t.engine, [attribute])[0]  # "red"
        tiled = np.full(samples, cell, dtype=np.int64)
        draws.append(mst.measure(tiled, ("colour",), rho_step, DELTA, source).noisy)
    return audit_samples(draws[0], draws[1], epsilon=claimed, delta=DELTA)


def _check(samples: int, monkeypatch: pytest.MonkeyPatch) -> None:
    result = _audit(samples, seed=1)
    assert result.passed, result
    monkeypatch.setattr(mst, "DiscreteGaussian", _ThirdSigma)
    broken = _audit(samples, seed=2)
    assert not broken.passed, broken


def test_a_measured_cell_passes_and_a_third_of_sigma_is_refuted(monkeypatch) -> None:
    _check(FAST, monkeypatch)


@pytest.mark.audit
def test_a_measured_cell_passes_and_a_third_of_sigma_is_refuted_full(monkeypatch) -> None:
    _check(FULL, monkeypatch)
