"""Mechanism API: shapes, calibration, error bounds and their coverage, bad input."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import integrate, stats

from dpkit import mechanisms as M
from dpkit.errors import DataError, InvalidParameterError


def test_shapes_and_types():
    assert isinstance(M.laplace(1.0, sensitivity=1, epsilon=1, rng=0), float)
    assert M.laplace(np.zeros((3, 4)), sensitivity=1, epsilon=1, rng=0).shape == (3, 4)
    assert isinstance(M.geometric(5, epsilon=1, rng=0), int)
    assert M.geometric(np.arange(6), epsilon=1, rng=0).dtype == np.int64
    assert M.gaussian(np.zeros(7), sensitivity=1, epsilon=1, delta=1e-6, rng=0).shape == (7,)
    assert M.discrete_gaussian(np.arange(3), epsilon=1, delta=1e-6, rng=0).dtype == np.int64


def test_seed_reproducible_and_default_secure_random():
    a = M.laplace(np.zeros(5), sensitivity=1, epsilon=1, rng=42)
    b = M.laplace(np.zeros(5), sensitivity=1, epsilon=1, rng=42)
    np.testing.assert_array_equal(a, b)
    c = M.laplace(np.zeros(5), sensitivity=1, epsilon=1)
    d = M.laplace(np.zeros(5), sensitivity=1, epsilon=1)
    assert not np.array_equal(c, d)


def test_laplace_outputs_lie_on_the_grid_whatever_the_input():
    """The floating-point attack needs input-dependent output sets; the grid removes them."""
    mech = M.Laplace(epsilon=1, sensitivity=1)
    g = mech.granularity
    for x in (0.0, 0.1, 1 / 3, 12345.678):
        out = np.array([mech.randomise(x, rng=i) for i in range(50)])
        assert np.all(out / g == np.round(out / g))


@given(
    sensitivity=st.floats(1e-3, 1e3),
    epsilon=st.floats(1e-2, 10),
)
def test_laplace_scale_is_at_least_sensitivity_over_epsilon(sensitivity, epsilon):
    mech = M.Laplace(epsilon=epsilon, sensitivity=sensitivity)
    # grid-unit privacy loss per step s/t <= eps / D_g (exact rationals)
    assert mech._s * mech.grid_sensitivity <= epsilon * mech._t * (1 + 1e-12)
    assert sensitivity / epsilon <= mech.scale <= sensitivity / epsilon * (1 + 2**-9)


@given(sensitivity=st.integers(1, 50), epsilon=st.floats(1e-2, 10))
def test_geometric_scale_is_exactly_sensitivity_over_epsilon(sensitivity, epsilon):
    mech = M.Geometric(epsilon=epsilon, sensitivity=sensitivity)
    assert mech.scale == pytest.approx(sensitivity / epsilon, rel=1e-12)
    assert mech.scale >= sensitivity / epsilon * (1 - 1e-15)


@pytest.mark.parametrize(
    "mech",
    [
        M.Laplace(epsilon=0.5, sensitivity=2.0),
        M.Geometric(epsilon=0.7, sensitivity=1),
        M.Gaussian(epsilon=1.0, delta=1e-5, sensitivity=1.0),
        M.DiscreteGaussian(epsilon=0.5, delta=1e-6, sensitivity=1),
    ],
    ids=lambda m: m.name,
)
def test_confidence_interval_coverage(mech):
    """The 90% and 99% intervals cover the truth at (at least) their level."""
    truth = 17
    src = M.SeededRandom(np.random.default_rng(1))
    draws = np.array([mech.randomise(truth, rng=src) for _ in range(4000)], dtype=float)
    for level in (0.9, 0.99):
        h = mech.half_width(level)
        covered = np.mean(np.abs(draws - truth) <= h)
        # exact intervals: coverage >= level, and not wildly conservative
        assert covered >= level - 3 * math.sqrt(level * (1 - level) / draws.size)
        assert covered <= level + 0.02 + (1 - level) * 0.6


def test_release_carries_cost_and_interval():
    rel = M.Laplace(epsilon=0.5, sensitivity=1).release(10.0, level=0.95, rng=0)
    assert rel.epsilon == 0.5 and rel.delta == 0.0 and rel.level == 0.95
    lo, hi = rel.ci
    assert lo < rel.value < hi
    assert hi - lo == pytest.approx(2 * math.log(20) / 0.5, rel=0.01)


def test_gaussian_calibration():
    assert M.analytic_sigma(1, 1, 1e-5) == pytest.approx(3.7306, rel=1e-3)  # Balle & Wang Table
    assert M.classic_sigma(1, 0.5, 1e-5) == pytest.approx(math.sqrt(2 * math.log(1.25e5)) / 0.5)
    with pytest.raises(InvalidParameterError, match="analytic"):
        M.Gaussian(epsilon=1.5, delta=1e-5, sensitivity=1, method="classic")
    g = M.Gaussian(epsilon=1, delta=1e-5, sensitivity=1)
    assert M.analytic_sigma(1, 1, 1e-5) <= g.sigma <= M.analytic_sigma(1, 1, 1e-5) * 1.01
    vec = M.Gaussian(epsilon=1, delta=1e-5, sensitivity=1, size=100)
    from dpkit.accounting.composition import zcdp_to_dp

    assert zcdp_to_dp(vec.rho, 1e-5).epsilon <= 1.0  # the vector guarantee, via zCDP


def test_exponential_matches_closed_form():
    u = np.array([0.0, 1.0, 2.5, 4.0, -np.inf])
    n = 40_000
    picks = M.exponential(np.tile(u, (n, 1)), epsilon=1.0, sensitivity=1.0, rng=3)
    probs = M.exponential_probabilities(u, epsilon=1.0, sensitivity=1.0)
    counts = np.bincount(picks, minlength=5)
    assert counts[4] == 0
    assert stats.chisquare(counts[:4], probs[:4] * n).pvalue > 1e-3


def test_permute_and_flip_matches_closed_form():
    """P(r) = p_r * integral_0^1 prod_{j != r} (1 - p_j t) dt for acceptance probs p."""
    u = np.array([0.0, 1.0, 2.5, 4.0])
    p = np.exp((u - u.max()) / 2.0)
    expected = np.array(
        [
            p[r] * integrate.quad(lambda t, r=r: np.prod(np.delete(1 - p * t, r)), 0, 1)[0]
            for r in range(4)
        ]
    )
    n = 40_000
    picks = M.permute_and_flip(np.tile(u, (n, 1)), epsilon=1.0, sensitivity=1.0, rng=4)
    assert expected.sum() == pytest.approx(1.0)
    assert stats.chisquare(np.bincount(picks, minlength=4), expected * n).pvalue > 1e-3


def test_selection_is_stable_for_huge_utilities():
    u = np.array([3e6, 3e6 + 5, 2e6])
    assert M.exponential(u, epsilon=1, sensitivity=1, rng=0) in (0, 1)
    assert M.permute_and_flip(u, epsilon=1, sensitivity=1, rng=0) in (0, 1)
    assert M.exponential(u, epsilon=1, sensitivity=0.37, rng=0) in (0, 1)


def test_randomized_response_unbiased_with_coverage():
    rr = M.RandomizedResponse(epsilon=1.0, categories=["a", "b", "c"])
    truth = {"a": 0.5, "b": 0.3, "c": 0.2}
    covered = 0
    estimates = []
    for seed in range(40):
        values = np.random.default_rng(seed).choice(
            ["a", "b", "c"], size=5000, p=list(truth.values())
        )
        est = rr.estimate(rr.randomise(values, rng=seed + 100))
        share = float(np.mean(values == "a"))
        estimates.append(est["a"].value - share)
        lo, hi = est["a"].ci
        covered += lo <= share <= hi
    assert abs(np.mean(estimates)) < 3 * np.std(estimates) / math.sqrt(40)
    assert covered >= 34  # 95% intervals, 40 trials


def test_coin_flip_estimator_is_two_p_minus_half():
    responses = np.array([True] * 60 + [False] * 40)
    assert M.coin_flip_estimate(responses).value == pytest.approx(2 * 0.6 - 0.5)


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), "1", None, True])
def test_bad_epsilon(bad):
    with pytest.raises(InvalidParameterError, match="epsilon"):
        M.laplace(1.0, sensitivity=1, epsilon=bad)


@pytest.mark.parametrize("bad", [-0.1, 1.0, 2.0, float("nan")])
def test_bad_delta(bad):
    with pytest.raises(InvalidParameterError, match="delta"):
        M.gaussian(1.0, sensitivity=1, epsilon=1, delta=bad)


def test_gaussian_needs_positive_delta():
    with pytest.raises(InvalidParameterError, match="delta"):
        M.gaussian(1.0, sensitivity=1, epsilon=1, delta=0.0)


@pytest.mark.parametrize("bad", [0, -2.0, float("inf")])
def test_bad_sensitivity(bad):
    with pytest.raises(InvalidParameterError, match="sensitivity"):
        M.laplace(1.0, sensitivity=bad, epsilon=1)


@pytest.mark.parametrize("bad", [[123.25, float("nan")], [float("inf"), 98.5], ["secret", "b"]])
def test_bad_values_get_a_clear_error_without_the_data(bad):
    with pytest.raises(DataError) as info:
        M.laplace(bad, sensitivity=1, epsilon=1)
    message = str(info.value)
    for leaked in ("123.25", "98.5", "secret"):
        assert leaked not in message


def test_selection_bad_input():
    with pytest.raises(InvalidParameterError):
        M.exponential([], epsilon=1, sensitivity=1)
    with pytest.raises(InvalidParameterError):
        M.exponential([-np.inf, -np.inf], epsilon=1, sensitivity=1)
    with pytest.raises(DataError):
        M.permute_and_flip([1.0, np.nan], epsilon=1, sensitivity=1)


def test_geometric_refuses_non_integers():
    with pytest.raises(DataError):
        M.geometric(1.5, epsilon=1)
    with pytest.raises(InvalidParameterError):
        M.geometric(1, epsilon=1, sensitivity=1.5)


def test_bad_rng_and_size():
    with pytest.raises(InvalidParameterError, match="rng"):
        M.laplace(1.0, sensitivity=1, epsilon=1, rng="seed")
    with pytest.raises(InvalidParameterError, match="size"):
        M.Laplace(epsilon=1, sensitivity=1, size=2).randomise(1.0)


def test_randomized_response_rejects_undeclared_category():
    with pytest.raises(DataError, match="declared"):
        M.randomized_response(["x"], epsilon=1, categories=["a", "b"])


def test_randomized_response_input_types_map_to_the_declared_categories():
    """Typed arrays, Series and mixed lists all match categories by value and type."""
    import pandas as pd

    big = 50.0  # keep-probability ~1: the output equals the input
    assert list(
        M.randomized_response(np.array(["a", "b"]), epsilon=big, categories=["a", "b"], rng=0)
    ) == ["a", "b"]
    assert list(M.randomized_response(["a", 1], epsilon=big, categories=["a", 1], rng=0)) == [
        "a",
        1,
    ]
    assert list(
        M.randomized_response(pd.Series([1, 0]), epsilon=big, categories=[0, 1], rng=0)
    ) == [1, 0]
    with pytest.raises(DataError):  # 1 is an int answer, not the boolean category True
        M.randomized_response(np.array([1, 0]), epsilon=big, categories=[True, False])


def test_selection_resolution_never_depends_on_whether_utilities_happen_to_be_integers() -> None:
    """Issue 11 class 7: the grid was the unit grid exactly when the data made utilities integral."""
    from dpkit.mechanisms.selection import _prepare

    integral = [3.0, 7.0, 5.0]
    fractional = [3.0, 7.5, 5.0]  # a neighbour: one utility moved by half the sensitivity
    _, den_a, _, _ = _prepare(integral, 1.0, 1.0, False, False)
    _, den_b, _, _ = _prepare(fractional, 1.0, 1.0, False, False)
    assert np.array_equal(den_a, den_b)
    # Declared integral (counts): the unit grid, public, and the same for every dataset.
    _, den_c, _, _ = _prepare(integral, 1.0, 1.0, False, True)
    _, den_d, _, _ = _prepare([3.0, 8.0, 5.0], 1.0, 1.0, False, True)
    assert np.array_equal(den_c, den_d) and den_c[0, 0] < den_a[0, 0]
    with pytest.raises(InvalidParameterError, match="integer sensitivity"):
        _prepare(integral, 1.0, 0.5, False, True)


@pytest.mark.parametrize(
    ("sensitivity", "epsilon", "delta"),
    [
        (0.0, 1.0, 1e-6),
        (-1.0, 1.0, 1e-6),
        (math.nan, 1.0, 1e-6),
        (1.0, 1.0, 0.0),
        (1.0, 1.0, math.nan),
        (1.0, math.inf, 1e-6),
        (math.inf, 1.0, 1e-6),
    ],
)
def test_analytic_sigma_refuses_invalid_input_instead_of_looping(
    sensitivity, epsilon, delta
) -> None:
    """Issue 11 class 7: sensitivity 0 doubled forever (0 * 2 == 0)."""
    from dpkit.mechanisms.gaussian import analytic_sigma

    with pytest.raises(InvalidParameterError):
        analytic_sigma(sensitivity, epsilon, delta)
    assert analytic_sigma(1.0, 1.0, 5e-324) > analytic_sigma(1.0, 1.0, 1e-6)


def test_a_seeded_source_warns_that_it_is_not_private() -> None:
    from dpkit.errors import PrivacyWarning
    from dpkit.tables import Session

    with pytest.warns(PrivacyWarning, match="seeded random source"):
        M.laplace(1.0, sensitivity=1, epsilon=1, rng=3)
    with pytest.warns(PrivacyWarning, match="seeded random source"):
        M.geometric(1, sensitivity=1, epsilon=1, rng=np.random.default_rng(3))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyWarning)
        M.laplace(1.0, sensitivity=1, epsilon=1)  # secure randomness: no warning
    import pandas as pd

    with pytest.warns(PrivacyWarning, match="seeded random source"):
        Session.from_pandas(
            pd.DataFrame({"x": [1.0]}),
            types={"x": "DOUBLE"},
            epsilon=1.0,
            rng=5,
        )


@pytest.mark.parametrize(
    ("release", "cost"),
    [
        (lambda acc: M.laplace(3.0, sensitivity=1, epsilon=0.5, accountant=acc), (0.5, 0)),
        (lambda acc: M.geometric(3, epsilon=0.25, accountant=acc), (0.25, 0)),
        (
            lambda acc: M.gaussian(3.0, sensitivity=1, epsilon=0.5, delta=1e-6, accountant=acc),
            (0.5, 1e-6),
        ),
        (
            lambda acc: M.discrete_gaussian(3, epsilon=0.5, delta=1e-6, accountant=acc),
            (0.5, 1e-6),
        ),
        (
            lambda acc: M.exponential([1.0, 2.0], epsilon=0.3, sensitivity=1, accountant=acc),
            (0.3, 0),
        ),
        (
            lambda acc: M.permute_and_flip([1.0, 2.0], epsilon=0.3, sensitivity=1, accountant=acc),
            (0.3, 0),
        ),
        (lambda acc: M.randomized_response([True, False], epsilon=0.7, accountant=acc), (0.7, 0)),
        (lambda acc: M.Laplace(epsilon=0.5, sensitivity=1).release(2.0, accountant=acc), (0.5, 0)),
    ],
)
def test_every_mechanism_charges_the_one_accountant(release, cost) -> None:
    """Issue 11: every releasing entry point takes accountant= and charges through one module."""
    from dpkit.accounting import Accountant, Budget
    from dpkit.errors import BudgetExceededError

    acc = Accountant(Budget(1.0, 1e-5))
    release(acc)
    assert acc.spent == Budget(*cost) and len(acc.history) == 1
    tiny = Accountant(Budget(0.1))
    with pytest.raises(BudgetExceededError):
        release(tiny)
    assert tiny.spent == Budget(0)
