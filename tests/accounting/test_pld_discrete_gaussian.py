"""The PLD of dpkit's discrete Gaussian releases (one-axis shifts) against dp_accounting's."""

from __future__ import annotations

import json
from fractions import Fraction

import pytest
from dp_accounting.pld import privacy_loss_distribution as reference

from dpkit.accounting import Accountant, Budget
from dpkit.accounting.events import DiscreteGaussianEvent, event_from_json
from dpkit.accounting.pld import discrete_gaussian_pld, event_pld
from dpkit.mechanisms.gaussian import DiscreteGaussian, Gaussian


@pytest.mark.parametrize(("sigma", "shift"), [(5.0, 1), (100.0, 1), (1000.0, 10), (40.0, 3)])
def test_one_release_matches_dp_accounting(sigma: float, shift: int) -> None:
    ours = discrete_gaussian_pld(sigma, shift)
    theirs = reference.from_discrete_gaussian_mechanism(
        sigma, sensitivity=shift, value_discretization_interval=1e-4, use_connect_dots=True
    )
    for delta in (1e-2, 1e-4, 1e-6, 1e-9):
        assert ours.get_epsilon_for_delta(delta) == pytest.approx(
            theirs.get_epsilon_for_delta(delta), rel=1e-9, abs=1e-12
        )
    # composed 100 times: the same up to the convolutions' float noise
    assert ours.self_compose(100).get_epsilon_for_delta(1e-6) == pytest.approx(
        theirs.self_compose(100).get_epsilon_for_delta(1e-6), rel=1e-6
    )


def test_which_discrete_gaussians_get_a_pld() -> None:
    assert DiscreteGaussianEvent(10.0, 1.0).one_axis_shift == 1  # unit lattice shift
    assert DiscreteGaussianEvent(10.0, 1.4).one_axis_shift == 1  # below √2: one axis
    assert DiscreteGaussianEvent(10.0, 2.0).one_axis_shift is None  # may span axes
    assert DiscreteGaussianEvent(10.0, 2.5, scalar=True).one_axis_shift == 3
    assert event_pld(DiscreteGaussianEvent(10.0, 1.0)) is not None
    # the mechanisms record scalar releases
    assert DiscreteGaussian.from_rho(Fraction(1, 200), delta=1e-6).event.scalar is True
    assert DiscreteGaussian.from_rho(Fraction(1, 200), delta=1e-6, size=3).event.scalar is False
    assert Gaussian.from_rho(Fraction(1, 200), delta=1e-6, sensitivity=2.0).event.scalar is True


def test_scalar_round_trips_and_old_json_is_unchanged() -> None:
    plain = DiscreteGaussianEvent(10.0, 1.0)
    assert "scalar" not in plain.to_json()
    assert event_from_json(json.loads(json.dumps(plain.to_json()))) == plain
    scalar = DiscreteGaussianEvent(10.0, 2.0, scalar=True)
    assert scalar.to_json()["scalar"] is True
    assert event_from_json(json.loads(json.dumps(scalar.to_json()))) == scalar


def test_pld_rule_admits_what_dp_accounting_allows_for_discrete_gaussian_counts() -> None:
    """Counts with σ = 100: the PLD rule admits 560 (the continuous Gaussian's count), zcdp 487."""
    mech = DiscreteGaussian.from_rho(Fraction(1, 20000), delta=1e-6)  # σ² = 10,000
    assert mech.sigma == 100.0
    counts = {}
    for rule in ("zcdp", "pld"):
        acc = Accountant(Budget(1, Fraction(1, 10**6)), composition=rule)
        counts[rule] = acc.affordable(mech.cost, mech.event)
    assert counts["zcdp"] == 487
    assert 555 <= counts["pld"] <= 561
