"""Where the command line's releases go: checked before the charge, saved in full after it.

The order is the guarantee's structure. Every output a verb will write
(``--out FILE.json``, ``--plot FILE.png``, a CSV of reports) is checked by
:func:`check_output` *before* anything is charged or read: its kind (suffix),
that its directory exists and that a file can be created there (a probe file is
made and removed). After the charge, :func:`deliver` prints the release and
writes the files; writing is atomic (a temporary file in the same directory,
then a rename), and if the disk fails anyway the release is printed in full as
JSON on stdout, the failure is reported on stderr and the exit code is 3
(released, not saved) — a paid release is never lost.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from dpkit.errors import InvalidParameterError

__all__ = [
    "JSON_SUFFIXES",
    "NOT_SAVED",
    "PLOT_SUFFIXES",
    "atomic_write",
    "check_output",
    "deliver",
    "json_safe",
]

#: What ``--plot`` can write (matplotlib, by suffix).
PLOT_SUFFIXES = (".png", ".svg", ".pdf")
JSON_SUFFIXES = (".json",)
#: Exit code of a verb whose release was made (and printed) but could not be saved.
NOT_SAVED = 3


def check_output(path: Path | None, option: str, suffixes: tuple[str, ...] | None) -> None:
    """Refuse, before any charge, an output that cannot be written (public input only)."""
    if path is None:
        return
    path = Path(path)
    kinds = ", ".join(suffixes) if suffixes else ""
    if suffixes is not None and path.suffix.lower() not in suffixes:
        raise InvalidParameterError(
            f"{option} {str(path)!r} must end in {kinds} (the suffix chooses the format)."
        )
    if path.is_dir():
        raise InvalidParameterError(f"{option} {str(path)!r} is a directory; give a file name.")
    directory = path.parent if str(path.parent) else Path(".")
    if not directory.is_dir():
        raise InvalidParameterError(
            f"{option}: the directory {str(directory)!r} does not exist; create it first."
        )
    if path.exists() and not os.access(path, os.W_OK):
        raise InvalidParameterError(f"{option} {str(path)!r} exists and is not writable.")
    probe = directory / f".{path.name}.{uuid.uuid4().hex}.dpkit-check"
    try:
        open(probe, "x").close()
    except OSError as err:
        raise InvalidParameterError(
            f"{option}: cannot create a file in {str(directory)!r} ({err.strerror or err}); "
            "choose a writable directory."
        ) from None
    with contextlib.suppress(OSError):
        probe.unlink()


def json_safe(x: Any) -> Any:
    """Arrays, NumPy scalars and tuples as JSON values; non-finite floats as null."""
    if isinstance(x, np.ndarray):
        return [json_safe(v) for v in x.tolist()]
    if isinstance(x, np.generic):
        return json_safe(x.item())
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, list | tuple):
        return [json_safe(v) for v in x]
    if isinstance(x, dict):
        return {str(k): json_safe(v) for k, v in x.items()}
    if x is None or isinstance(x, bool | int | float | str):
        return x
    return str(x)


def json_text(payload: dict[str, Any]) -> str:
    """The release as JSON text (strict: no NaN or infinity)."""
    return json.dumps(json_safe(payload), indent=2, allow_nan=False)


def atomic_write(path: Path, write: Callable[[Path], object]) -> None:
    """Write through a temporary file in the same directory, then rename into place."""
    tmp = path.with_name(f".{path.stem}.{uuid.uuid4().hex}{path.suffix}")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()


def _print_json(console: Any, text: str) -> None:
    # soft_wrap: never break a long line (the JSON stays parseable whatever the width)
    console.print(text, markup=False, highlight=False, soft_wrap=True)


def deliver(
    payload: dict[str, Any],
    *,
    console: Any,
    render: Callable[[], Any],
    out: Path | None = None,
    as_json: bool = False,
    plot: Path | None = None,
    make_figure: Callable[[], Any] | None = None,
) -> int:
    """Show and save a paid release; never lose it. Returns 0, or :data:`NOT_SAVED`.

    ``payload`` holds every field of the release (JSON-ready through
    :func:`json_safe`). ``as_json`` prints it instead of ``render()``'s table;
    ``out`` and ``plot`` were checked by :func:`check_output` before the charge.
    """
    printed_json = False
    if as_json:
        _print_json(console, json_text(payload))
        printed_json = True
    failures: list[str] = []
    if not as_json:
        try:
            console.print(render())
        except Exception as err:  # formatting public values; never lose the release over it
            failures.append(f"cannot show the table ({type(err).__name__})")
    if out is not None:
        text = json_text(payload)
        try:
            atomic_write(Path(out), lambda p: p.write_text(text + "\n", encoding="utf-8"))
            if not as_json:
                console.print(f"release saved to {out}", highlight=False)
        except OSError as err:
            failures.append(f"cannot write {out} ({err.strerror or err})")
    if plot is not None and make_figure is not None:
        try:
            from dpkit.histograms.plot import save

            figure = make_figure()
            atomic_write(Path(plot), lambda p: save(figure, p))
            if not as_json:
                console.print(f"plot saved to {plot}", highlight=False)
        except Exception as err:  # the release is paid for: report, never lose it
            failures.append(f"cannot save the plot {plot} ({type(err).__name__})")
    if not failures:
        return 0
    for failure in failures:
        sys.stderr.write(f"error: {failure}; the release was made and is printed in full.\n")
    if not printed_json:
        _print_json(console, json_text(payload))
    return NOT_SAVED
