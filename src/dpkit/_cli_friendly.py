"""How every ``dpkit`` command reports dpkit's own errors: one clear line, exit code 2."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

import typer

from dpkit.errors import DPKitError

F = TypeVar("F", bound=Callable[..., Any])


def friendly(func: F) -> F:
    """Print dpkit's own errors as one clear line (exit code 2), not a traceback."""

    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except DPKitError as err:
            typer.secho(f"error: {err}", fg=typer.colors.RED, err=True)
            raise typer.Exit(code=2) from None

    return wrapper  # type: ignore[return-value]
