"""The budget-over-time chart: ``dpkit.accounting.plot_budget`` and ``dpkit budget --plot``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from matplotlib.figure import Figure
from typer.testing import CliRunner

import dpkit
from dpkit.accounting import Accountant, Budget, plot_budget
from dpkit.cli import app
from dpkit.errors import BudgetExceededError, InvalidParameterError

runner = CliRunner()
PNG = b"\x89PNG\r\n\x1a\n"


def _spent_line(fig: Figure) -> np.ndarray:
    (line,) = [ln for ln in fig.axes[0].get_lines() if ln.get_label() == "ε spent"]
    return np.asarray(line.get_ydata(), dtype=float)


def test_the_chart_shows_the_cumulative_spend_the_budget_and_a_refusal() -> None:
    accountant = Accountant(Budget(1.0))
    for label in ("count", "mean age", "median age"):
        accountant.charge(0.3, label)
    with pytest.raises(BudgetExceededError):
        accountant.charge(0.5, "too much")
    fig = plot_budget(accountant)
    ax = fig.axes[0]
    # 0, then each charge, then the last total held to the right edge
    assert _spent_line(fig) == pytest.approx([0, 0.3, 0.6, 0.9, 0.9])
    (budget,) = [ln for ln in ax.get_lines() if str(ln.get_label()).startswith("ε budget")]
    assert set(budget.get_ydata()) == {1.0}
    (refused,) = [ln for ln in ax.get_lines() if str(ln.get_label()).startswith("refused")]
    assert refused.get_xdata()[0] == pytest.approx(3.5)  # after the third charge
    assert refused.get_ydata()[0] == pytest.approx(1.4)  # where it would have taken the total
    assert [t.get_text() for t in ax.get_xticklabels()] == ["count", "mean age", "median age"]
    assert len(fig.axes) == 1  # no δ anywhere: no δ axis


def test_the_accountant_remembers_its_refusals_but_charges_nothing() -> None:
    accountant = Accountant(Budget(1.0))
    accountant.charge(0.75, "first")
    with pytest.raises(BudgetExceededError):
        accountant.charge(0.5, "second")
    (refusal,) = accountant.refusals
    assert (refusal.label, refusal.cost, refusal.after) == ("second", Budget(0.5), 1)
    assert accountant.spent == Budget(0.75) and len(accountant.history) == 1


def test_the_refusals_kept_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    # a long-lived accountant (the service's) must not grow with refused requests
    monkeypatch.setattr("dpkit.accounting.accountant.MAX_REFUSALS", 3)
    accountant = Accountant(Budget(1.0))
    for i in range(5):
        with pytest.raises(BudgetExceededError):
            accountant.charge(2.0, f"refused {i}")
    assert [r.label for r in accountant.refusals] == ["refused 2", "refused 3", "refused 4"]


def test_delta_gets_its_own_axis() -> None:
    accountant = Accountant(Budget(1.0, 1e-6))
    accountant.charge(Budget(0.2, 1e-7), "gaussian sum")
    fig = plot_budget(accountant)
    assert len(fig.axes) == 2
    (delta,) = [ln for ln in fig.axes[1].get_lines() if ln.get_label() == "δ spent"]
    assert delta.get_ydata() == pytest.approx([0, 1e-7, 1e-7])


def test_parallel_parts_count_once_as_the_accountant_does() -> None:
    accountant = Accountant(Budget(1.0))
    with accountant.parallel("by district") as scope:
        for key in ("a", "b", "c"):
            scope.part(key).charge(0.2, f"mean in {key}")
    accountant.charge(0.1, "count")
    totals = [float(spent.epsilon) for _, spent in accountant.spent_over_time()]
    assert totals == pytest.approx([0.2, 0.2, 0.2, 0.3])
    assert _spent_line(plot_budget(accountant))[-1] == pytest.approx(
        float(accountant.spent.epsilon)
    )


def test_a_ledger_path_and_an_axes_are_accepted(tmp_path: Path) -> None:
    ledger = tmp_path / "study.ledger"
    with Accountant(Budget(2.0), ledger) as accountant:
        accountant.charge(0.5, "mean age")
    target = Figure().add_subplot()
    fig = plot_budget(ledger, ax=target)
    assert fig is target.get_figure()
    assert _spent_line(fig) == pytest.approx([0, 0.5, 0.5])
    assert dpkit.accounting.plot_budget is plot_budget


def test_nothing_to_plot_and_wrong_input_say_so(tmp_path: Path) -> None:
    with pytest.raises(InvalidParameterError, match="no charges yet"):
        plot_budget(Accountant(Budget(1.0)))
    with pytest.raises(InvalidParameterError, match="Accountant or the path"):
        plot_budget(3.0)  # type: ignore[arg-type]


# --- the CLI ---------------------------------------------------------------------------
def _ledger(tmp_path: Path, charges: int) -> Path:
    ledger = tmp_path / "study.ledger"
    with Accountant(Budget(1.0), ledger) as accountant:
        for i in range(charges):
            accountant.charge(0.2, f"query {i}")
    return ledger


def test_cli_budget_plot_writes_a_png(tmp_path: Path) -> None:
    ledger, out = _ledger(tmp_path, 3), tmp_path / "budget.png"
    result = runner.invoke(app, ["budget", str(ledger), "--plot", str(out)], env={"COLUMNS": "160"})
    assert result.exit_code == 0, result.output
    assert "query 2" in result.output and f"written to {out}" in result.output
    assert out.read_bytes()[:8] == PNG
    import matplotlib.image

    assert matplotlib.image.imread(out).shape[:2] == (400, 800)  # 8 x 4 inches at dpi 100


@pytest.mark.parametrize(
    ("charges", "plot", "message"),
    [
        (0, "budget.png", "has no charges yet"),
        (2, "budget.txt", "--plot"),
        (2, "missing/budget.png", "does not exist; create it first"),
    ],
)
def test_cli_budget_plot_errors_in_cli_words(
    tmp_path: Path, charges: int, plot: str, message: str
) -> None:
    ledger = _ledger(tmp_path, charges)
    before = ledger.read_bytes()
    result = runner.invoke(app, ["budget", str(ledger), "--plot", str(tmp_path / plot)])
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output
    assert not (tmp_path / plot).exists() and ledger.read_bytes() == before
    assert "┏" not in result.output  # refused before the table is printed
