"""The local mechanism registry (dpkit.local.methods): one list, one spelling, one lookup.

* every registered oracle and mean mechanism is named by its class's ``name``, states its
  ε-LDP argument, runs on a small input and writes that name into its release;
* the public choice rules (``best_oracle``, ``best_mean_mechanism``, a survey's number
  questions) only ever choose registered mechanisms;
* a wrong name is refused with the list of names (and the right spelling when only the case
  is wrong).
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
import pytest

import dpkit.local as L
from dpkit.errors import InvalidParameterError
from dpkit.local.methods import MEAN_MECHANISMS, ORACLES, mean_mechanism, oracle


def test_one_spelling_in_display_order() -> None:
    assert list(ORACLES) == ["grr", "olh", "oue", "sue", "hadamard"]
    assert list(MEAN_MECHANISMS) == ["duchi", "piecewise"]
    for table in (ORACLES, MEAN_MECHANISMS):
        for name, cls in table.items():
            assert cls.name == name and name.isidentifier() and name == name.lower()
    assert L.oracle is oracle and L.ORACLES is ORACLES and L.mean_mechanism is mean_mechanism
    with pytest.raises(TypeError):
        ORACLES["mine"] = L.HadamardResponse  # type: ignore[index]  # read-only


@pytest.mark.parametrize("cls", [*ORACLES.values(), *MEAN_MECHANISMS.values()], ids=str)
def test_every_mechanism_states_its_ldp_argument(cls: Any) -> None:
    doc = inspect.getdoc(cls) or ""
    assert "ε-LDP" in doc, cls.name
    assert "e^ε" in doc or "e^{ε/2}" in doc, cls.name  # the likelihood-ratio bound


@pytest.mark.parametrize("name", list(ORACLES))
def test_every_oracle_runs_and_names_its_release(name: str) -> None:
    o = oracle(name)(epsilon=1.0, domain=["a", "b", "c", "d"])
    reports = o.perturb(np.array(["a", "b", "a", "d"] * 25), rng=1)
    estimate = o.estimate(reports)
    assert estimate.oracle == name and np.shape(estimate.counts) == (4,)
    assert np.all(np.isfinite(estimate.counts)) and estimate.n == 100


@pytest.mark.parametrize("name", list(MEAN_MECHANISMS))
def test_every_mean_mechanism_runs_and_names_its_release(name: str) -> None:
    m = mean_mechanism(name)(epsilon=1.0, bounds=(0.0, 10.0))
    estimate = m.estimate(m.perturb(np.linspace(0, 10, 200), rng=1))
    assert estimate.mechanism == name and np.isfinite(estimate.mean)


def test_choice_rules_choose_registered_mechanisms() -> None:
    chosen = {
        L.best_oracle(epsilon=eps, domain=d).name
        for eps in (0.1, 1.0, 4.0)
        for d in (2, 16, 4096, 1 << 30)
    }
    assert chosen <= set(ORACLES) and len(chosen) >= 2
    means = {L.best_mean_mechanism(eps) for eps in (0.1, 0.5, 1.0, 2.0, 5.0)}
    assert means == set(MEAN_MECHANISMS)
    for eps in (0.5, 3.0):
        survey = L.Survey([L.number("age", epsilon=eps, bounds=(0, 100))])
        expected = MEAN_MECHANISMS[L.best_mean_mechanism(eps)]
        assert type(survey.mechanisms["age"]) is expected


def test_wrong_names_are_refused_with_the_names() -> None:
    with pytest.raises(InvalidParameterError, match=r"write 'grr'.*'grr', 'olh'"):
        oracle("GRR")
    with pytest.raises(InvalidParameterError, match=r"choose one of 'duchi', 'piecewise'"):
        mean_mechanism("laplace")
    for bad in ("", "oracle", None, 1):
        with pytest.raises(InvalidParameterError, match="unknown frequency oracle"):
            oracle(bad)  # type: ignore[arg-type]
