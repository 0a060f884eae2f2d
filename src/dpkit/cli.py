"""The ``dpkit`` command line."""

from __future__ import annotations

from pathlib import Path

import typer

import dpkit
from dpkit._cli_friendly import friendly as _friendly

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


@app.command()
@_friendly
def histogram(
    table: Path = typer.Argument(..., help="A CSV file.", exists=True, dir_okay=False),
    column: str = typer.Argument(..., help="The numeric column to histogram."),
    method: str = typer.Option(
        "structure-first",
        help="laplace | hierarchical | noise-first | structure-first | hb | ahp | dawa | auto",
    ),
    epsilon: float = typer.Option(1.0, help="Privacy budget of this release."),
    bounds: tuple[float, float] | None = typer.Option(
        None, help="Public range LO HI of the unit bins."
    ),
    units: int | None = typer.Option(None, help="Number of unit bins within --bounds."),
    width: float | None = typer.Option(None, help="Width of a unit bin within --bounds."),
    edges: str | None = typer.Option(None, help="Explicit public unit-bin edges, comma-separated."),
    n_bins: int | None = typer.Option(
        None, help="Number of merged bins k (NoiseFirst/StructureFirst)."
    ),
    max_count: float | None = typer.Option(
        None,
        help="Public upper bound F on a unit count (StructureFirst); for auto, on the rows.",
    ),
    workload: str = typer.Option(
        "ranges", help="Queries to serve (hb, dawa, auto): ranges | prefixes | units."
    ),
    statistic: str = typer.Option("mean", help="mean (SSE) or median (SAE) bins."),
    branching: int | None = typer.Option(None, help="Branching factor (hierarchical)."),
    selection: str = typer.Option("paper", help="NoiseFirst k rule: paper | penalised."),
    sampler: str = typer.Option("paper", help="StructureFirst sampler: paper | joint."),
    plot: Path | None = typer.Option(None, help="Save a picture with error bars (PNG, SVG, PDF)."),
    seed: int | None = typer.Option(
        None, help="Seed for reproducible noise (tests only; never publish)."
    ),
    ledger: Path | None = typer.Option(
        None, help="Ledger that records spending (default: the file's own, see docs)."
    ),
    budget: float | None = typer.Option(
        None, help="Total ε of this dataset, given once to create its ledger."
    ),
    out_file: Path | None = typer.Option(
        None, "--out", help="Also save the whole release (every bin and field) as JSON."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the whole release as JSON."),
    new_ledger: bool = typer.Option(
        False,
        "--new-ledger",
        help="Owner only: start a second budget (--ledger NEW --budget E) for data that already "
        "has a ledger; its total privacy loss becomes the sum. See docs/accounting.md.",
    ),
) -> None:
    """Publish a DP histogram of a CSV column over public bins (paid from the file's ledger)."""
    from dpkit.histograms._cli import histogram_command

    parsed_edges = None
    if edges is not None:
        try:
            parsed_edges = [float(x) for x in edges.split(",") if x.strip()]
        except ValueError:
            raise dpkit.InvalidParameterError(
                "--edges must be comma-separated numbers, e.g. 0,10,20,40."
            ) from None
    histogram_command(
        table,
        column,
        method,
        epsilon,
        bounds=bounds,
        units=units,
        width=width,
        edges=parsed_edges,
        n_bins=n_bins,
        max_count=max_count,
        statistic=statistic,
        branching=branching,
        selection=selection,
        sampler=sampler,
        workload=workload,
        plot=plot,
        seed=seed,
        ledger=ledger,
        budget=budget,
        out_file=out_file,
        as_json=as_json,
        new_ledger=new_ledger,
    )


@app.command()
@_friendly
def histogram2d(
    table: Path = typer.Argument(..., help="A CSV file.", exists=True, dir_okay=False),
    x: str = typer.Argument(..., help="The numeric column on the horizontal axis."),
    y: str = typer.Argument(..., help="The numeric column on the vertical axis."),
    method: str = typer.Option("auto2d", help="auto2d | agrid | ugrid | dawa2d | laplace2d"),
    epsilon: float = typer.Option(1.0, help="Privacy budget of this release."),
    x_bounds: tuple[float, float] | None = typer.Option(None, help="Public range LO HI of x."),
    y_bounds: tuple[float, float] | None = typer.Option(None, help="Public range LO HI of y."),
    units: tuple[int, int] = typer.Option((128, 128), help="Unit cells NX NY within the bounds."),
    n_records: float | None = typer.Option(
        None, help="Public number of rows (auto2d, agrid, ugrid); else 5% of ε buys a count."
    ),
    plot: Path | None = typer.Option(None, help="Save a heat map (PNG, SVG, PDF)."),
    seed: int | None = typer.Option(
        None, help="Seed for reproducible noise (tests only; never publish)."
    ),
    ledger: Path | None = typer.Option(
        None, help="Ledger that records spending (default: the file's own, see docs)."
    ),
    budget: float | None = typer.Option(
        None, help="Total ε of this dataset, given once to create its ledger."
    ),
    out_file: Path | None = typer.Option(
        None, "--out", help="Also save the whole release (every bin and field) as JSON."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the whole release as JSON."),
    new_ledger: bool = typer.Option(
        False,
        "--new-ledger",
        help="Owner only: start a second budget (--ledger NEW --budget E) for data that already "
        "has a ledger; its total privacy loss becomes the sum. See docs/accounting.md.",
    ),
) -> None:
    """Publish a DP 2-D histogram (a map) of two CSV columns over public cells."""
    from dpkit.histograms._cli_grid import histogram2d_command

    histogram2d_command(
        table,
        x,
        y,
        method,
        epsilon,
        x_bounds=x_bounds,
        y_bounds=y_bounds,
        units=units,
        n_records=n_records,
        plot=plot,
        seed=seed,
        ledger=ledger,
        budget=budget,
        out_file=out_file,
        as_json=as_json,
        new_ledger=new_ledger,
    )


@app.command()
@_friendly
def budget(
    ledger: Path = typer.Argument(..., help="A dpkit ledger file.", exists=True, dir_okay=False),
) -> None:
    """Show a ledger's budget, what was spent on what, and what is left."""
    from rich.console import Console
    from rich.table import Table

    from dpkit.accounting import Accountant

    accountant = Accountant.from_ledger(ledger)
    try:
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
        console.print(f"spent: {accountant.spent}; remaining: {accountant.remaining}")
    finally:
        accountant.close()


@app.command()
@_friendly
def query(
    table: Path = typer.Argument(..., help="A CSV or Parquet file.", exists=True, dir_okay=False),
    query: str = typer.Argument(
        ..., help="count, sum, mean, variance, std, quantile, median, min, max, mode or histogram."
    ),
    column: str | None = typer.Argument(None, help="The column (optional for count)."),
    epsilon: float = typer.Option(..., help="Privacy budget this query spends."),
    bounds: tuple[float, float] | None = typer.Option(None, help="Public bounds: --bounds LO HI."),
    schema: Path | None = typer.Option(None, help="Schema file (.json, .toml, .yaml)."),
    group_by: list[str] | None = typer.Option(
        None, "--group-by", help="Group-by column (repeatable)."
    ),
    keys: list[str] | None = typer.Option(
        None, "--keys", help="A public key (repeatable; 'A|x' for two columns), or 'private'."
    ),
    where: list[str] | None = typer.Option(
        None, "--where", help="Filter: district=A, age>=18, region=N,S (repeatable)."
    ),
    q: float | None = typer.Option(None, "--q", help="Quantile for quantile (or min/max)."),
    bins: int | None = typer.Option(None, help="Equal-width histogram bins over --bounds."),
    domain: list[str] | None = typer.Option(None, "--domain", help="Public category (repeatable)."),
    delta: float = typer.Option(0.0, help="δ this query spends (only with --keys private)."),
    budget: float | None = typer.Option(
        None, help="Total ε of this dataset, given once to create its ledger."
    ),
    budget_delta: float | None = typer.Option(
        None, "--budget-delta", help="Total δ of this dataset (with --budget, when creating)."
    ),
    ledger: Path | None = typer.Option(
        None, help="Ledger that records spending (default: the file's own, see docs)."
    ),
    types: list[str] | None = typer.Option(
        None, "--type", help="Declared column type COLUMN=TYPE (repeatable), e.g. age=DOUBLE."
    ),
    infer_types: bool = typer.Option(
        False, "--infer-types", help="Take undeclared column types from the file (warns)."
    ),
    privacy_unit: str | None = typer.Option(None, "--privacy-unit", help="Person-id column."),
    max_contributions: int = typer.Option(1, "--max-contributions", help="Rows kept per person."),
    level: float = typer.Option(0.95, help="Confidence level of the intervals."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    out_file: Path | None = typer.Option(
        None, "--out", help="Also save the whole release as JSON."
    ),
    new_ledger: bool = typer.Option(
        False,
        "--new-ledger",
        help="Owner only: start a second budget (--ledger NEW --budget E) for data that already "
        "has a ledger; its total privacy loss becomes the sum. See docs/accounting.md.",
    ),
) -> None:
    """Answer one private query about a table (DuckDB), with error bounds."""
    from dpkit.tables._cli import query_command

    raise typer.Exit(
        query_command(
            table, query, column, epsilon=epsilon, bounds=bounds, schema=schema, group_by=group_by,
            keys=keys, where=where, q=q, bins=bins, domain=domain, delta=delta, budget=budget,
            budget_delta=budget_delta, ledger=ledger, privacy_unit=privacy_unit,
            max_contributions=max_contributions, level=level, as_json=as_json, types=types,
            infer_types=infer_types, out_file=out_file, new_ledger=new_ledger,
        )
    )  # fmt: skip


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
    help="Local-DP surveys: respondents randomise their own answers.", no_args_is_help=True
)
app.add_typer(survey_app, name="survey")


@survey_app.command("simulate")
@_friendly
def survey_simulate(
    spec: Path = typer.Argument(
        ..., help="The survey declaration (JSON).", exists=True, dir_okay=False
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
        ..., help="The survey declaration (JSON).", exists=True, dir_okay=False
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
    run(path, epsilon=epsilon, splits=splits, seed=seed)


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
