"""Statistical privacy audits of Gaussian table releases: empirical ε at the charged δ ≤ the charge.

Claim checked: a count and a mean released by a session with ``noise="gaussian"``
(or ``"auto"``, which picks Gaussian noise for these) under ``accountant="zcdp"``
or ``"rdp"`` are (ε', δ')-DP for the (ε', δ') the ledger records for them (a
Gaussian step spending ε is charged ``Budget(ε', δ_B, rho=ε²/2)``, ε' the zCDP
conversion at the budget's δ_B; a mean's two steps add up).

As in ``tests/tables/test_privacy_audits.py``, samples are cheap: one query
grouped by ``M`` public keys, each key a copy of the table (or of its
neighbour), releases ``M`` independent draws of the per-group mechanism
(parallel composition: a group's release depends only on its rows and the
noise). :func:`dpkit.audit.audit_samples` bounds ε from below at the charged δ
(Clopper–Pearson, 99 %). A large δ_B (1/10) keeps the audit's power at a few
thousand samples. The same audit must refute a deliberately broken variant:
the noise drawn is half the noise charged (σ/2), everything else unchanged.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pytest
from tests.tables._declared import types_of

from dpkit.audit import AuditResult, audit_samples
from dpkit.errors import PrivacyWarning
from dpkit.mechanisms.gaussian import DiscreteGaussian, Gaussian
from dpkit.tables import Session

EPS = 1.0  # the query's share: σ = Δ₂/ε, ρ = ε²/2
SESSION_DELTA = 0.1
BOUNDS = (0.0, 100.0)
FAST_KEYS = 4000
# The mean's release shows less of its charge (a ratio of two noisy sums): at 4,000
# keys the audit refuted σ/2 for about half the seeds, at 12,000 for 6 of 6, so 16,000.
FAST_KEYS_MEAN = 16000
FULL_KEYS = 40000

Row = dict[str, Any]


@dataclass(frozen=True)
class Case:
    id: str
    call: Callable[[Session, list[str]], Any]
    table: list[Row]
    neighbour: list[Row]


def _rows(xs: list[float]) -> list[Row]:
    return [{"x": float(x)} for x in xs]


CASES = [
    Case(
        "count",
        lambda s, keys: s.count(epsilon=EPS, group_by="key", keys=keys),
        _rows([1, 2, 3]),
        _rows([1, 2, 3, 4]),
    ),
    Case(
        "mean",
        lambda s, keys: s.mean("x", epsilon=EPS, bounds=BOUNDS, group_by="key", keys=keys),
        _rows([0] * 20),  # measured: the audit resolves σ/2 here, not with two rows
        _rows([0] * 20 + [100]),
    ),
]
SETTINGS = [("zcdp", "gaussian"), ("rdp", "gaussian"), ("rdp", "auto")]


def _keys(m: int) -> list[str]:
    return [f"k{i:06d}" for i in range(m)]


def _copies(rows: list[Row], m: int) -> pd.DataFrame:
    frame = pd.DataFrame(rows * m)
    frame["key"] = np.repeat(_keys(m), len(rows))
    return frame


def _release(
    case: Case, rows: list[Row], m: int, seed: int, rule: str, noise: str
) -> tuple[np.ndarray, Any]:
    """The per-key values of one release, and the ledger record it was charged with."""
    frame = _copies(rows, m)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)  # a seeded session warns
        s = Session.from_pandas(
            frame,
            types=types_of(frame),
            epsilon=1e3,
            delta=SESSION_DELTA,
            accountant=rule,
            noise=noise,
            rng=seed,
        )
    keys = _keys(m)
    r = case.call(s, keys)
    (charge,) = s.accountant.history
    return np.array([float(r.value[k]) for k in keys]), charge


def _audit(case: Case, m: int, seed: int, rule: str, noise: str) -> AuditResult:
    a, charge = _release(case, case.table, m, seed, rule, noise)
    b, charge_b = _release(case, case.neighbour, m, seed + 1, rule, noise)
    assert charge.cost == charge_b.cost and charge.event == charge_b.event
    assert "gaussian" in str(charge.event.to_json())  # the audit is of Gaussian noise
    return audit_samples(
        a,
        b,
        epsilon=float(charge.cost.epsilon_exact),
        delta=float(charge.cost.delta_exact),
        confidence=0.99,
    )


@contextmanager
def _less_noise(monkeypatch: pytest.MonkeyPatch, factor: float = 0.5) -> Iterator[None]:
    """Broken: every Gaussian mechanism adds ``factor`` × the noise it is charged for."""
    with monkeypatch.context() as m:
        for cls in (Gaussian, DiscreteGaussian):
            real = cls.randomise

            def randomise(self: Any, value: Any, rng: object = None, _real: Any = real) -> Any:
                out = np.asarray(_real(self, value, rng))
                base = np.asarray(value, dtype=np.float64).reshape(out.shape)
                half = (out.astype(np.float64) - base) * factor
                if np.issubdtype(out.dtype, np.integer):
                    return (base + np.round(half)).astype(out.dtype)
                return base + half

            m.setattr(cls, "randomise", randomise)
        yield


@pytest.mark.parametrize(("rule", "noise"), SETTINGS)
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_fast_gaussian_audit(
    case: Case, rule: str, noise: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = FAST_KEYS_MEAN if case.id == "mean" else FAST_KEYS
    honest = _audit(case, keys, 11, rule, noise)
    assert honest.passed, honest
    with _less_noise(monkeypatch):
        broken = _audit(case, keys, 11, rule, noise)
    assert not broken.passed, f"the audit missed σ/2 in a Gaussian {case.id}: {broken}"


@pytest.mark.audit
@pytest.mark.parametrize(("rule", "noise"), SETTINGS)
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_full_gaussian_audit(
    case: Case, rule: str, noise: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    honest = _audit(case, FULL_KEYS, 23, rule, noise)
    assert honest.passed, honest
    with _less_noise(monkeypatch):
        broken = _audit(case, FULL_KEYS, 23, rule, noise)
    assert not broken.passed, broken
