"""``dpkit histogram TABLE COLUMN``: publish a private histogram of a CSV or Parquet column.

The unit bins come from PUBLIC parameters given on the command line (bounds and
a number of bins or a width, or explicit edges), never from the data. Values
outside the bounds are clipped into the first/last unit bin and missing values
are dropped, so every row adds at most 1 to exactly one unit count: the
neighbouring relation the publishers assume.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from dpkit._cli_budget import cli_payer
from dpkit.accounting import Budget, charge_and_run
from dpkit.errors import InvalidParameterError
from dpkit.histograms._published import PublishedHistogram
from dpkit.histograms.labels import bin_labels
from dpkit.histograms.memory import check_memory, memory_needed
from dpkit.histograms.methods import PUBLISHERS_1D, publisher

#: The publishers ``--method`` names, as registered (one spelling: ``noise_first``).
METHODS = tuple(PUBLISHERS_1D)
#: Unit bins the command accepts (each method's memory is checked too, see ``memory_needed``).
MAX_UNIT_BINS = 100_000


def unit_edges(
    *,
    bounds: tuple[float, float] | None = None,
    units: int | None = None,
    width: float | None = None,
    edges: Sequence[float] | None = None,
) -> NDArray[np.float64]:
    """Public unit-bin edges from ``edges``, or ``bounds`` with ``units`` or ``width``."""
    from dpkit._checks import check_bounds

    if edges is not None:
        if bounds is not None or units is not None or width is not None:
            raise InvalidParameterError(
                "give either --edges or --bounds (with --units or --width), not both."
            )
        arr = np.asarray(list(edges), dtype=np.float64)
        if (
            arr.ndim != 1
            or arr.size < 2
            or not np.all(np.isfinite(arr))
            or np.any(np.diff(arr) <= 0)
        ):
            raise InvalidParameterError(
                "--edges must be at least two finite, strictly increasing numbers."
            )
        return arr
    if bounds is None:
        raise InvalidParameterError(
            "the unit bins must be public: give --bounds LO HI with --units N or --width W "
            "(e.g. --bounds 0 80 --width 1 for ages), or explicit --edges. dpkit never derives "
            "bins from the data."
        )
    lo, hi = check_bounds(bounds, "bounds")
    if (units is None) == (width is None):
        raise InvalidParameterError("with --bounds give exactly one of --units N or --width W.")
    if units is not None:
        if isinstance(units, bool) or not isinstance(units, int) or units < 1:
            raise InvalidParameterError("--units must be an integer >= 1.")
        if units > MAX_UNIT_BINS:
            raise InvalidParameterError(
                f"--units asks for more than {MAX_UNIT_BINS:,} unit bins; use fewer."
            )
        return np.linspace(lo, hi, units + 1)
    assert width is not None
    if not math.isfinite(width) or width <= 0:
        raise InvalidParameterError("--width must be a finite number > 0.")
    count = math.ceil((hi - lo) / width - 1e-9)
    if count > MAX_UNIT_BINS:
        raise InvalidParameterError(
            f"--width gives more than {MAX_UNIT_BINS:,} unit bins; use a larger width."
        )
    return lo + width * np.arange(count + 1, dtype=np.float64)


def check_kind(table: Path, column: str, kind: str | None, verb: str = "dpkit histogram") -> None:
    """A column not declared numeric (``--type COLUMN=DOUBLE``) is refused, naming the flag.

    The column's type is public metadata the data owner declares, as for ``dpkit
    query``; never read from the rows (a text column would otherwise be read as
    all-missing and still be paid for).
    """
    name = Path(table).name
    if kind is None:
        raise InvalidParameterError(
            f"column {column!r} has no declared type, and {verb} bins numbers: "
            f"declare it with --type {column}=DOUBLE (or another numeric type such as "
            "BIGINT or DECIMAL(10,2)). Column types are public metadata the data owner "
            "declares; they are never taken from the rows."
        )
    if kind == "numeric":
        return
    raise InvalidParameterError(
        f"column {column!r} is declared {kind}, not numeric: {verb} bins numbers. "
        f"For categories give them publicly with --domain: dpkit query {name} histogram "
        f"{column} --domain VALUE (repeatable), or its most common one with dpkit query "
        f"{name} mode {column} --domain VALUE."
    )


def open_columns(
    con: Any,
    table: Path,
    types: dict[str, str | None],
    encoding: str,
    verb: str = "dpkit histogram",
) -> Any:
    """The columns as a DuckDB relation ``v0, v1, …`` of finite DOUBLEs, refused before any charge.

    ``types`` maps each column, in order, to its declared type (``--type``; None when
    undeclared). The file is opened as ``dpkit query`` opens it
    (:func:`dpkit.tables.sources.open_table_file`: the strict CSV reader, with
    ``encoding``; Parquet), each column is looked up in the header, its declared type
    must be numeric, and each value is converted as the query path converts it
    (:func:`dpkit.tables.sources.declared_cast`, ``TRY_CAST``): a value that does not
    fit is missing, never an error, and a row is kept only where every column holds a
    finite number. Nothing but the shape of the file is read here; the values are
    fetched after the charge.
    """
    from dpkit._cli_query import kinds_of_types
    from dpkit.tables.sources import canonical_types, declared_cast, open_table_file

    rel = open_table_file(con, Path(table), encoding)
    names = [str(c) for c in rel.columns]
    values, keep = [], []
    for i, (column, type_name) in enumerate(types.items()):
        if column not in names:
            raise InvalidParameterError(
                f"column {column!r} is not in {Path(table).name}; its columns are "
                f"{', '.join(names)}."
            )
        declared = None if type_name is None else canonical_types({column: type_name})[column]
        check_kind(
            table,
            column,
            None if declared is None else kinds_of_types({column: declared})[column],
            verb,
        )
        assert declared is not None
        own = str(rel.types[names.index(column)])
        values.append(f"TRY_CAST({declared_cast(column, own, declared)} AS DOUBLE) AS v{i}")
        keep.append(f"v{i} IS NOT NULL AND isfinite(v{i})")
    return rel.project(", ".join(values)).filter(" AND ".join(keep))


def open_column(con: Any, table: Path, column: str, type_name: str | None, encoding: str) -> Any:
    """:func:`open_columns` for one column (``v0``)."""
    return open_columns(con, table, {column: type_name}, encoding)


def read_column(values: Any) -> NDArray[np.float64]:
    """The finite numbers of :func:`open_column`'s relation (call it after the charge).

    Every value was converted on its own (``TRY_CAST``) and the file parsed when it
    was opened, so no entry can make this fail.
    """
    return np.asarray(values.fetchnumpy()["v0"], dtype=np.float64)


def check_epsilon_once(epsilon: float) -> None:
    """``--epsilon`` checked before the charge; a large one warns here, once (in CLI words)."""
    from dpkit._checks import check_epsilon

    check_epsilon(epsilon, "--epsilon")


@contextlib.contextmanager
def epsilon_warned() -> Iterator[None]:
    """The publishers check their shares of ``--epsilon`` again: no second warning about it."""
    import warnings

    from dpkit.errors import PrivacyWarning

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", r".* is above 10: the guarantee is weak", PrivacyWarning)
        yield


def bin_counts(values: NDArray[np.float64], edges: NDArray[np.float64]) -> NDArray[np.float64]:
    """Unit counts over public ``edges``; values outside are clipped into the end bins."""
    n = edges.size - 1
    index = np.searchsorted(edges, values, side="right") - 1
    return np.bincount(np.clip(index, 0, n - 1), minlength=n).astype(np.float64)


@dataclass(frozen=True)
class HistogramOptions:
    """The public options of ``dpkit histogram`` besides the bins: one value, checked once.

    :meth:`check` runs before anything is charged or read; :func:`publish` then
    only dispatches them (after the charge nothing is validated, so nothing fails).
    """

    n_bins: int | None = None
    max_count: float | None = None
    statistic: str = "mean"
    branching: int | None = None
    selection: str = "paper"
    sampler: str = "paper"
    workload: str = "ranges"

    def check(self, name: str, n_units: int) -> None:
        """Every option of method ``name`` over ``n_units`` unit bins, and its memory."""
        from dpkit.histograms._workload import WORKLOADS

        if self.statistic not in ("mean", "median"):
            raise InvalidParameterError("--statistic must be 'mean' or 'median'.")
        if self.selection not in ("paper", "penalised"):
            raise InvalidParameterError("--selection must be 'paper' or 'penalised'.")
        if self.sampler not in ("paper", "joint"):
            raise InvalidParameterError("--sampler must be 'paper' or 'joint'.")
        if self.workload not in WORKLOADS:
            raise InvalidParameterError(f"--workload must be one of {', '.join(WORKLOADS)}.")
        b = self.branching
        if b is not None and (isinstance(b, bool) or not isinstance(b, int) or b < 2):
            raise InvalidParameterError("--branching must be an integer >= 2.")
        if self.n_bins is not None and not 1 <= self.n_bins <= n_units:
            raise InvalidParameterError(f"--n-bins must be in [1, {n_units}] (the unit bins).")
        if self.max_count is not None and not (
            math.isfinite(self.max_count) and self.max_count > 0
        ):
            raise InvalidParameterError("--max-count must be a finite number > 0.")
        if name == "structure_first" and self.statistic == "mean" and self.max_count is None:
            raise InvalidParameterError(
                "structure_first needs --max-count F, a public upper bound on any unit count "
                "(e.g. the table's known maximum size), or --statistic median."
            )
        check_memory(
            memory_needed(
                name,
                n_units,
                self.n_bins,
                statistic=self.statistic,
                selection=self.selection,
                sampler=self.sampler,
            ),
            f"{name} over {n_units:,} unit bins",
            "use wider unit bins, a smaller --n-bins, --statistic mean, or --method laplace / "
            "hierarchical, which need little memory.",
        )


def publish(
    counts: NDArray[np.float64],
    name: str,
    epsilon: float,
    options: HistogramOptions,
    *,
    edges: NDArray[np.float64],
    rng: object = None,
    accountant: Any = None,
) -> PublishedHistogram:
    """Publish with the registered publisher ``name`` (one of :data:`METHODS`; options checked).

    Each publisher gets the options it declares (:mod:`dpkit.histograms.methods`);
    ``--max-count`` is ``auto``'s ``max_records``, and ``--branching`` is passed only
    when given.
    """
    o = options
    given: dict[str, Any] = {
        "edges": edges,
        "n_bins": o.n_bins,
        "max_count": o.max_count,
        "max_records": o.max_count,
        "workload": o.workload,
        "statistic": "median" if o.statistic == "median" else "mean",
        "selection": "penalised" if o.selection == "penalised" else "paper",
        "sampler": "joint" if o.sampler == "joint" else "paper",
    }
    if o.branching is not None:
        given["branching"] = o.branching
    entry = publisher(name)
    kwargs = {k: v for k, v in given.items() if k in entry.options}
    published: PublishedHistogram = entry.publish(
        counts, epsilon, rng=rng, accountant=accountant, **kwargs
    )
    return published


def _format(value: float) -> str:
    return f"{value:,.1f}" if abs(value) < 1e6 else f"{value:,.3g}"


def render_table(histogram: PublishedHistogram, column: str, max_rows: int = 60) -> Any:
    """A Rich table of the published bins with ±2 s.d. noise bounds."""
    from rich.table import Table

    from dpkit.histograms.plot import METHOD_LABELS

    label = METHOD_LABELS.get(histogram.method, histogram.method)
    table = Table(
        title=(
            f"DP histogram of {column!r}: {label}, "
            f"ε = {histogram.epsilon:g}, {histogram.n_bins} bins"
        ),
        caption=(
            "± is 2 standard deviations of the noise (merged bins: plus an unknown merge "
            "error). Values below the first edge are counted in the first bin, values above "
            "the last edge in the last bin; missing and non-numeric entries are left out."
        ),
    )
    table.add_column("bin", justify="left")
    table.add_column("per unit bin", justify="right")
    table.add_column("bin total", justify="right")
    table.add_column("± (total)", justify="right", style="dim")
    labels = bin_labels([float(e) for e in histogram.bin_edges])
    rows = range(histogram.n_bins)
    bins = histogram.bins
    totals = histogram.answer(bins[:-1], bins[1:] - 1)
    spreads = 2.0 * histogram.answer_error(bins[:-1], bins[1:] - 1)
    shown = list(rows) if histogram.n_bins <= max_rows else list(rows)[: max_rows - 1]
    for j in shown:
        table.add_row(
            labels[j],
            _format(float(histogram.bin_estimates[j])),
            _format(float(totals[j])),
            _format(float(spreads[j])),
        )
    if len(shown) < histogram.n_bins:
        table.add_row(
            f"... {histogram.n_bins - len(shown)} more bins: all {histogram.n_bins} are in "
            "--out FILE.json or --json",
            "",
            "",
            "",
        )
    n = histogram.n_units
    table.add_section()
    table.add_row(
        "all",
        "",
        _format(float(histogram.answer(0, n - 1))),
        _format(2.0 * float(histogram.answer_error(0, n - 1))),
    )
    return table


def histogram_command(
    table: Path,
    column: str,
    method: str = "auto",
    epsilon: float = 1.0,
    *,
    bounds: tuple[float, float] | None = None,
    units: int | None = None,
    width: float | None = None,
    edges: Sequence[float] | None = None,
    n_bins: int | None = None,
    max_count: float | None = None,
    statistic: str = "mean",
    branching: int | None = None,
    selection: str = "paper",
    sampler: str = "paper",
    workload: str = "ranges",
    plot: Path | None = None,
    seed: int | None = None,
    accountant: Any = None,
    console: Any = None,
    ledger: Path | None = None,
    budget: float | None = None,
    budget_delta: float | None = None,
    out_file: Path | None = None,
    as_json: bool = False,
    new_ledger: bool = False,
    composition: str | None = None,
    column_type: str | None = None,
    encoding: str = "utf-8",
) -> PublishedHistogram:
    """Publish a DP histogram of ``column`` in ``table`` (CSV or Parquet); print, save, plot it.

    Privacy: epsilon-DP (add/remove one row), as the chosen publisher states;
    the unit bins are built from the public ``bounds``/``units``/``width`` or
    ``edges`` only. Order: every parameter (and the memory the method would
    need) is checked, in the order the command reads (the column is looked up
    in the header first, then the bins, the method and its options), the release is
    charged to ``accountant`` (else the file's ledger, see
    :mod:`dpkit._cli_budget`), and only then is the column read — as text,
    each entry converted on its own, so no entry can make it fail. The
    outputs (``plot``: PNG/SVG/PDF, ``out_file``: JSON with every field of the
    release) are checked before the charge too; after it the release is
    printed (a table, or all of it as JSON with ``as_json``) and saved, and
    if saving fails anyway it is printed in full as JSON and the command
    exits with code 3 (see :mod:`dpkit._cli_output`). ``seed`` makes the
    noise reproducible and must not be used for real releases (None =
    secure randomness). ``column_type`` is the column's declared type
    (``--type COLUMN=TYPE``, a DuckDB type name); a column not declared as a
    numeric type is refused before the charge, as ``dpkit query`` refuses an
    undeclared one: its type is never inferred from the data, which would make
    the refusal depend on the rows. The file is read as ``dpkit query`` reads it
    (:func:`open_column`: the strict CSV reader, ``encoding``, ``TRY_CAST`` to
    the declared type).
    """
    import duckdb
    from rich.console import Console

    from dpkit._cli_options import one_spelling
    from dpkit._cli_output import (
        JSON_SUFFIXES,
        NOT_SAVED,
        PLOT_SUFFIXES,
        check_output,
        deliver,
    )
    from dpkit.histograms.plot import plot_histogram

    out = console if console is not None else Console()
    with duckdb.connect() as con:
        # In the order the command reads: file, column (and its type), bins, method.
        values = open_column(con, table, column, column_type, encoding)
        grid = unit_edges(bounds=bounds, units=units, width=width, edges=edges)
        name = one_spelling(method, METHODS, "--method")
        if name not in METHODS:
            raise InvalidParameterError(
                f"--method must be one of {', '.join(METHODS)}; got {method!r}."
            )
        check_epsilon_once(epsilon)
        options = HistogramOptions(
            n_bins=n_bins,
            max_count=max_count,
            statistic=statistic,
            branching=branching,
            selection=selection,
            sampler=sampler,
            workload=workload,
        )
        options.check(name, grid.size - 1)
        check_output(plot, "--plot", PLOT_SUFFIXES)
        check_output(out_file, "--out", JSON_SUFFIXES)
        payer = cli_payer(table, accountant, ledger, budget, budget_delta, new_ledger, composition)

        def release() -> PublishedHistogram:
            counts = bin_counts(read_column(values), grid)
            with epsilon_warned():
                return publish(counts, name, epsilon, options, edges=grid, rng=seed)

        label = f"histogram({column}, {name}, {grid.size - 1} unit bins)"
        histogram = charge_and_run(payer, Budget(epsilon), label, release)
    code = deliver(
        histogram_payload(histogram, column, label, payer.remaining_seen),
        console=out,
        render=lambda: render_table(histogram, column),
        out=out_file,
        as_json=as_json,
        plot=plot,
        make_figure=lambda: plot_histogram(histogram, xlabel=column),
    )
    if code == NOT_SAVED:
        import typer

        raise typer.Exit(code)
    return histogram


def histogram_payload(
    histogram: PublishedHistogram, column: str, label: str, remaining: Budget | None
) -> dict[str, Any]:
    """Every field of a published histogram (all public), as saved by ``--out`` / ``--json``."""
    h = histogram
    return {
        "release": "histogram",
        "label": label,
        "column": column,
        "method": h.method,
        "epsilon": h.epsilon,
        "delta": 0.0,
        "n_units": h.n_units,
        "unit_edges": h.edges,
        "estimates": h.estimates,
        "errors": h.errors,
        "bins": h.bins,
        "bin_edges": h.bin_edges,
        "bin_estimates": h.bin_estimates,
        "details": {k: v for k, v in h.details.items() if not callable(v)},
        "remaining": None
        if remaining is None
        else {"epsilon": remaining.epsilon, "delta": remaining.delta},
        "privacy": h.privacy.paid(remaining).to_dict(),
    }
