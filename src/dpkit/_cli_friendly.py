"""How every ``dpkit`` command reports dpkit's own errors: one clear line, exit code 2."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

import typer

from dpkit.errors import DPKitError

F = TypeVar("F", bound=Callable[..., Any])


def friendly(func: F) -> F:
    """Print dpkit's own errors as one clear line in CLI words (exit code 2), not a traceback.

    Warnings are printed as one line too, with no source path or code line.
    """

    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from dpkit._cli_options import cli_warnings, cli_words

        try:
            with cli_warnings():
                return func(*args, **kwargs)
        except DPKitError as err:
            typer.secho(f"error: {cli_words(str(err))}", fg=typer.colors.RED, err=True)
            raise typer.Exit(code=2) from None

    return wrapper  # type: ignore[return-value]
