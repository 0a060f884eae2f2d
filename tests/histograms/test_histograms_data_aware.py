"""Hb, AHP, DAWA and the workload-aware default: contracts, transcripts, audits, errors."""

from __future__ import annotations

import importlib
import warnings

import numpy as np
import pytest

from dpkit import histograms
from dpkit.accounting import Accountant, Budget
from dpkit.errors import InvalidParameterError
from dpkit.histograms._workload import workload_ranges
from dpkit.histograms.hb import hb_choice

# The modules (the package exports functions of the same names).
dawa_module = importlib.import_module("dpkit.histograms.dawa")
ahp_module = importlib.import_module("dpkit.histograms.ahp")

pytestmark = pytest.mark.filterwarnings("ignore::dpkit.PrivacyWarning")

PUBLISHERS = {
    "hb": lambda x, e, **kw: histograms.hb(x, e, **kw),
    "ahp": lambda x, e, **kw: histograms.ahp(x, e, **kw),
    "dawa": lambda x, e, **kw: histograms.dawa(x, e, **kw),
    "auto": lambda x, e, **kw: histograms.auto(x, e, max_records=500, **kw),
}


def _data(n: int = 64, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = np.zeros(n)
    x[n // 4 : n // 2] = rng.poisson(20, n // 4)
    x[3 * n // 4 :] = rng.poisson(2, n - 3 * n // 4)
    return x


@pytest.mark.parametrize("name", sorted(PUBLISHERS))
def test_range_answers_are_sums_of_the_estimates(name: str) -> None:
    x = _data()
    h = PUBLISHERS[name](x, 0.5, rng=3)
    lo, hi = workload_ranges(x.size, "ranges", 200)
    prefix = np.concatenate(([0.0], np.cumsum(h.estimates)))
    assert np.allclose(h.answer(lo, hi), prefix[hi + 1] - prefix[lo])
    assert h.estimates.shape == x.shape and h.epsilon == 0.5
    assert np.all(h.answer_error(lo, hi) > 0)


@pytest.mark.parametrize("name", sorted(PUBLISHERS))
def test_transcripts_of_neighbours_differ_only_in_noisy_values(name: str) -> None:
    # Same call, same seed, a neighbour (one count +1, including a new non-empty bin
    # and a huge count): the same keys, epsilon, charge and ledger rows.
    x = _data()
    neighbours = [x.copy() for _ in range(3)]
    neighbours[0][5] += 1  # an empty bin becomes non-empty
    neighbours[1][20] += 1
    big = x.copy()
    big[40] = 1e9
    neighbours[2] = big.copy()
    neighbours[2][40] += 1
    pairs = [(x, neighbours[0]), (x, neighbours[1]), (big, neighbours[2])]
    for a, b in pairs:
        seen = []
        for counts in (a, b):
            acc = Accountant(Budget(2.0))
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                h = PUBLISHERS[name](counts, 0.5, rng=11, accountant=acc)
            seen.append(
                (
                    h.method,
                    h.epsilon,
                    sorted(h.details),
                    acc.spent,
                    [(e.label, e.cost, e.scopes) for e in acc.history],
                    [type(w.message).__name__ for w in caught],
                    h.estimates.shape,
                )
            )
        assert seen[0] == seen[1]


def test_public_choices_do_not_look_at_the_counts() -> None:
    # Hb's branching and auto's method are functions of n, epsilon, scale, workload.
    assert hb_choice(16, 1.0, "ranges") is None  # small domains: flat
    assert hb_choice(4096, 1.0, "ranges") is not None
    assert hb_choice(4096, 1.0, "units") is None  # single bins: flat is best
    assert histograms.choose_method(1024, 0.1, 1000, "ranges") == "dawa"
    assert histograms.choose_method(1024, 1.0, 10**7, "ranges") == "matrix_mechanism"
    assert histograms.choose_method(1024, 1.0, 10**7, "units") == "hb"
    assert histograms.choose_method(8192, 1.0, 10**8, "prefixes") == "hb"  # Hb wins there
    assert histograms.choose_method(1024, 1.0, 2**33, "ranges") == "hb"  # beyond exact sums
    assert histograms.choose_method(1024, 1.0, None, "ranges") == "dawa"
    a = histograms.hb(np.zeros(256), 1.0, rng=1)
    b = histograms.hb(np.full(256, 1e6), 1.0, rng=1)
    assert a.details["hb_branching"] == b.details["hb_branching"]
    with pytest.raises(InvalidParameterError, match="workload"):
        histograms.choose_method(10, 1.0, 10, "everything")


def test_invalid_parameters_are_refused_before_the_charge() -> None:
    acc = Accountant(Budget(1.0))
    with pytest.raises(InvalidParameterError):
        histograms.dawa(np.ones(8), 0.5, partition_share=1.5, accountant=acc)
    with pytest.raises(InvalidParameterError):
        histograms.ahp(np.ones(8), 0.5, eta=-1, accountant=acc)
    with pytest.raises(InvalidParameterError):
        histograms.hb(np.ones(8), 0.5, workload="all", accountant=acc)
    with pytest.raises(InvalidParameterError):
        histograms.auto(np.ones(8), 0.5, max_records=-3, accountant=acc)
    assert acc.spent == Budget(0.0)


def test_dawa_partition_follows_the_data_at_high_epsilon() -> None:
    # Flat pieces: at a large epsilon the buckets do not straddle the jumps.
    x = np.concatenate([np.zeros(32), np.full(32, 50.0)])
    h = histograms.dawa(x, 50.0, rng=2)
    assert 32 in set(h.bins.tolist())
    assert h.n_bins < 16
    assert np.abs(h.estimates - x).max() < 2.0


def test_ahp_groups_equal_counts_wherever_they_are() -> None:
    x = np.tile([0.0, 0.0, 40.0, 0.0], 16)
    h = histograms.ahp(x, 20.0, rng=4)
    labels = h.details["labels"]
    assert len(set(labels[x == 40.0].tolist())) == 1
    assert len(set(labels[x == 0.0].tolist())) == 1
    assert np.abs(h.estimates - x).max() < 1.0


@pytest.mark.parametrize("name", ["dawa", "ahp", "hb"])
def test_answer_error_matches_simulation_given_the_structure(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The structure held fixed (it is what the errors condition on): the stated
    # noise sd of range answers, partial buckets included, matches 400 repeats.
    monkeypatch.setattr(dawa_module, "private_partition", lambda *a: np.array([0, 5, 13, 14, 32]))
    monkeypatch.setattr(ahp_module, "cluster_sorted", lambda v, _: np.arange(v.size) % 3)
    x = np.full(32, 10.0)
    lo, hi = np.array([0, 3, 10, 6, 2]), np.array([31, 17, 10, 12, 13])
    answers, stated = [], []
    for seed in range(400):
        h = PUBLISHERS[name](x, 2.0, rng=seed, **({} if name == "ahp" else {"workload": "ranges"}))
        answers.append(h.answer(lo, hi))
        stated.append(h.answer_error(lo, hi))
    empirical = np.std(np.array(answers), axis=0)
    assert empirical == pytest.approx(np.mean(stated, axis=0), rel=0.15)


# DAWA's stage 1 (the released partition) is audited in test_histograms_dawa_partition.py.


# -- end-to-end audits of Hb and AHP: the released estimate of the changed bin --------------


def _released(method: str, counts: np.ndarray, epsilon: float, runs: int, seed: int) -> np.ndarray:
    """The published estimate of bin 2 over many releases (fresh noise each time)."""
    publish = {
        "hb": lambda x, r: histograms.hb(x, epsilon, workload="ranges", rng=r),
        "ahp": lambda x, r: histograms.ahp(x, epsilon, rng=r),
    }[method]
    rng = np.random.default_rng(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return np.array([publish(counts, rng).estimates[2] for _ in range(runs)])


@pytest.mark.parametrize("method", ["hb", "ahp"])
def test_hb_and_ahp_audits_pass_and_refute_a_broken_variant(method: str) -> None:
    """Neighbouring unit counts (bin 2 differs by one row); the claim is epsilon = 1.

    The broken variant releases with epsilon = 30 while claiming 1: the audit's
    lower bound on the privacy loss must then exceed the claim.
    """
    from dpkit.audit import audit_samples

    x = np.array([3.0, 0.0, 5.0, 1.0, 0.0, 0.0, 2.0, 4.0] * 4)
    x_prime = x.copy()
    x_prime[2] += 1.0
    runs = 3000
    honest = audit_samples(
        _released(method, x, 1.0, runs, 1), _released(method, x_prime, 1.0, runs, 2), epsilon=1.0
    )
    assert honest.passed, honest
    broken = audit_samples(
        _released(method, x, 30.0, runs, 3), _released(method, x_prime, 30.0, runs, 4), epsilon=1.0
    )
    assert not broken.passed and broken.epsilon_lower_bound > 1.0, broken
