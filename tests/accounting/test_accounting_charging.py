"""The one privacy-cost contract: resolve the payer, charge before the release, one error after."""

from __future__ import annotations

import pytest

from dpkit.accounting import Accountant, Budget, as_accountant, charge_and_run
from dpkit.errors import BudgetExceededError, InvalidParameterError, ReleaseFailedError


def test_as_accountant_accepts_the_documented_payers(tmp_path):
    acc = Accountant(Budget(1.0))
    assert as_accountant(None) is None
    assert as_accountant(acc) is acc

    class HasAccountant:
        accountant = acc

    assert as_accountant(HasAccountant()) is acc
    path = tmp_path / "l.ledger"
    Accountant(Budget(2.0), ledger=path).close()
    opened = as_accountant(path)
    assert opened is not None and opened.budget == Budget(2.0)
    opened.close()
    with pytest.raises(InvalidParameterError, match="accountant must be"):
        as_accountant(3.0)


def test_the_charge_comes_before_the_release_and_a_refusal_runs_nothing():
    acc = Accountant(Budget(1.0))
    seen = []
    out = charge_and_run(acc, Budget(0.6), "first", lambda: seen.append(acc.spent) or "done")
    assert out == "done" and seen == [Budget(0.6)]
    with pytest.raises(BudgetExceededError):
        charge_and_run(acc, Budget(0.6), "second", lambda: seen.append("never"))
    assert seen == [Budget(0.6)] and acc.spent == Budget(0.6)


def _raise(error: BaseException):
    def run():
        raise error

    return run


@pytest.mark.parametrize(
    "failure", [KeyError("secret-row-value"), MemoryError(), ValueError("x=42")]
)
def test_a_failure_after_the_charge_is_one_generic_error_with_no_cause(failure):
    acc = Accountant(Budget(1.0))
    with pytest.raises(ReleaseFailedError) as info:
        charge_and_run(acc, Budget(0.5), "q", _raise(failure))
    assert acc.spent == Budget(0.5)  # the charge stands
    err = info.value
    assert err.__cause__ is None and err.__context__ is None
    assert "secret" not in str(err) and "42" not in str(err)
    for other in (KeyError("other"), RuntimeError("y")):
        with pytest.raises(ReleaseFailedError) as again:
            charge_and_run(Accountant(Budget(1.0)), Budget(0.1), "q", _raise(other))
        assert str(again.value) == str(err)
    with pytest.raises(KeyError):  # nothing charged: the caller sees its own error
        charge_and_run(None, Budget(0.1), "q", _raise(KeyError("x")))
