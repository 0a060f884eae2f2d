"""Drawing published histograms with their error bars (Matplotlib, no pyplot state)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from dpkit.histograms._grid import PublishedGrid
    from dpkit.histograms._published import PublishedHistogram

# Colour-blind-safe palette (Okabe & Ito).
METHOD_COLOURS = {
    "laplace": "#999999",
    "hierarchical": "#56B4E9",
    "noise_first_mean": "#E69F00",
    "noise_first_median": "#D55E00",
    "structure_first_mean": "#009E73",
    "structure_first_median": "#0072B2",
}
METHOD_LABELS = {
    "laplace": "Laplace",
    "hierarchical": "Hierarchical",
    "noise_first_mean": "NoiseFirst",
    "noise_first_median": "NoiseFirst (median)",
    "structure_first_mean": "StructureFirst",
    "structure_first_median": "StructureFirst (median)",
}


def _style(ax: Axes) -> None:
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    ax.spines["left"].set_color("#555555")
    ax.spines["bottom"].set_color("#555555")
    ax.tick_params(colors="#333333", labelsize=9)
    ax.grid(axis="y", color="#e6e6e6", linewidth=0.8)
    ax.set_axisbelow(True)


def plot_histogram(
    histogram: PublishedHistogram,
    ax: Axes | None = None,
    *,
    true_counts: ArrayLike | None = None,
    title: str | None = None,
    xlabel: str | None = None,
    ylabel: str = "count per unit bin",
    color: str | None = None,
    spread: float = 2.0,
    show_unit_estimates: bool = True,
) -> Figure:
    """Draw a published histogram with ±``spread`` noise standard deviations.

    Published bins are drawn as bars spanning their value-space edges at the
    per-unit estimate; the band around each bar top is ±``spread``·errors (the
    noise alone; see :class:`PublishedHistogram`). Unit-bin methods get one
    error bar per bar. ``true_counts`` overlays the exact counts as a dark step
    line: for evaluation on public or synthetic data only, never for a real
    release. Returns the figure (a new one when ``ax`` is None).
    """
    from matplotlib.figure import Figure

    if ax is None:
        fig = Figure(figsize=(9.0, 4.2), layout="constrained")
        ax = fig.add_subplot()
    else:
        fig = ax.get_figure()  # type: ignore[assignment]
    colour = color or METHOD_COLOURS.get(histogram.method, "#0072B2")
    label = METHOD_LABELS.get(histogram.method, histogram.method)
    edges = histogram.bin_edges
    left, widths = edges[:-1], np.diff(edges)
    values = histogram.bin_estimates
    bin_errors = histogram.errors[histogram.bins[:-1]] * spread
    unit_bins = histogram.n_bins == histogram.n_units

    ax.bar(
        left,
        values,
        width=widths,
        align="edge",
        color=colour,
        alpha=0.75,
        edgecolor="white",
        linewidth=0.6 if unit_bins else 1.2,
        label=f"{label} (ε = {histogram.epsilon:g})",
    )
    centres = left + widths / 2
    if unit_bins:
        ax.errorbar(
            centres,
            values,
            yerr=bin_errors,
            fmt="none",
            ecolor="#333333",
            elinewidth=0.8,
            capsize=1.5,
            alpha=0.8,
            label=f"±{spread:g} s.d. of noise",
        )
    else:
        for i, (x0, w, v, e) in enumerate(zip(left, widths, values, bin_errors)):
            ax.fill_between(
                [x0, x0 + w],
                [v - e, v - e],
                [v + e, v + e],
                color="#333333",
                alpha=0.15,
                linewidth=0,
                label=f"±{spread:g} s.d. of noise" if i == 0 else None,
            )
        if show_unit_estimates:
            # Boundaries of the published bins: thin ticks at the top of each bar.
            ax.vlines(
                edges[1:-1], 0, np.maximum(values[:-1], values[1:]), color="white", linewidth=1.2
            )
    if true_counts is not None:
        truth = np.asarray(true_counts, dtype=np.float64)
        ax.stairs(
            truth,
            histogram.edges,
            color="#111111",
            linewidth=1.1,
            label="true counts (evaluation only)",
        )
    ax.axhline(0.0, color="#555555", linewidth=0.8)
    ax.set_xlim(histogram.edges[0], histogram.edges[-1])
    if xlabel:
        ax.set_xlabel(xlabel, fontsize=10)
    ax.set_ylabel(ylabel, fontsize=10)
    if title is None:
        title = f"{label}: {histogram.n_bins} bins over {histogram.n_units} unit bins"
    ax.set_title(title, fontsize=11, loc="left")
    _style(ax)
    ax.legend(frameon=False, fontsize=8.5, loc="upper right")
    return fig


def plot_comparison(
    histograms: Sequence[PublishedHistogram],
    *,
    true_counts: ArrayLike | None = None,
    xlabel: str | None = None,
    suptitle: str | None = None,
    titles: Sequence[str] | None = None,
    columns: int = 2,
) -> Figure:
    """Small multiples: one panel per histogram, shared axes, for docs and reports.

    ``titles`` names the panels (default: each method's name).
    """
    from matplotlib.figure import Figure

    rows = -(-len(histograms) // columns)
    fig = Figure(figsize=(5.2 * columns, 3.1 * rows), layout="constrained")
    # Own y-scales: a hierarchical panel's wide bars would flatten the others.
    axes = fig.subplots(rows, columns, sharex=True, squeeze=False)
    names = (
        list(titles)
        if titles is not None
        else [METHOD_LABELS.get(h.method, h.method) for h in histograms]
    )
    for ax, hist, label in zip(axes.ravel(), histograms, names):
        mse = ""
        if true_counts is not None:
            err = float(np.mean((hist.estimates - np.asarray(true_counts, dtype=float)) ** 2))
            mse = f"  (unit MSE {err:,.0f})"
        plot_histogram(
            hist,
            ax,
            true_counts=true_counts,
            title=f"{label}, k = {hist.n_bins}{mse}",
            xlabel=xlabel,
        )
        ax.get_legend().remove()
    for ax in axes.ravel()[len(histograms) :]:
        ax.set_visible(False)
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles: list[Any] = [Patch(color="#333333", alpha=0.2, label="±2 s.d. of noise")]
    if true_counts is not None:
        handles.append(Line2D([], [], color="#111111", linewidth=1.1, label="true counts"))
    fig.legend(handles=handles, loc="outside lower center", ncols=2, frameon=False, fontsize=9)
    if suptitle:
        fig.suptitle(suptitle, fontsize=12, x=0.01, ha="left")
    return fig


GRID_LABELS = {
    "laplace2d": "Laplace",
    "ugrid": "UGrid",
    "agrid": "AGrid",
    "dawa2d": "DAWA (Hilbert order)",
    "geometric": "Geometric",
}


def plot_grid(
    grid: PublishedGrid,
    ax: Axes | None = None,
    *,
    title: str | None = None,
    xlabel: str | None = None,
    ylabel: str | None = None,
    cmap: str = "magma",
    vmax: float | None = None,
    density: bool = False,
    colorbar: bool = True,
    gamma: float = 0.5,
) -> Figure:
    """Draw a published 2-D histogram as a heat map over its value-space edges.

    Each unit cell is coloured by its estimate (or, with ``density``, by the
    estimate per unit of area). Negative estimates — noise, not data — are
    drawn as 0; the colour scale runs from 0 to ``vmax`` (default: the
    largest estimate), compressed by a power ``gamma`` (0.5: square root, so
    sparse regions stay visible beside dense ones; 1: linear). The grid's x
    axis is drawn horizontally. Returns the figure (a new one when ``ax`` is
    None).
    """
    from matplotlib.colors import PowerNorm
    from matplotlib.figure import Figure

    if ax is None:
        fig = Figure(figsize=(6.4, 5.2), layout="constrained")
        ax = fig.add_subplot()
    else:
        fig = ax.get_figure()  # type: ignore[assignment]
    values = np.maximum(grid.estimates, 0.0)
    if density:
        area = np.outer(np.diff(grid.x_edges), np.diff(grid.y_edges))
        values = values / area
    top = float(vmax) if vmax is not None else float(values.max()) or 1.0
    norm = PowerNorm(gamma=gamma, vmin=0.0, vmax=top)
    mesh = ax.pcolormesh(grid.x_edges, grid.y_edges, values.T, cmap=cmap, norm=norm, shading="flat")
    if colorbar:
        label = "estimated count per unit area" if density else "estimated count per cell"
        fig.colorbar(mesh, ax=ax, label=label, shrink=0.85)
    name = GRID_LABELS.get(grid.method, grid.method)
    if title is None:
        nx, ny = grid.shape
        title = f"{name}, ε = {grid.epsilon:g} ({nx} × {ny} cells)"
    ax.set_title(title, fontsize=11, loc="left")
    if xlabel:
        ax.set_xlabel(xlabel, fontsize=10)
    if ylabel:
        ax.set_ylabel(ylabel, fontsize=10)
    ax.set_aspect("auto")
    ax.tick_params(colors="#333333", labelsize=9)
    return fig


def save(fig: Figure, path: Any, dpi: int = 150) -> None:
    """Save a figure made here (PNG, SVG or PDF by the path's suffix)."""
    fig.savefig(path, dpi=dpi)
