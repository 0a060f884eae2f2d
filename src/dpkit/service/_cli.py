"""``dpkit serve``, ``dpkit remote ...`` (analysts) and ``dpkit admin ...`` (the data owner).

Keys are read from ``--key`` or, better (shell history keeps command lines),
from the environment: ``DPKIT_KEY`` for analysts, ``DPKIT_ADMIN_KEY`` for the
admin. Nothing here reads data: ``remote`` sends queries to the service, which
holds the rows.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from dpkit._cli_friendly import friendly
from dpkit._cli_options import grouped
from dpkit._cli_query import DRY_RUN, QUERY, QueryCommand
from dpkit.errors import InvalidParameterError

__all__ = ["admin_app", "remote_app", "serve"]

remote_app = typer.Typer(
    help="Query a dpkit service as an analyst (key from DPKIT_KEY or --key).",
    no_args_is_help=True,
)
admin_app = typer.Typer(
    help="Manage a dpkit service: analysts, keys, grants, audit (key from DPKIT_ADMIN_KEY).",
    no_args_is_help=True,
)

_URL = typer.Option("http://127.0.0.1:8000", "--url", envvar="DPKIT_URL", help="The service.")
_KEY = typer.Option(None, "--key", envvar="DPKIT_KEY", help="Your key (better: DPKIT_KEY).")
_ADMIN = typer.Option(
    None, "--key", envvar="DPKIT_ADMIN_KEY", help="The admin key (better: DPKIT_ADMIN_KEY)."
)


def serve(
    config: Path | None, demo: bool, directory: Path, host: str | None, port: int | None
) -> None:
    """Start the service (Uvicorn) from a config file, or on the demo data."""
    import uvicorn

    from dpkit.service.app import KEEP_ALIVE_SECONDS, create_app
    from dpkit.service.config import load_config

    console = Console(stderr=True)
    if demo == (config is not None):
        raise InvalidParameterError("give either --config FILE or --demo.")
    if demo:
        from dpkit.service.demo import build_demo

        cfg, keys = build_demo(directory)
    else:
        assert config is not None
        cfg, keys = load_config(config), {}
    app = create_app(cfg)
    if demo:
        # Only keys that still work: a revoked or rotated key stays in keys.json.
        store = app.state.store
        console.print(f"[bold]demo service[/] in {directory}/ (keys in {directory}/keys.json):")
        for who, key in keys.items():
            if who == "admin" or store.authenticate(key) is not None:
                console.print(f"  {who:6} {key}")
            else:
                console.print(f"  {who:6} (key revoked or rotated: not shown)")
    where_host, where_port = host or cfg.host, cfg.port if port is None else port
    console.print(f"open http://{where_host}:{where_port}/ (API reference at /docs)")
    uvicorn.run(
        app,
        host=where_host,
        port=where_port,
        log_level="warning",
        timeout_keep_alive=KEEP_ALIVE_SECONDS,
    )


def _client(url: str, key: str | None) -> Any:
    from dpkit.client import Client

    if not key:
        raise InvalidParameterError("give your key with DPKIT_KEY=... (or --key).")
    return Client(url, key)


def _admin(url: str, key: str | None) -> Any:
    from dpkit.client import AdminClient

    if not key:
        raise InvalidParameterError("give the admin key with DPKIT_ADMIN_KEY=... (or --key).")
    return AdminClient(url, key)


def _print(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2, default=str))


@remote_app.command("datasets")
@friendly
def remote_datasets(url: str = _URL, key: str | None = _KEY) -> None:
    """The datasets your key may query, with their public schema and your budget."""
    from dpkit.client import Client

    client: Client = _client(url, key)
    _print([client.dataset(n).info() for n in client.datasets()])


@remote_app.command("query", cls=QueryCommand)
@friendly
@grouped(query=QUERY, dry_run=DRY_RUN)
def remote_query(
    dataset: str = typer.Argument(..., help="The dataset's name."),
    query: Any = None,
    twin: bool = typer.Option(False, "--twin", help="Ask the synthetic twin (free, not real)."),
    dry_run: Any = None,
    url: str = _URL,
    key: str | None = _KEY,
) -> None:
    """One private query (the options of `dpkit query`); prints the release as JSON."""
    from dpkit._cli_query import QueryOptions, kinds_of_types
    from dpkit.client import Client
    from dpkit.service.encoding import budget_json, release_json

    options: QueryOptions = query
    options.check()  # before any request
    client: Client = _client(url, key)
    handle = client.dataset(dataset)
    kinds = None
    if options.needs_kinds:  # values are read by the columns' public types
        columns = handle.info()["columns"]
        kinds = kinds_of_types({c: v["type"] for c, v in columns.items()})
    spec = options.spec(kinds)
    if dry_run["cost"]:
        _print(handle.cost(spec))
        return
    release = (handle.twin if twin else handle).answer(spec)
    _print(
        {
            "twin": twin,
            "release": release_json(release),
            "remaining": budget_json(release.remaining),
        }
    )


@remote_app.command("budget")
@friendly
def remote_budget(url: str = _URL, key: str | None = _KEY) -> None:
    """What is left of each of your grants."""
    from dpkit.client import Client

    client: Client = _client(url, key)
    table = Table("dataset", "ε left", "δ left")
    for name, left in client.budget().items():
        table.add_row(name, f"{left.epsilon:g}", f"{left.delta:g}")
    Console().print(table)


@remote_app.command("history")
@friendly
def remote_history(
    dataset: str | None = typer.Option(None, help="Only this dataset."),
    limit: int = typer.Option(20, help="How many, newest first."),
    url: str = _URL,
    key: str | None = _KEY,
) -> None:
    """Your own queries, newest first."""
    from dpkit.client import Client

    client: Client = _client(url, key)
    _print(client.history(dataset, limit))


@admin_app.command("hash-key")
@friendly
def admin_hash_key(
    key: str | None = typer.Argument(None, help="A key to hash (default: make a new one)."),
) -> None:
    """Make a key and print it with the hash to put in the config (admin_key_hash, key_hash)."""
    from dpkit.service.store import hash_key, make_key

    new = key or make_key()
    if key is None:
        typer.echo(f"key:  {new}   (shown once; give it to its holder)")
    typer.echo(f"hash: {hash_key(new)}")


@admin_app.command("analysts")
@friendly
def admin_analysts(url: str = _URL, key: str | None = _ADMIN) -> None:
    """Analysts, whether their key is active, and their grants."""
    _print(_admin(url, key).analysts())


@admin_app.command("add")
@friendly
def admin_add(name: str, url: str = _URL, key: str | None = _ADMIN) -> None:
    """Add an analyst; prints their key (shown once)."""
    typer.echo(_admin(url, key).add_analyst(name))


@admin_app.command("rotate")
@friendly
def admin_rotate(name: str, url: str = _URL, key: str | None = _ADMIN) -> None:
    """A new key for an analyst; the old one stops working."""
    typer.echo(_admin(url, key).rotate(name))


@admin_app.command("revoke")
@friendly
def admin_revoke(name: str, url: str = _URL, key: str | None = _ADMIN) -> None:
    """Revoke an analyst's access for good."""
    _admin(url, key).revoke(name)
    typer.echo(f"revoked {name}")


@admin_app.command("grant")
@friendly
def admin_grant(
    analyst: str,
    dataset: str,
    epsilon: float = typer.Option(..., help="ε to add to the analyst's budget."),
    delta: float = typer.Option(0.0, help="δ to add."),
    accountant: str | None = typer.Option(
        None,
        help="How the grant's charges add up: basic (default), zcdp or rdp; fixed when the "
        "grant is created.",
    ),
    noise: str | None = typer.Option(
        None,
        help="The noise of the grant's answers: laplace (default), gaussian (needs zcdp or "
        "rdp) or auto; sets it for an existing grant too.",
    ),
    url: str = _URL,
    key: str | None = _ADMIN,
) -> None:
    """Add budget to an analyst's grant on a dataset (budgets only grow)."""
    from dpkit.service.store.grants import weak_grant_warning

    total = _admin(url, key).grant(
        analyst, dataset, epsilon, delta, accountant=accountant, noise=noise
    )
    typer.echo(f"{analyst} on {dataset}: {total}")
    weak = weak_grant_warning(total)
    if weak is not None:
        typer.secho(f"warning: {weak}", fg=typer.colors.YELLOW, err=True)


@admin_app.command("audit")
@friendly
def admin_audit(
    limit: int = typer.Option(50, help="How many events, newest first."),
    url: str = _URL,
    key: str | None = _ADMIN,
) -> None:
    """The audit log."""
    _print(_admin(url, key).audit(limit))
