"""Privacy events: JSON round trip, dp_accounting equivalents, budgets equal to today's charges."""

from __future__ import annotations

import json
import math
from fractions import Fraction

import dp_accounting
import pytest
from dp_accounting import dp_event
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant
from hypothesis import given, settings
from hypothesis import strategies as st

from dpkit.accounting import Budget
from dpkit.accounting.events import (
    MAX_DEPTH,
    ComposedEvent,
    DiscreteGaussianEvent,
    EpsilonDeltaEvent,
    GaussianEvent,
    GeometricEvent,
    LaplaceEvent,
    PrivacyEvent,
    RepeatedEvent,
    ZCDPEvent,
    as_event,
    event_from_json,
)
from dpkit.errors import InvalidParameterError
from dpkit.mechanisms.gaussian import DiscreteGaussian, Gaussian
from dpkit.mechanisms.laplace import Geometric, Laplace

# --- strategies ------------------------------------------------------------------------
positive = st.floats(min_value=1e-3, max_value=1e6, allow_nan=False, allow_infinity=False)
whole = st.integers(min_value=1, max_value=10**6).map(float)
epsilon = st.fractions(min_value=Fraction(1, 10**6), max_value=50, max_denominator=10**9)
delta = st.fractions(min_value=Fraction(1, 10**12), max_value=Fraction(1, 10**4))


@st.composite
def laplace_events(draw: st.DrawFn) -> LaplaceEvent:
    scale, sens = draw(positive), draw(positive)
    proven = Fraction(repr(sens)) / Fraction(repr(scale))
    extra = draw(st.none() | st.fractions(min_value=0, max_value=5, max_denominator=1000))
    return LaplaceEvent(scale, sens, epsilon=None if extra is None else proven + extra)


@st.composite
def geometric_events(draw: st.DrawFn) -> GeometricEvent:
    scale, sens = draw(positive), draw(whole)
    charged = draw(st.booleans())
    proven = Fraction(repr(sens)) / Fraction(repr(scale))
    return GeometricEvent(scale, sens, epsilon=proven if charged else None)


@st.composite
def gaussian_events(draw: st.DrawFn, cls: type = GaussianEvent) -> PrivacyEvent:
    sigma, sens = draw(positive), draw(positive)
    if draw(st.booleans()):
        return cls(sigma, sens)
    rho = draw(st.none() | st.just(Fraction(repr(sens)) ** 2 / (2 * Fraction(repr(sigma)) ** 2)))
    return cls(sigma, sens, epsilon=draw(epsilon), delta=draw(delta), rho=rho)


leaves = st.one_of(
    laplace_events(),
    geometric_events(),
    gaussian_events(),
    gaussian_events(DiscreteGaussianEvent),
    st.builds(ZCDPEvent, epsilon, st.none() | epsilon, st.none()),
    st.builds(EpsilonDeltaEvent, epsilon, st.just(Fraction(0)) | delta),
)
events = st.recursive(
    leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4).map(lambda xs: ComposedEvent(tuple(xs))),
        st.builds(RepeatedEvent, inner, st.integers(min_value=0, max_value=1000)),
    ),
    max_leaves=8,
)
budgets = st.builds(
    lambda e, d, r, pure: Budget(e, 0 if pure else d, rho=r),
    epsilon,
    delta,
    st.none() | epsilon,
    st.booleans(),
)


# --- JSON -------------------------------------------------------------------------------
@settings(max_examples=300, deadline=None)
@given(events)
def test_json_round_trip(event: PrivacyEvent) -> None:
    data = event.to_json()
    assert event_from_json(data) == event
    # and through the text the ledger stores
    assert event_from_json(json.loads(json.dumps(data))) == event


def test_json_form_is_plain_and_exact() -> None:
    assert LaplaceEvent(20.0, 2.0, epsilon=Fraction(1, 10)).to_json() == {
        "type": "laplace",
        "scale": 20.0,
        "sensitivity": 2.0,
        "epsilon": "1/10",
    }
    assert RepeatedEvent(EpsilonDeltaEvent(Fraction(1, 3)), 2).to_json() == {
        "type": "repeated",
        "event": {"type": "epsilon_delta", "epsilon": "1/3", "delta": "0"},
        "count": 2,
    }


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {"type": "hologram", "epsilon": "1"},
            "unknown privacy event type 'hologram'; known types",
        ),
        ({"epsilon": "1"}, "unknown privacy event type"),
        ([1, 2], "must be a JSON object, got list"),
        ({"type": "epsilon_delta", "epsilon": "1"}, "has the fields ['delta', 'epsilon', 'type']"),
        ({"type": "epsilon_delta", "epsilon": "1", "delta": "0", "x": 1}, "has the fields"),
        ({"type": "epsilon_delta", "epsilon": "-1", "delta": "0"}, "epsilon must be >= 0"),
        ({"type": "epsilon_delta", "epsilon": "1", "delta": "1"}, "delta must be in [0, 1)"),
        ({"type": "epsilon_delta", "epsilon": "one", "delta": "0"}, "epsilon is not a number"),
        ({"type": "epsilon_delta", "epsilon": "1/0", "delta": "0"}, "epsilon is not a number"),
        ({"type": "epsilon_delta", "epsilon": True, "delta": "0"}, "epsilon must be a number"),
        (
            {"type": "laplace", "scale": float("nan"), "sensitivity": 1.0, "epsilon": None},
            "scale must be finite and > 0",
        ),
        (
            {"type": "laplace", "scale": 1.0, "sensitivity": "1", "epsilon": None},
            "sensitivity must be a number",
        ),
        (
            {"type": "geometric", "scale": 1.0, "sensitivity": 1.5, "epsilon": None},
            "sensitivity must be a whole number",
        ),
        ({"type": "composed", "events": {"a": 1}}, "'events' must be a list"),
        (
            {
                "type": "repeated",
                "event": {"type": "zcdp", "rho": "1", "epsilon": None, "delta": None},
                "count": -1,
            },
            "count must be",
        ),
    ],
)
def test_event_from_json_refuses_what_it_does_not_know(data: object, message: str) -> None:
    with pytest.raises(InvalidParameterError) as err:
        event_from_json(data)
    assert message in str(err.value)


def test_nesting_is_bounded() -> None:
    data: dict[str, object] = {"type": "epsilon_delta", "epsilon": "1", "delta": "0"}
    for _ in range(MAX_DEPTH):
        data = {"type": "repeated", "event": data, "count": 1}
    assert event_from_json(data).budget() == Budget(1)
    with pytest.raises(InvalidParameterError, match="nest at most"):
        event_from_json({"type": "repeated", "event": data, "count": 1})


# --- budget() ---------------------------------------------------------------------------
def test_a_charge_below_what_the_noise_proves_is_refused() -> None:
    with pytest.raises(InvalidParameterError, match=r"charged epsilon .* is below"):
        LaplaceEvent(2.0, 1.0, epsilon=Fraction(1, 4))
    with pytest.raises(InvalidParameterError, match=r"charged rho .* is below"):
        GaussianEvent(1.0, 1.0, epsilon=Fraction(1), delta=Fraction(1, 10**6), rho=Fraction(1, 4))
    assert LaplaceEvent(2.0, 1.0).budget() == Budget(0.5)
    assert LaplaceEvent(2.0, 1.0, epsilon=Fraction(1)).budget() == Budget(1)


def test_a_gaussian_without_its_charge_has_no_budget() -> None:
    with pytest.raises(InvalidParameterError, match="no \\(epsilon, delta\\) charge recorded"):
        GaussianEvent(3.0, 1.0).budget()
    with pytest.raises(InvalidParameterError, match="give both epsilon and delta"):
        DiscreteGaussianEvent(3.0, 1.0, epsilon=Fraction(1))
    with pytest.raises(InvalidParameterError, match="no \\(epsilon, delta\\) charge recorded"):
        ZCDPEvent(Fraction(1, 2)).budget()
    event = GaussianEvent(2.0, 1.0, epsilon=Fraction(1), delta=Fraction(1, 10**6))
    assert event.budget() == Budget(1, Fraction(1, 10**6), rho=Fraction(1, 8))


@settings(max_examples=200, deadline=None)
@given(budgets)
def test_as_event_of_a_budget_is_charged_as_that_budget(budget: Budget) -> None:
    event = as_event(budget)
    assert event.budget() == budget
    assert event.budget().rho_declared == budget.rho_declared
    assert as_event(event) is event


def test_composition_budgets_are_basic_composition() -> None:
    a, b = LaplaceEvent(10.0, 1.0), EpsilonDeltaEvent(Fraction(1, 5), Fraction(1, 10**6))
    assert ComposedEvent((a, b)).budget() == Budget(0.3, 1e-6)
    assert RepeatedEvent(b, 3).budget() == Budget(0.6, 3e-6)
    assert ComposedEvent(()).budget() == Budget.zero()
    with pytest.raises(InvalidParameterError, match="must be a dpkit privacy event"):
        ComposedEvent((a, Budget(1)))  # type: ignore[arg-type]


@settings(max_examples=40, deadline=None)
@given(
    st.sampled_from([0.01, 0.1, 0.3, 1.0, 2.5, 7.0]),
    st.sampled_from([1e-9, 1e-6, 1e-3]),
    st.sampled_from([0.5, 1.0, 3.0, 17.25]),
    st.integers(min_value=1, max_value=20),
)
def test_mechanism_events_are_charged_what_the_mechanism_is_charged(
    eps: float, dlt: float, sens: float, size: int
) -> None:
    mechanisms = [
        Laplace(epsilon=eps, sensitivity=sens, size=size),
        Geometric(epsilon=eps, sensitivity=math.ceil(sens), size=size),
        Gaussian(epsilon=eps, delta=dlt, sensitivity=sens, size=size),
        DiscreteGaussian(epsilon=eps, delta=dlt, sensitivity=math.ceil(sens), size=size),
    ]
    for mechanism in mechanisms:
        event = mechanism.event
        assert event.budget() == mechanism.cost, type(mechanism).__name__
        assert event_from_json(event.to_json()) == event


def test_mechanism_events_describe_the_noise_actually_added() -> None:
    geo = Geometric(epsilon=0.5, sensitivity=2)
    assert geo.event == GeometricEvent(4.0, 2.0, epsilon=Fraction(1, 2))
    lap = Laplace(epsilon=1.0, sensitivity=1.0)
    ev = lap.event
    assert isinstance(ev, GeometricEvent)  # discrete Laplace in grid steps
    assert ev.scale * lap.granularity == pytest.approx(lap.scale)
    assert ev.sensitivity == lap.grid_sensitivity
    dg = DiscreteGaussian(epsilon=1.0, delta=1e-6, sensitivity=1)
    assert dg.event == DiscreteGaussianEvent(
        dg.sigma,
        1.0,
        epsilon=Fraction(1),
        delta=Fraction(1, 10**6),
        rho=Fraction(repr(dg.rho)),
        scalar=True,  # one value: its neighbours differ along one axis (a PLD of its own)
    )


# --- dp_accounting ----------------------------------------------------------------------
def test_dp_accounting_equivalents() -> None:
    assert LaplaceEvent(4.0, 2.0).dp_accounting() == dp_event.LaplaceDpEvent(2.0)
    assert GeometricEvent(4.0, 2.0).dp_accounting() == dp_event.DiscreteLaplaceDpEvent(0.25, 2)
    assert GaussianEvent(3.0, 1.5).dp_accounting() == dp_event.GaussianDpEvent(2.0)
    assert DiscreteGaussianEvent(2.0, 1.0).dp_accounting() == dp_event.ZCDpEvent(0.125)
    assert ZCDPEvent(Fraction(1, 8)).dp_accounting() == dp_event.ZCDpEvent(0.125)
    assert EpsilonDeltaEvent(Fraction(0)).dp_accounting() == dp_event.NoOpDpEvent()
    lap = LaplaceEvent(1.0, 1.0)
    assert RepeatedEvent(lap, 3).dp_accounting() == dp_event.SelfComposedDpEvent(
        dp_event.LaplaceDpEvent(1.0), 3
    )
    assert ComposedEvent((lap, lap)).dp_accounting() == dp_event.ComposedDpEvent(
        [dp_event.LaplaceDpEvent(1.0)] * 2
    )
    assert isinstance(lap.dp_accounting(), dp_accounting.DpEvent)


@pytest.mark.parametrize("eps", [0.1, 1.0, 3.0])
def test_laplace_events_compose_in_dp_accounting_to_their_epsilon(eps: float) -> None:
    for event in (LaplaceEvent(1.0 / eps, 1.0), GeometricEvent(2.0 / eps, 2.0)):
        accountant = pld_privacy_accountant.PLDAccountant()
        accountant.compose(event.dp_accounting())
        assert accountant.get_epsilon(1e-12) == pytest.approx(eps, rel=1e-3)


def test_an_epsilon_delta_event_is_not_passed_off_as_a_mechanism_dp_accounting_knows() -> None:
    # dp_accounting's only generic worst case (randomized response) is for replace-one.
    for event in (
        EpsilonDeltaEvent(Fraction(1)),
        EpsilonDeltaEvent(Fraction(1), Fraction(1, 10**6)),
    ):
        assert event.dp_accounting() == dp_event.UnsupportedDpEvent()
        assert not pld_privacy_accountant.PLDAccountant().supports(event.dp_accounting())


def test_gaussian_events_compose_in_rdp_no_looser_than_their_charge() -> None:
    mechanism = DiscreteGaussian(epsilon=1.0, delta=1e-6, sensitivity=1)
    accountant = rdp_privacy_accountant.RdpAccountant()
    accountant.compose(mechanism.event.dp_accounting())
    # its zCDP rho converts back to at most about the charged epsilon at the charged delta
    assert accountant.get_epsilon(1e-6) <= 1.0 * 1.05
