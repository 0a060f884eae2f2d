"""DP regression trees: accuracy against peers under the regression-tree paper's protocol, and speed.

Run: ``.venv/bin/python benchmarks/trees_regression.py [--data PATH] [--quick] [--skip-ebm]``

Accuracy (same folds, same run): California Housing, all columns min-max
scaled to [0, 1], 10-fold CV without shuffling, MAE mean (std). Methods:
dpkit's default ``DPRandomForestRegressor`` and ``DPDecisionTreeRegressor``;
DP-EBM (``interpret-core``'s ``DPExplainableBoostingRegressor``, (epsilon,
delta = 1e-6)-DP, privacy bounds [0, 1]; a benchmark-only dependency:
``.venv/bin/pip install interpret-core``); non-private scikit-learn tree,
random forest and histogram gradient boosting (absolute error) as the limit.

Speed: fit and predict times against scikit-learn on the same data
(California, and a generated 50,000 x 14 table at depth 6), median of 3.
Results go to ``benchmarks/results/trees_regression.{md,json}``.
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from dpkit.reproduce.regression_paper import (
    PAPER_BEST_DP,
    PAPER_EPSILONS,
    default_data_path,
    load_scaled,
)
from dpkit.trees import (
    DPDecisionTreeRegressor,
    DPGradientBoostingRegressor,
    DPRandomForestRegressor,
)

UNIT: dict[str, Any] = {"bounds": (0.0, 1.0), "target_bounds": (0.0, 1.0)}
RESULTS = Path(__file__).resolve().parent / "results"


def cross_validate(
    fit_predict: Callable[..., Any], X: np.ndarray, y: np.ndarray, folds: int, seed: int = 0
) -> tuple[float, float, float]:
    """MAE mean, std over contiguous folds, and mean fit+predict seconds."""
    maes, secs = [], []
    for k, test in enumerate(np.array_split(np.arange(len(y)), folds)):
        train = np.setdiff1d(np.arange(len(y)), test, assume_unique=True)
        start = time.perf_counter()
        pred = fit_predict(X[train], y[train], X[test], seed * 1000 + k)
        secs.append(time.perf_counter() - start)
        maes.append(float(np.mean(np.abs(pred - y[test]))))
    return float(np.mean(maes)), float(np.std(maes)), float(np.mean(secs))


def _ebm(eps: float) -> Callable[..., Any] | None:
    try:
        from interpret.privacy import DPExplainableBoostingRegressor
    except ImportError:
        return None

    def fit(Xtr: Any, ytr: Any, Xte: Any, seed: int) -> Any:
        model = DPExplainableBoostingRegressor(
            epsilon=eps,
            delta=1e-6,
            privacy_bounds=np.array([[0.0, 1.0]] * Xtr.shape[1]),
            privacy_target_min=0.0,
            privacy_target_max=1.0,
            n_jobs=1,
            random_state=seed,
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model.fit(Xtr, ytr)
        return np.clip(model.predict(Xte), 0.0, 1.0)

    return fit


def accuracy(
    X: np.ndarray, y: np.ndarray, epsilons: tuple[float, ...], folds: int, with_ebm: bool
) -> dict[str, Any]:
    from sklearn.ensemble import HistGradientBoostingRegressor, RandomForestRegressor
    from sklearn.tree import DecisionTreeRegressor

    out: dict[str, Any] = {"dp": {}, "non_private": {}}
    methods: dict[str, Callable[[float], Callable[..., Any] | None]] = {
        "dpkit DPGradientBoostingRegressor (default, delta=1e-6)": lambda e: (
            lambda a, b, c, s: (
                DPGradientBoostingRegressor(epsilon=e, random_state=s, **UNIT).fit(a, b).predict(c)
            )
        ),
        "dpkit DPGradientBoostingRegressor (delta=0)": lambda e: (
            lambda a, b, c, s: (
                DPGradientBoostingRegressor(epsilon=e, delta=0.0, random_state=s, **UNIT)
                .fit(a, b)
                .predict(c)
            )
        ),
        "dpkit DPRandomForestRegressor (default)": lambda e: (
            lambda a, b, c, s: (
                DPRandomForestRegressor(epsilon=e, random_state=s, **UNIT).fit(a, b).predict(c)
            )
        ),
        "dpkit DPDecisionTreeRegressor (default)": lambda e: (
            lambda a, b, c, s: (
                DPDecisionTreeRegressor(epsilon=e, random_state=s, **UNIT).fit(a, b).predict(c)
            )
        ),
    }
    if with_ebm:
        methods["DP-EBM (interpret-core, delta=1e-6)"] = _ebm
    for name, make in methods.items():
        for eps in epsilons:
            fit = make(eps)
            if fit is None:
                out["dp"][name] = "not installed"
                break
            out["dp"].setdefault(name, {})[eps] = cross_validate(fit, X, y, folds)
            print(
                f"{name:45s} eps={eps:<5g} MAE {out['dp'][name][eps][0]:.4f} ({out['dp'][name][eps][1]:.4f})",
                flush=True,
            )
    limits: dict[str, Callable[..., Any]] = {
        "sklearn DecisionTreeRegressor()": lambda a, b, c, s: (
            DecisionTreeRegressor(random_state=s).fit(a, b).predict(c)
        ),
        "sklearn RandomForestRegressor(100)": lambda a, b, c, s: (
            RandomForestRegressor(n_estimators=100, n_jobs=1, random_state=s).fit(a, b).predict(c)
        ),
        "sklearn HistGradientBoosting(absolute_error)": lambda a, b, c, s: (
            HistGradientBoostingRegressor(loss="absolute_error", random_state=s)
            .fit(a, b)
            .predict(c)
        ),
    }
    for name, fit in limits.items():
        out["non_private"][name] = cross_validate(fit, X, y, folds)
        print(f"{name:45s} MAE {out['non_private'][name][0]:.4f}", flush=True)
    return out


def _median_time(fn: Callable[[], Any], repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def speed(X_cal: np.ndarray, y_cal: np.ndarray, quick: bool) -> dict[str, float]:
    from sklearn.ensemble import HistGradientBoostingRegressor, RandomForestRegressor
    from sklearn.tree import DecisionTreeRegressor

    rng = np.random.default_rng(0)
    n_big = 5000 if quick else 50_000
    Xb = rng.random((n_big, 14))
    yb = np.clip(
        0.5 * np.sin(3 * Xb[:, 0]) + 0.3 * Xb[:, 1] * Xb[:, 2] + 0.1 * rng.normal(size=n_big), 0, 1
    )
    n_pred = 20_000 if quick else 1_000_000
    Xp = rng.random((n_pred, 14))
    t: dict[str, float] = {}
    t["california: sklearn DecisionTreeRegressor(max_depth=6) fit"] = _median_time(
        lambda: DecisionTreeRegressor(max_depth=6).fit(X_cal, y_cal)
    )
    t["california: dpkit DPDecisionTreeRegressor(max_depth=6) fit"] = _median_time(
        lambda: DPDecisionTreeRegressor(epsilon=1.0, max_depth=6, **UNIT).fit(X_cal, y_cal)
    )
    t["california: sklearn DecisionTreeRegressor() fit"] = _median_time(
        lambda: DecisionTreeRegressor().fit(X_cal, y_cal)
    )
    t["california: dpkit DPDecisionTreeRegressor() fit (eps=1)"] = _median_time(
        lambda: DPDecisionTreeRegressor(epsilon=1.0, **UNIT).fit(X_cal, y_cal)
    )
    for eps in (1.0, 64.0):
        t[f"california: dpkit DPRandomForestRegressor() fit (eps={eps:g})"] = _median_time(
            lambda eps=eps: DPRandomForestRegressor(epsilon=eps, **UNIT).fit(X_cal, y_cal)
        )
    t["california: sklearn RandomForestRegressor(100, n_jobs=1) fit"] = _median_time(
        lambda: RandomForestRegressor(n_estimators=100, n_jobs=1).fit(X_cal, y_cal), repeat=1
    )
    t["california: sklearn HistGradientBoosting(absolute_error) fit"] = _median_time(
        lambda: HistGradientBoostingRegressor(loss="absolute_error").fit(X_cal, y_cal), repeat=1
    )
    tag = f"{n_big}x14"
    t[f"{tag}: sklearn DecisionTreeRegressor(max_depth=6) fit"] = _median_time(
        lambda: DecisionTreeRegressor(max_depth=6).fit(Xb, yb)
    )
    tree = DPDecisionTreeRegressor(epsilon=1.0, max_depth=6, **UNIT)
    t[f"{tag}: dpkit DPDecisionTreeRegressor(max_depth=6) fit"] = _median_time(
        lambda: tree.fit(Xb, yb)
    )
    part = DPRandomForestRegressor(
        epsilon=1.0, algorithm="greedy", n_estimators=100, max_depth=6, **UNIT
    )
    t[f"{tag}: dpkit 100-tree partition forest (depth 6) fit"] = _median_time(
        lambda: part.fit(Xb, yb)
    )
    boost = DPRandomForestRegressor(
        epsilon=1.0, n_estimators=100, max_depth=6, learning_rate=0.1, **UNIT
    )
    t[f"{tag}: dpkit 100-round boosting (depth 6) fit"] = _median_time(
        lambda: boost.fit(Xb, yb), repeat=1
    )
    gbr = DPGradientBoostingRegressor(epsilon=1.0, max_iter=100, **UNIT)
    t[f"{tag}: dpkit DPGradientBoostingRegressor(max_iter=100) fit"] = _median_time(
        lambda: gbr.fit(Xb, yb), repeat=1
    )
    t[f"{tag}: sklearn RandomForestRegressor(100, max_depth=6, n_jobs=1) fit"] = _median_time(
        lambda: RandomForestRegressor(n_estimators=100, max_depth=6, n_jobs=1).fit(Xb, yb), repeat=1
    )
    sk_tree = DecisionTreeRegressor(max_depth=6).fit(Xb, yb)
    t[f"predict {n_pred} rows: dpkit tree (depth 6)"] = _median_time(lambda: tree.predict(Xp))
    t[f"predict {n_pred} rows: sklearn tree (depth 6)"] = _median_time(lambda: sk_tree.predict(Xp))
    t[f"predict {n_pred} rows: dpkit 100-tree partition forest"] = _median_time(
        lambda: part.predict(Xp), repeat=1
    )
    t[f"predict {n_pred} rows: dpkit 100-round boosting"] = _median_time(
        lambda: boost.predict(Xp), repeat=1
    )
    t[f"predict {n_pred} rows: dpkit DPGradientBoostingRegressor"] = _median_time(
        lambda: gbr.predict(Xp), repeat=1
    )
    for k, v in t.items():
        print(f"{k:70s} {v:8.3f} s", flush=True)
    return t


def to_markdown(acc: dict[str, Any] | None, times: dict[str, float]) -> str:
    lines: list[str] = []
    if acc is not None:
        dp = {k: v for k, v in acc["dp"].items() if isinstance(v, dict)}
        eps_list = sorted({e for v in dp.values() for e in v})
        lines += [
            "| ε | paper's best DP | " + " | ".join(dp) + " |",
            "|---|---|" + "---|" * len(dp),
        ]
        for e in eps_list:
            cells = [f"{dp[m][e][0]:.4f} ({dp[m][e][1]:.4f})" if e in dp[m] else "" for m in dp]
            lines.append(
                f"| {e:g} | {PAPER_BEST_DP.get(e, float('nan')):.4f} | " + " | ".join(cells) + " |"
            )
        for name, v in acc["dp"].items():
            if not isinstance(v, dict):
                lines.append(f"\n{name}: {v}")
        lines += ["", "| non-private limit | MAE (std) | fit+predict s / fold |", "|---|---|---|"]
        for name, (m, s, sec) in acc["non_private"].items():
            lines.append(f"| {name} | {m:.4f} ({s:.4f}) | {sec:.2f} |")
        lines.append("")
    lines += ["| timing (median of 3; single runs marked in code) | seconds |", "|---|---|"]
    lines += [f"| {k} | {v:.3f} |" for k, v in times.items()]
    return "\n".join(lines)


def _load_accuracy(raw: dict[str, Any] | None) -> dict[str, Any] | None:
    """Accuracy results read back from JSON (epsilon keys are strings there)."""
    if not raw:
        return None
    dp = {
        name: {float(e): tuple(v) for e, v in scores.items()}
        if isinstance(scores, dict)
        else scores
        for name, scores in raw["dp"].items()
    }
    return {"dp": dp, "non_private": {k: tuple(v) for k, v in raw["non_private"].items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=default_data_path())
    parser.add_argument(
        "--quick", action="store_true", help="few epsilons, 3 folds, small speed tables"
    )
    parser.add_argument("--skip-ebm", action="store_true")
    parser.add_argument(
        "--skip-accuracy",
        action="store_true",
        help="time only; keep the accuracy of the previous run's JSON",
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.data is None:
        raise SystemExit("no data: pass --data PATH to california_housing.csv")
    X, y = load_scaled(args.data)
    epsilons = (1.0, 16.0) if args.quick else PAPER_EPSILONS
    folds = 3 if args.quick else 10
    stem = "trees_regression_quick" if args.quick else "trees_regression"
    acc = None if args.skip_accuracy else accuracy(X, y, epsilons, folds, not args.skip_ebm)
    previous = args.out / f"{stem}.json"
    if acc is None and previous.exists():  # re-measure speed only, keep the accuracy table
        acc = _load_accuracy(json.loads(previous.read_text()).get("accuracy"))
    times = speed(X[: int(0.9 * len(y))], y[: int(0.9 * len(y))], args.quick)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{stem}.md").write_text(to_markdown(acc, times) + "\n")
    (args.out / f"{stem}.json").write_text(
        json.dumps({"accuracy": acc, "times": times}, indent=1, default=lambda o: str(o))
    )
    print(f"wrote {args.out / stem}.md")


if __name__ == "__main__":
    main()
