"""Plain functions behind the ``dpkit reproduce`` CLI commands (wired in ``dpkit.cli``)."""

from __future__ import annotations

from pathlib import Path

from dpkit.errors import InvalidParameterError


def reproduce_regression_paper(
    data: Path | None,
    out: Path | None = None,
    quick: bool = False,
    epsilons: list[float] | None = None,
    folds: int = 10,
    seed: int = 0,
    progress: bool = True,
) -> int:
    """Reproduce the regression-tree paper's Table 3 and Figures 1-2; returns an exit code.

    ``data``: the California Housing CSV (default: ``../shared/data/
    california_housing.csv`` beside the repository, when present); with
    ``quick`` and no data, a small generated dataset. ``out``: a directory for
    the Markdown table, JSON results and the two PNG figures.
    """
    from dpkit.reproduce import regression_paper

    if data is None and not quick:
        data = regression_paper.default_data_path()
        if data is None:
            raise InvalidParameterError(
                "no data: pass --data PATH to california_housing.csv (or --quick for a generated dataset)."
            )
    if data is not None and not Path(data).exists():
        raise InvalidParameterError(f"--data {data} does not exist.")
    kwargs: dict[str, object] = {"folds": folds, "rng": seed}
    if epsilons:
        kwargs["epsilons"] = tuple(float(e) for e in epsilons)
    regression_paper.main(data, out, quick=quick, progress=progress, **kwargs)
    return 0
