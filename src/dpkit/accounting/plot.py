"""A budget-over-time chart: what a ledger spent, charge by charge, against its budget.

Pure drawing on public facts (labels, costs, times, the budget); no data is
read, so a chart can be shown to anyone who may see the ledger.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from dpkit.errors import InvalidParameterError

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from dpkit.accounting.accountant import Accountant

_SPENT, _DELTA, _REFUSED, _LIMIT = "#0072B2", "#E69F00", "#D55E00", "#555555"  # Okabe & Ito
_MAX_TICK_LABELS = 12  # name each charge on the x axis up to this many charges


def plot_budget(
    ledger_or_accountant: Accountant | str | os.PathLike[str], ax: Axes | None = None
) -> Figure:
    """Draw the cumulative ε (and δ, if any) spent after each charge, with the budget.

    ``ledger_or_accountant`` is an :class:`~dpkit.accounting.Accountant` or
    the path of a ledger file (opened read-only in effect: nothing is
    charged). The x axis is the ledger's order of charges (their times are in
    the title); the solid line is the total certified by the accountant's
    composition rule after each charge; the dashed line is the budget.
    Charges an accountant object refused are marked with a cross at the
    total they would have reached (ledger files record charges only, so a
    chart drawn from a path shows no refusals). δ, when the budget or a
    charge has one, is drawn on a second y axis. Returns the figure (a new
    one when ``ax`` is None). Raises :class:`~dpkit.errors.InvalidParameterError`
    when there is nothing to draw (no charge and no refusal).
    """
    from dpkit.accounting.accountant import Accountant

    if isinstance(ledger_or_accountant, Accountant):
        return _draw(ledger_or_accountant, ax)
    if not isinstance(ledger_or_accountant, str | os.PathLike):
        raise InvalidParameterError(
            "plot_budget needs an Accountant or the path of a ledger file, "
            f"got a {type(ledger_or_accountant).__name__}."
        )
    accountant = Accountant.from_ledger(ledger_or_accountant)
    try:
        return _draw(accountant, ax)
    finally:
        accountant.close()


def _draw(accountant: Accountant, ax: Axes | None) -> Figure:
    from matplotlib.figure import Figure

    history = accountant.spent_over_time()
    refusals = accountant.refusals
    if not history and not refusals:
        where = accountant.ledger_path
        raise InvalidParameterError(
            f"the ledger{'' if where is None else ' ' + repr(where.name)} has no charges yet: "
            "there is nothing to plot. Run a query against it first."
        )
    budget = accountant.budget
    if ax is None:
        fig = Figure(figsize=(8.0, 4.0), layout="constrained")
        ax = fig.add_subplot()
    else:
        fig = ax.get_figure()  # type: ignore[assignment]
    xs = list(range(len(history) + 1))
    eps = [0.0] + [float(spent.epsilon) for _, spent in history]
    end = len(history) + 0.8  # the last total holds until now
    ax.step([*xs, end], [*eps, eps[-1]], where="post", color=_SPENT, linewidth=2,
            label="ε spent")  # fmt: skip
    ax.plot(xs[1:], eps[1:], "o", color=_SPENT, markersize=4)
    ax.axhline(float(budget.epsilon), color=_LIMIT, linestyle="--", linewidth=1.2,
               label=f"ε budget ({float(budget.epsilon):g})")  # fmt: skip
    position = {record.id: i + 1 for i, (record, _) in enumerate(history)}
    if refusals:
        rx = [position.get(r.after, 0) + 0.5 for r in refusals]
        ry = [eps[position.get(r.after, 0)] + float(r.cost.epsilon) for r in refusals]
        ax.plot(rx, ry, "x", color=_REFUSED, markersize=9, markeredgewidth=2,
                label="refused (would have reached)")  # fmt: skip
    deltas = [0.0] + [float(spent.delta) for _, spent in history]
    handles, labels = ax.get_legend_handles_labels()
    if float(budget.delta) > 0 or any(deltas):
        twin = ax.twinx()
        twin.step([*xs, end], [*deltas, deltas[-1]], where="post", color=_DELTA,
                  linewidth=1.5, label="δ spent")  # fmt: skip
        if float(budget.delta) > 0:
            twin.axhline(float(budget.delta), color=_DELTA, linestyle=":", linewidth=1.2,
                         label=f"δ budget ({float(budget.delta):g})")  # fmt: skip
        twin.set_ylabel("δ spent", color=_DELTA)
        twin.set_ylim(bottom=0)
        more = twin.get_legend_handles_labels()
        handles, labels = handles + more[0], labels + more[1]
    ax.set_ylim(bottom=0)
    ax.set_xlim(-0.2, end)
    ax.set_xlabel("charges, in ledger order")
    ax.set_ylabel(f"ε spent ({accountant.composition} composition)")
    if history and len(history) <= _MAX_TICK_LABELS:
        ax.set_xticks(xs[1:], [_short(record.label) for record, _ in history],
                      rotation=30, ha="right", fontsize=8)  # fmt: skip
    title = f"budget {budget}: {len(history)} charge(s)"
    if history:
        first, last = history[0][0].timestamp, history[-1][0].timestamp
        title += f", {first:%Y-%m-%d %H:%M} to {last:%Y-%m-%d %H:%M} UTC"
    ax.set_title(title, fontsize=10, loc="left")
    ax.spines["top"].set_visible(False)
    ax.grid(axis="y", color="#e6e6e6", linewidth=0.8)
    ax.set_axisbelow(True)
    ax.legend(handles, labels, frameon=False, fontsize=8, loc="lower right")
    return fig


def _short(label: str, width: int = 24) -> str:
    return label if len(label) <= width else label[: width - 1] + "…"
