"""The ``dpkit`` command line."""

from __future__ import annotations

import typer

import dpkit

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


def main() -> None:
    """Entry point of the ``dpkit`` console script."""
    app()
