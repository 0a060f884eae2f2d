"""The ``dpkit`` command line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

import dpkit
from dpkit._cli_friendly import friendly as _friendly
from dpkit._cli_options import (
    LEDGER,
    OUTPUT,
    SEED,
    OptionGroup,
    choices,
    grouped,
    numbers,
    option,
)
from dpkit._cli_query import DRY_RUN, QUERY, SOURCE, QueryCommand
from dpkit.histograms.methods import PUBLISHERS_1D, PUBLISHERS_2D

app = typer.Typer(
    help="dpkit: differentially private data analysis.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"dpkit {dpkit.__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Show the version."
    ),
) -> None:
    """dpkit: differentially private data analysis."""


@app.command()
def demo(
    seed: int = typer.Option(7, help="Seed of the synthetic table (the noise is always secure)."),
) -> None:
    """Answer private questions about a synthetic patients table."""
    from dpkit.demo import run_demo

    run_demo(seed=seed)


#: The public unit bins of ``dpkit histogram`` (see :func:`dpkit.histograms._cli.unit_edges`).
_UNIT_BINS = OptionGroup(
    (
        option(
            "bounds",
            tuple[float, float] | None,
            None,
            "--bounds",
            help="Public range LO HI of the unit bins.",
        ),
        option("units", int | None, None, "--units", help="Number of unit bins within --bounds."),
        option("width", float | None, None, "--width", help="Width of a unit bin within --bounds."),
        option(
            "edges",
            str | None,
            None,
            "--edges",
            help="Explicit public unit-bin edges, comma-separated.",
        ),
    ),
    lambda edges, **bins: {**bins, "edges": None if edges is None else numbers(edges, "--edges")},
)
#: The publishers' own options (:class:`dpkit.histograms._cli.HistogramOptions`).
_PUBLISHER_OPTIONS = OptionGroup(
    (
        option("n_bins", int | None, None, "--n-bins", help="Number of merged bins k (noise_first, structure_first)."),
        option(
            "max_count", float | None, None, "--max-count",
            help="Public upper bound F on a unit count (structure_first); for auto, on the rows.",
        ),
        option("workload", str, "ranges", "--workload", help="Queries to serve (hb, dawa, auto): ranges | prefixes | units."),
        option("statistic", str, "mean", "--statistic", help="mean (SSE) or median (SAE) bins."),
        option("branching", int | None, None, "--branching", help="Branching factor (hierarchical)."),
        option("selection", str, "paper", "--selection", help="noise_first k rule: paper | penalised."),
        option("sampler", str, "paper", "--sampler", help="structure_first sampler: paper | joint."),
    )
)  # fmt: skip


@app.command()
@_friendly
@grouped(bins=_UNIT_BINS, options=_PUBLISHER_OPTIONS, seed=SEED, ledger=LEDGER, output=OUTPUT)
def histogram(
    table: Path = typer.Argument(..., help="A CSV or Parquet file.", exists=True, dir_okay=False),
    column: str = typer.Argument(..., help="The numeric column to histogram."),
    types: list[str] | None = typer.Option(
        None,
        "--type",
        help="Declared type of the column, COLUMN=TYPE, e.g. age=DOUBLE (required; a numeric type).",
    ),
    encoding: str = typer.Option(
        "utf-8", "--encoding", help="The CSV file's text encoding, e.g. latin-1 (default UTF-8)."
    ),
    method: str = typer.Option("auto", help=choices(PUBLISHERS_1D)),
    epsilon: float = typer.Option(1.0, help="Privacy budget of this release."),
    bins: Any = None,
    options: Any = None,
    plot: Path | None = typer.Option(None, help="Save a picture with error bars (PNG, SVG, PDF)."),
    seed: Any = None,
    ledger: Any = None,
    output: Any = None,
) -> None:
    """Publish a DP histogram of a CSV or Parquet column over public bins (paid from the file's ledger)."""
    from dpkit.histograms._cli import histogram_command
    from dpkit.tables._cli import declared_types

    declared = declared_types(types) or {}
    histogram_command(
        table, column, method, epsilon, **bins, **options, plot=plot,
        column_type=declared.get(column), encoding=encoding, **seed, **ledger, **output,
    )  # fmt: skip


@app.command()
@_friendly
@grouped(seed=SEED, ledger=LEDGER, output=OUTPUT)
def histogram2d(
    table: Path = typer.Argument(..., help="A CSV or Parquet file.", exists=True, dir_okay=False),
    x: str = typer.Argument(..., help="The numeric column on the horizontal axis."),
    y: str = typer.Argument(..., help="The numeric column on the vertical axis."),
    types: list[str] | None = typer.Option(
        None,
        "--type",
        help="Declared types of both columns, COLUMN=TYPE (repeatable or comma-separated, e.g. "
        "lon=DOUBLE,lat=DOUBLE; required; numeric types).",
    ),
    encoding: str = typer.Option(
        "utf-8", "--encoding", help="The CSV file's text encoding, e.g. latin-1 (default UTF-8)."
    ),
    method: str = typer.Option("auto2d", help=choices(PUBLISHERS_2D)),
    epsilon: float = typer.Option(1.0, help="Privacy budget of this release."),
    x_bounds: tuple[float, float] | None = typer.Option(None, help="Public range LO HI of x."),
    y_bounds: tuple[float, float] | None = typer.Option(None, help="Public range LO HI of y."),
    units: tuple[int, int] = typer.Option((128, 128), help="Unit cells NX NY within the bounds."),
    n_records: float | None = typer.Option(
        None, help="Public number of rows (auto2d, agrid, ugrid); else 5% of ε buys a count."
    ),
    plot: Path | None = typer.Option(None, help="Save a heat map (PNG, SVG, PDF)."),
    seed: Any = None,
    ledger: Any = None,
    output: Any = None,
) -> None:
    """Publish a DP 2-D histogram (a map) of two numeric columns over public cells."""
    from dpkit.histograms._cli_grid import histogram2d_command
    from dpkit.tables._cli import declared_types

    cells: dict[str, Any] = {
        "x_bounds": x_bounds,
        "y_bounds": y_bounds,
        "units": units,
        "n_records": n_records,
    }
    histogram2d_command(
        table, x, y, method, epsilon, **cells, plot=plot, types=declared_types(types) or {},
        encoding=encoding, **seed, **ledger, **output,
    )  # fmt: skip


#: Per-column declarations on the command line (``dpkit inspect``, ``dpkit synth``): they go
#: into the schema, beside a ``--schema`` file's.
_DECLARED = OptionGroup(
    (
        option(
            "bounds",
            list[str] | None,
            None,
            "--bounds",
            help="Declared bounds COLUMN=LO,HI (repeatable), e.g. age=0,120.",
        ),
        option(
            "domains",
            list[str] | None,
            None,
            "--domain",
            help="Declared categories COLUMN=A,B,... (repeatable).",
        ),
    )
)


@app.command("inspect")
@_friendly
@grouped(declared=_DECLARED)
def inspect_file(
    table: Path = typer.Argument(
        ..., help="A CSV or Parquet file.", exists=True, dir_okay=False, readable=True
    ),
    types: list[str] | None = typer.Option(
        None, "--type", help="Declared column type COLUMN=TYPE (repeatable), e.g. age=DOUBLE."
    ),
    declared: Any = None,
    encoding: str = typer.Option(
        "utf-8", "--encoding", help="The CSV file's text encoding, e.g. latin-1 (default UTF-8)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """For the data owner, NOT private: what the declared types make of a file's rows.

    Counts, per column, missing values, values that do not parse as the declared
    type (queries read them as missing), values outside --bounds and outside
    --domain; finds ragged rows and encoding problems; lists undeclared columns
    with the type --infer-types would take. Nothing is charged. Never share the
    output with analysts. Exit code 0: no problems; 1: problems listed.
    """
    from dpkit.tables._cli_inspect import inspect_command

    code = inspect_command(table, types, declared["bounds"], declared["domains"], encoding, as_json)
    raise typer.Exit(code)


#: How ``dpkit synth`` opens a file: ``dpkit query``'s own options (:data:`SOURCE`), less the
#: ones a synthetic table does not take (a privacy unit, the noise of a query).
_SYNTH_SOURCE = OptionGroup(
    tuple(p for p in SOURCE.parameters if p.name in ("schema", "types", "infer_types", "encoding"))
)


@app.command()
@_friendly
@grouped(source=_SYNTH_SOURCE, declared=_DECLARED, seed=SEED, ledger=LEDGER, dry_run=DRY_RUN)
def synth(
    table: Path = typer.Argument(..., help="A CSV or Parquet file.", exists=True, dir_okay=False),
    rows: int = typer.Option(..., "--rows", help="Rows of the synthetic table."),
    out: Path = typer.Option(
        ...,
        "--out",
        help="Where to write it: .parquet or .csv; the report goes beside it, NAME.report.json.",
    ),
    epsilon: float | None = typer.Option(
        None, "--epsilon", help="Privacy budget ε it spends (with --delta); or give --rho."
    ),
    delta: float | None = typer.Option(
        None, "--delta", help="δ of the guarantee (default: the ledger's budget δ), e.g. 1e-9."
    ),
    rho: float | None = typer.Option(None, "--rho", help="ρ-zCDP to spend, instead of --epsilon."),
    method: str = typer.Option("mst", "--method", help="mst (default) | aim."),
    columns: list[str] | None = typer.Option(
        None,
        "--column",
        help="A column to synthesize (repeatable or comma-separated; default: every column).",
    ),
    bins: int = typer.Option(
        16, "--bins", help="Equal-width bins of a numeric column over its declared bounds."
    ),
    workload: list[str] | None = typer.Option(
        None,
        "--workload",
        help="aim: a marginal to preserve, A,B or A (repeatable; default: every pair).",
    ),
    force: bool = typer.Option(False, "--force", help="Overwrite --out and its report."),
    source: Any = None,
    declared: Any = None,
    seed: Any = None,
    ledger: Any = None,
    dry_run: Any = None,
) -> None:
    """Write a DP synthetic table of a CSV or Parquet file (MST or AIM), paid from its ledger.

    Every column synthesized needs a public domain: --domain COLUMN=A,B for
    categories, --bounds COLUMN=LO,HI for numbers (cut into --bins bins), or
    a --schema file (which can also give explicit edges). Guarantee: rho-zCDP
    under add/remove one row, charged once to the file's ledger as (epsilon,
    delta). Everything is checked before the charge; a refusal spends nothing.
    Progress goes to stderr, then the report: the marginals measured and
    their noise. Needs the synth extra: pip install 'dpkit\\[synth]'. Example:
    dpkit synth people.csv --type age=DOUBLE,sex=VARCHAR --bounds age=0,100
    --domain sex=f,m --rows 1000 --epsilon 1 --delta 1e-9 --out synth.parquet
    """
    from dpkit.synth._cli import synth_command

    code = synth_command(
        table, out=out, rows=rows, method=method, epsilon=epsilon, delta=delta, rho=rho,
        columns=columns, bins=bins, workload=workload, force=force, source=source,
        declared=declared, ledger=ledger, **seed, **dry_run,
    )  # fmt: skip
    raise typer.Exit(code)


def _refuse_data_file(ledger: Path) -> None:
    """A data file given where its ledger belongs: name the ledger instead of calling it corrupt."""
    from dpkit._cli_budget import default_ledger
    from dpkit.errors import InvalidParameterError

    if ledger.suffix.lower() not in {".csv", ".tsv", ".txt", ".parquet", ".json"}:
        return
    own = default_ledger(ledger)
    hint = f"its default ledger is {own}" if own.exists() else "it has no default ledger yet"
    raise InvalidParameterError(
        f"{ledger.name} looks like a data file, not a ledger: dpkit budget reads the ledger a "
        f"command spends from ({hint}; a --ledger PATH given to dpkit query is used as is)."
    )


@app.command()
@_friendly
def budget(
    ledger: Path = typer.Argument(..., help="A dpkit ledger file.", exists=True, dir_okay=False),
    plot: Path | None = typer.Option(
        None, help="Also save a chart of the budget spent over time (PNG, SVG, PDF)."
    ),
) -> None:
    """Show a ledger's budget, what was spent on what, and what is left."""
    from rich.console import Console
    from rich.table import Table

    from dpkit._cli_output import PLOT_SUFFIXES, check_output
    from dpkit.accounting import Accountant

    check_output(plot, "--plot", PLOT_SUFFIXES)
    _refuse_data_file(ledger)
    accountant = Accountant.from_ledger(ledger)
    try:
        if plot is not None:
            _save_budget_plot(accountant, plot)
        table = Table(title=f"ledger {ledger.name}: budget {accountant.budget}")
        table.add_column("#", justify="right")
        table.add_column("when (UTC)")
        table.add_column("release")
        table.add_column("cost", justify="right")
        for record in accountant.history:
            table.add_row(
                str(record.id),
                f"{record.timestamp:%Y-%m-%d %H:%M:%S}",
                record.label,
                str(record.cost),
            )
        console = Console()
        console.print(table)
        if accountant.dataset is not None:
            console.print(f"guards the dataset: {accountant.dataset}", highlight=False)
        console.print(
            f"accountant: {accountant.composition} ({_RULE_NOTES.get(accountant.composition, '')})",
            highlight=False,
        )
        console.print(f"spent: {accountant.spent}; remaining: {accountant.remaining}")
        _warn_weak_ledger(accountant.budget.epsilon)
        if plot is not None:
            console.print(f"chart of the budget over time written to {plot}", highlight=False)
    finally:
        accountant.close()


#: What ``dpkit budget`` says about a ledger's composition rule (``--accountant``).
_RULE_NOTES = {
    "basic": "the sum of the charges; valid for adaptively chosen queries",
    "zcdp": "zCDP: the sum of the charges' rho; valid for adaptively chosen queries",
    "rdp": "a Renyi-DP filter; valid for adaptively chosen queries",
    "pld": "privacy loss distributions; valid only for noise fixed in advance",
    "tightest": "the tightest of several theorems; valid only for queries fixed in advance",
}


def _warn_weak_ledger(epsilon: float) -> None:
    """``dpkit budget`` on a ledger whose total ε is above 10 says so (on stderr)."""
    from dpkit._cli_budget import weak_budget_message

    weak = weak_budget_message(
        epsilon,
        "this ledger's budget ε =",
        "A ledger's budget cannot be lowered: what it pays for is only weakly protected.",
    )
    if weak is not None:
        typer.secho(f"warning: {weak}", fg=typer.colors.YELLOW, err=True)


def _save_budget_plot(accountant: Any, plot: Path) -> None:
    from dpkit._cli_output import atomic_write
    from dpkit.accounting import plot_budget

    figure = plot_budget(accountant)  # an empty ledger says so here, before anything is printed
    atomic_write(plot, lambda p: figure.savefig(p, dpi=100, format=plot.suffix.lstrip(".").lower()))


@app.command(cls=QueryCommand)
@_friendly
@grouped(query=QUERY, source=SOURCE, dry_run=DRY_RUN, ledger=LEDGER, output=OUTPUT)
def query(
    table: Path = typer.Argument(..., help="A CSV or Parquet file.", exists=True, dir_okay=False),
    query: Any = None,
    source: Any = None,
    dry_run: Any = None,
    ledger: Any = None,
    output: Any = None,
) -> None:
    """Answer one private query about a table (DuckDB), with error bounds."""
    from dpkit.tables._cli import query_command

    code = query_command(table, query, source=source, ledger=ledger, **dry_run, **output)
    raise typer.Exit(code)


reproduce_app = typer.Typer(
    help="Reproduce the source documents' experiments.", no_args_is_help=True
)
app.add_typer(reproduce_app, name="reproduce")


@reproduce_app.command("regression-paper")
@_friendly
def reproduce_regression_paper(
    data: Path | None = typer.Option(
        None,
        "--data",
        help="california_housing.csv (default: ../shared/data/california_housing.csv).",
    ),
    out: Path | None = typer.Option(
        None, "--out", help="Folder for the table (Markdown, JSON) and figures."
    ),
    quick: bool = typer.Option(False, "--quick", help="A small, fast run (for a smoke test)."),
    epsilon: list[float] | None = typer.Option(None, "--epsilon", help="ε values (repeatable)."),
    folds: int = typer.Option(10, help="Cross-validation folds (the paper: 10, no shuffling)."),
    seed: int = typer.Option(0, help="Seed of the noise (reproducible; never publish)."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar."),
    public_data: bool = typer.Option(
        False, "--public-data", help="State that the data is public (the output is not DP)."
    ),
) -> None:
    """The regression-tree paper (Hoang & Thuc, 2020) (DP regression trees and forests): Table 3 and Figures 1-2, beside dpkit's methods."""
    from dpkit._cli_budget import require_public_data
    from dpkit.reproduce._cli import reproduce_regression_paper as run

    if data is not None or not quick:  # --quick alone runs on generated data
        require_public_data(public_data, "dpkit reproduce regression-paper")
    # With no --data the function looks for ../shared/data itself (or generates data with --quick).
    raise typer.Exit(run(data, out, quick, epsilon, folds, seed, progress))


survey_app = typer.Typer(
    help=(
        "Local-DP surveys: respondents randomise their own answers.\n\n"
        'The survey file (JSON) declares each question\'s "name", "kind" and "epsilon": '
        '"yes_no"; "one_of" with its answers under "categories" (a list of at least two); '
        '"number" with "bounds" (a list of two numbers, low and high). Example: '
        '{"questions": [{"name": "smokes", "kind": "yes_no", "epsilon": 1.0}, '
        '{"name": "region", "kind": "one_of", "epsilon": 1.0, "categories": ["north", "south"]}, '
        '{"name": "age", "kind": "number", "epsilon": 1.0, "bounds": [0, 100]}]}. '
        "See docs/local.md."
    ),
    no_args_is_help=True,
)
app.add_typer(survey_app, name="survey")


@survey_app.command("simulate")
@_friendly
def survey_simulate(
    spec: Path = typer.Argument(
        ...,
        help='The survey declaration (JSON; "categories" for one_of, "bounds" for number).',
        exists=True,
        dir_okay=False,
    ),
    n: int = typer.Option(10_000, "--n", help="Respondents to simulate."),
    out: Path = typer.Option(..., "--out", help="Where to write their reports (CSV)."),
    answers_out: Path | None = typer.Option(None, help="Also write the simulated true answers."),
    seed: int | None = typer.Option(None, help="Seed (reproducible simulation; never publish)."),
) -> None:
    """Simulate respondents and the reports their devices would send."""
    from dpkit._cli_output import check_output
    from dpkit.local._cli_survey import simulate_command

    check_output(out, "--out", None)
    check_output(answers_out, "--answers-out", None)
    simulate_command(spec, n, out, answers_out, seed)


@survey_app.command("estimate")
@_friendly
def survey_estimate(
    reports: Path = typer.Argument(
        ..., help="Collected reports (CSV).", exists=True, dir_okay=False
    ),
    spec: Path = typer.Argument(
        ...,
        help='The survey declaration (JSON; "categories" for one_of, "bounds" for number).',
        exists=True,
        dir_okay=False,
    ),
    level: float = typer.Option(0.95, help="Confidence level of the intervals."),
    plot: Path | None = typer.Option(None, help="Save a plot of the estimates (PNG, SVG, PDF)."),
    answers: Path | None = typer.Option(
        None, help="True answers to plot beside (simulations only)."
    ),
) -> None:
    """Estimate every question's shares or mean, with intervals."""
    from dpkit._cli_output import PLOT_SUFFIXES, check_output
    from dpkit.local._cli_survey import estimate_command

    check_output(plot, "--plot", PLOT_SUFFIXES)
    estimate_command(reports, spec, level, plot, answers)


location_app = typer.Typer(
    help="Location privacy: geo-indistinguishable reports and the course report's crowdsensing loop.",
    no_args_is_help=True,
)
app.add_typer(location_app, name="location")


@location_app.command("obfuscate")
@_friendly
def location_obfuscate(
    table: Path = typer.Argument(
        ..., help="A CSV file, one person's location per row.", exists=True, dir_okay=False
    ),
    out: Path = typer.Option(..., "--out", help="Where to write the reports (CSV)."),
    epsilon: float = typer.Option(
        ..., help="ε per km: places r km apart are ε·r-indistinguishable."
    ),
    area: tuple[float, float, float, float] = typer.Option(
        ..., help="Declared area LAT_MIN LON_MIN LAT_MAX LON_MAX (degrees); reports stay inside."
    ),
    lat: str = typer.Option("Latitude", help="The latitude column."),
    lon: str = typer.Option("Longitude", help="The longitude column."),
    keep: list[str] = typer.Option(
        [], "--keep", help="Columns to copy to the output (repeatable)."
    ),
    step: float | None = typer.Option(None, help="Lattice step in km (default 1/(100·ε))."),
    seed: int | None = typer.Option(
        None, help="Seed for reproducible noise (tests only; never publish)."
    ),
) -> None:
    """Replace each location by a planar-Laplace report (exact, on a lattice)."""
    from dpkit._cli_output import check_output
    from dpkit.local.location._cli import obfuscate_command

    check_output(out, "--out", None)  # before any location is read or perturbed
    obfuscate_command(
        table, out, epsilon=epsilon, area=area, lat=lat, lon=lon, keep=keep, step=step, seed=seed
    )


@location_app.command("demo")
@_friendly
def location_demo(
    data: Path | None = typer.Option(
        None, help="california_housing.csv (default: ../shared/data/california_housing.csv)."
    ),
    out: Path = typer.Option(
        Path("location_demo"), "--out", help="Folder for the figures and table."
    ),
    participants: int = typer.Option(400, help="Participants sensing in the present cycle."),
    seed: int = typer.Option(
        0, help="Seed of the split and the noise (reproducible; never publish)."
    ),
    public_data: bool = typer.Option(
        False, "--public-data", help="State that the data is public (the output is not DP)."
    ),
) -> None:
    """The course report's crowdsensing loop on California: true vs inferred maps, error and privacy vs ε."""
    from dpkit.local.location._cli import demo_command

    path = _public_data_path(public_data, "dpkit location demo", data, "california_housing.csv")
    demo_command(path, out, participants=participants, seed=seed)


walkthrough_app = typer.Typer(
    help="Walk-throughs of the source documents on real data.", no_args_is_help=True
)
app.add_typer(walkthrough_app, name="walkthrough")


def _default_data(name: str) -> Path | None:
    """../shared/data/NAME beside the checkout, when it exists (benchmarks read data by path)."""
    for base in (Path.cwd(), Path(__file__).resolve().parents[3]):
        candidate = base.parent / "shared" / "data" / name
        if candidate.exists():
            return candidate
    return None


def _public_data_path(public_data: bool, verb: str, data: Path | None, name: str) -> Path:
    """The data file of an evaluation verb, which runs only on data declared public."""
    from dpkit._cli_budget import require_public_data

    require_public_data(public_data, verb)
    path = data or _default_data(name)
    if path is None:
        raise dpkit.InvalidParameterError(f"{name} not found: pass --data PATH.")
    return path


@walkthrough_app.command("titanic")
@_friendly
def walkthrough_titanic(
    data: Path | None = typer.Option(
        None, help="titanic.csv (default: ../shared/data/titanic.csv)."
    ),
    epsilon: float = typer.Option(1.0, help="ε of the single tree whose rules are printed."),
    splits: int = typer.Option(20, help="Random train/test splits for the accuracy table."),
    seed: int | None = typer.Option(
        0, help="Seed of the splits and the noise (reproducible; never publish)."
    ),
    public_data: bool = typer.Option(
        False, "--public-data", help="State that the data is public (the output is not DP)."
    ),
) -> None:
    """The decision-tree course project's ID3-on-Titanic walk-through, then accuracy of every DP tree."""
    from dpkit.walkthroughs.titanic import run

    path = _public_data_path(public_data, "dpkit walkthrough titanic", data, "titanic.csv")
    run(path, epsilon=epsilon, splits=splits, rng=seed)


@app.command()
@_friendly
def serve(
    config: Path | None = typer.Option(
        None, "--config", help="The service's configuration file (TOML; see docs/service.md)."
    ),
    demo: bool = typer.Option(False, "--demo", help="Serve the demo patients table."),
    directory: Path = typer.Option(
        Path(".dpkit-demo"), "--dir", help="Where --demo keeps its data, store and keys."
    ),
    host: str | None = typer.Option(None, help="Listen address (default: the config's)."),
    port: int | None = typer.Option(None, help="Port (default: the config's, 8000)."),
) -> None:
    """Run the query service: analysts query over HTTP and never see rows."""
    from dpkit.service._cli import serve as run

    run(config, demo, directory, host, port)


def _service_apps() -> None:
    from dpkit.service._cli import admin_app, remote_app

    app.add_typer(remote_app, name="remote")
    app.add_typer(admin_app, name="admin")


_service_apps()


def main() -> None:
    """Entry point of the ``dpkit`` console script."""
    app()
