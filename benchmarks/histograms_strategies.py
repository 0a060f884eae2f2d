"""Measurement strategies for range workloads: exact expected errors against the SVD lower bound.

Takes no data. For prefixes and all ranges over n unit bins, each strategy's
*unit* per-query RMSE (HDMM's convention: sqrt(Δ²·tr(M (AᵀA)⁻¹)/m), least-squares
reconstruction, noise of variance 1 per unit sensitivity; multiply the squared
figure by 2/ε² for Laplace or σ² for Gaussian) under ℓ1 sensitivity (Laplace,
ε-DP) and ℓ2 sensitivity (Gaussian), beside the SVD bound (Σσ)²/(n·m) (Li &
Miklau; a bound for ℓ2 strategies, hence for ℓ1 ones) and each one's ratio to
it. Every figure is exact (closed forms and structured traces; no sampling,
no dense n × n matrix at 65,536):

* prefix errors are the mean of Var(P̂_b), b = 1..n, P̂_b the sum of x̂ over
  [0, b); all ranges use Σ_(0<=a<b<=n) Var(P̂_b - P̂_a) = (n + 1)·Σ_b Var P̂_b -
  Var(Σ_b P̂_b) (P̂_0 = 0), Σ_b P̂_b being the single functional Σ_j (n - j)·x̂_j;
* trees (dpkit's ``hierarchical``: padded b-ary, root included, consistent
  least squares): Var(uᵀx̂) = Σ_m (q_m - q_(m+1))/λ_m (the Haar eigenspaces of
  AᵀA; ``hierarchical.range_variance``'s formula for any weights u);
  Hb is dpkit's choice (``hb.hb_choice``: flat = Identity, else a b-ary tree),
  H2 the binary tree;
* the Haar wavelet (Privelet's matrix: the total and, per node, left sum minus
  right sum, unweighted): orthogonal rows, so Var(uᵀx̂) = Σ_rows (a·u)²/|a|⁴;
* the ℓ2 designs of ``dpkit.histograms._strategy_l2`` report their own exact
  error (and it is re-derived here from their variance maps as a check);
* the Laplace release's strategies (ℓ1): HDMM's p-Identity (``_strategy_l1``) and the
  tree with optimised level weights (``_strategy_tree``), the chosen one marked.

Times: strategy construction ("opt", first call: nothing cached) and one
measure + reconstruct ("m+r") on a vector of n counts (timed after one warm-up
call, so lazy imports are excluded). Usage::

    python benchmarks/histograms_strategies.py            # n in 256, 1024, 4096, 65536
    python benchmarks/histograms_strategies.py --quick    # n in 256, 1024 (smoke run)
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from dpkit.histograms import _strategy_l2 as l2
from dpkit.histograms._range_grams import Gram, gram_for, svd_bound
from dpkit.histograms.hb import hb_choice
from dpkit.histograms.hierarchical import (
    constrained_inference,
    node_counts,
    range_variance,
    tree_levels,
)

ROOT = Path(__file__).resolve().parents[1]
LOAD_AT_START = os.getloadavg()[0]
SIZES = (256, 1024, 4096, 65536)
QUICK_SIZES = (256, 1024)
WORKLOADS = ("prefixes", "ranges")


# --- exact errors from a strategy's variance maps ------------------------------------------


def unit_error(
    gram: Gram, prefix_vars: np.ndarray, functional_var: Callable[[np.ndarray], float]
) -> float:
    """tr(M (AᵀA)⁻¹)/m (sensitivity not applied) from Var P̂_b (b = 1..n) and Var(uᵀx̂)."""
    if gram.kind == "prefixes":
        return float(prefix_vars.mean())
    n = gram.n
    u = (n - np.arange(n)).astype(np.float64)
    total = (n + 1) * float(prefix_vars.sum()) - functional_var(u)
    return total / gram.m


def tree_functional_variance(u: np.ndarray, branching: int, levels: int) -> float:
    """uᵀ(AᵀA)⁻¹u for dpkit's consistent b-ary tree (padded leaves, root included)."""
    padded = np.zeros(branching ** (levels - 1))
    padded[: u.size] = u
    q = []
    block_sums = padded
    for m in range(levels):
        q.append(float(np.sum(block_sums * block_sums)) / branching**m)
        if m + 1 < levels:
            block_sums = block_sums.reshape(-1, branching).sum(axis=1)
    total = 0.0
    for m in range(levels):
        lam = (branching ** (m + 1) - 1) / (branching - 1)
        total += (q[m] - (q[m + 1] if m + 1 < levels else 0.0)) / lam
    return total


def haar_prefix_variances(n: int) -> np.ndarray:
    """Var P̂_b, b = 1..n, for the unweighted Haar matrix over N = 2^⌈log₂ n⌉ bins."""
    size = 1 << max(0, math.ceil(math.log2(n)))
    b = np.arange(1, n + 1, dtype=np.float64)
    out = b * b / size**2  # the total's row: |a|² = N
    block = 2
    while block <= size:
        half = block // 2
        r = np.mod(b, block)
        diff = np.minimum(r, half) - np.maximum(r - half, 0.0)
        out += diff * diff / block**2
        block *= 2
    return out


def haar_functional_variance(u: np.ndarray) -> float:
    size = 1 << max(0, math.ceil(math.log2(u.size)))
    sums = np.zeros(size)
    sums[: u.size] = u
    total = float(sums.sum()) ** 2 / size**2
    block = 2
    while sums.size > 1:
        pairs = sums.reshape(-1, 2)
        diff = pairs[:, 0] - pairs[:, 1]
        total += float(np.sum(diff * diff)) / block**2
        sums = pairs.sum(axis=1)
        block *= 2
    return total


def haar_measure_reconstruct(x: np.ndarray) -> np.ndarray:
    """One Haar measurement (total + differences) and its exact inverse (square, so LS)."""
    size = 1 << max(0, math.ceil(math.log2(x.size)))
    sums = np.zeros(size)
    sums[: x.size] = x
    diffs = []
    while sums.size > 1:
        pairs = sums.reshape(-1, 2)
        diffs.append(pairs[:, 0] - pairs[:, 1])
        sums = pairs.sum(axis=1)
    est = sums
    for diff in reversed(diffs):
        est = np.column_stack([(est + diff) / 2.0, (est - diff) / 2.0]).ravel()
    return est[: x.size]


# --- rows ----------------------------------------------------------------------------------


def _timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def _timed_warm(fn: Callable[[], Any]) -> tuple[Any, float]:
    """Run once untimed (lazy imports, caches), then time a second run."""
    fn()
    return _timed(fn)


def _tree_round_trip(padded: np.ndarray, branching: int) -> list[np.ndarray]:
    """dpkit's tree measurement (node counts) and its consistent estimate."""
    return constrained_inference(node_counts(padded, branching), branching)


def baseline_rows(gram: Gram, x: np.ndarray) -> list[dict[str, Any]]:
    n = gram.n
    rows: list[dict[str, Any]] = []
    ident = unit_error(gram, np.arange(1, n + 1, dtype=np.float64), lambda u: float(u @ u))
    rows.append(_row("Identity", ident, 1.0, 1.0, 0.0, _timed_warm(lambda: x.copy())[1]))
    hb_b = hb_choice(n, 1.0, gram.kind)
    trees: list[tuple[str, int | None]] = [(f"Hb (b={hb_b})" if hb_b else "Hb (flat)", hb_b)]
    trees.append(("H2", 2))
    for label, branching in trees:
        if branching is None:
            rows.append(_row(label, ident, 1.0, 1.0, 0.0, 0.0, note="flat = Identity"))
            continue
        levels = tree_levels(n, branching)
        zeros = np.zeros(n, dtype=np.int64)
        prefix = range_variance(zeros, np.arange(n, dtype=np.int64), branching, levels, 1.0)
        functional = functools.partial(tree_functional_variance, branching=branching, levels=levels)
        err = unit_error(gram, prefix, functional)
        padded = np.zeros(branching ** (levels - 1))
        padded[:n] = x
        _, seconds = _timed_warm(functools.partial(_tree_round_trip, padded, branching))
        rows.append(_row(label, err, float(levels), float(levels), 0.0, seconds))
    haar_levels = 1.0 + max(0, math.ceil(math.log2(n)))
    err = unit_error(gram, haar_prefix_variances(n), haar_functional_variance)
    _, seconds = _timed_warm(lambda: haar_measure_reconstruct(x))
    rows.append(_row("Haar wavelet", err, haar_levels, haar_levels, 0.0, seconds))
    return rows


def _row(
    name: str,
    raw_error: float,
    l1_sensitivity: float | None,
    l2_sensitivity_sq: float | None,
    opt_seconds: float,
    mr_seconds: float,
    note: str = "",
) -> dict[str, Any]:
    """A method's unit errors: raw tr(M G⁻¹)/m times Δ₁² (ℓ1) and Δ₂² (ℓ2)."""
    return {
        "method": name,
        "l1_error": None if l1_sensitivity is None else raw_error * l1_sensitivity**2,
        "l2_error": None if l2_sensitivity_sq is None else raw_error * l2_sensitivity_sq,
        "opt_seconds": opt_seconds,
        "mr_seconds": mr_seconds,
        "note": note,
    }


def l1_rows(gram: Gram, x: np.ndarray) -> list[dict[str, Any]]:
    """The Laplace release's two optimised kinds (ℓ1): HDMM's p-Identity and the weighted tree.

    The one :func:`dpkit.histograms.matrix_mechanism.laplace_strategy` takes is
    marked "chosen" (its exact error is the smaller; beyond 8,192 bins p-Identity
    is not built by the release, but is here, for the table).
    """
    from dpkit.histograms import _strategy_l1, _strategy_tree
    from dpkit.histograms.matrix_mechanism import laplace_strategy

    built = []
    for name, build in (
        ("p-Identity (ℓ1)", lambda: _strategy_l1.p_identity(gram)),
        ("weighted tree (ℓ1)", lambda: _strategy_tree.weighted_tree(gram)),
    ):
        built.append((name, *_timed(build)))
    chosen = laplace_strategy(gram)  # both are cached now
    rows = []
    for name, strategy, seconds in built:
        err = float(strategy.unit_error(gram))  # Δ₁² included (Δ₁ = strategy.sensitivity)
        _, mr = _timed_warm(lambda s=strategy: s.reconstruct(s.measure(x)))
        if name.startswith("p-Identity"):
            note = f"p = {strategy.p}"
        else:
            note = f"b = {strategy.branching}, w = " + "/".join(
                f"{w:.2f}" for w in strategy.weights
            )
        if strategy is chosen:
            note = "chosen; " + note
        rows.append(_row(name, err, 1.0, None, seconds, mr, note=note))
    return rows


def _round_trip(strategy: l2.L2Strategy, x: np.ndarray) -> np.ndarray:
    return strategy.reconstruct(strategy.measure(x))


def l2_rows(gram: Gram, x: np.ndarray) -> list[dict[str, Any]]:
    rows = []
    for name in l2.applicable_designs(gram):
        strategy, seconds = _timed(functools.partial(l2.build_design, name, gram))
        _, mr = _timed_warm(functools.partial(_round_trip, strategy, x))
        n = gram.n
        note = f"{strategy.iterations} steps" if strategy.iterations else ""
        if name == "ranges_eigen" and n > 8192:
            note = "variance-map check skipped (n² cosines)"
        else:
            # Re-derive the error from the strategy's variance maps (an independent check).
            ends = np.arange(n, dtype=np.int64)
            prefix = strategy.range_variance(np.zeros(n, dtype=np.int64), ends)
            check = unit_error(gram, prefix, strategy.linear_variance)
            if not math.isclose(check, strategy.unit_error, rel_tol=1e-6):
                raise AssertionError(f"{name}: {check} != {strategy.unit_error}")
        row = _row(f"L2 {name}", strategy.unit_error, None, 1.0, seconds, mr, note=note)
        row["certificate"] = strategy.lower_bound
        rows.append(row)
    best = min(rows, key=lambda r: r["l2_error"])  # best_l2_strategy's rule (ties: first)
    best["note"] = ("best_l2_strategy; " + best["note"]).rstrip("; ")
    return rows


def gaussian_rows(gram: Gram, x: np.ndarray) -> list[dict[str, Any]]:
    """The Gaussian matrix mechanism's stored strategies (entries on the 2⁻²⁰ grid).

    "opt" is the build from nothing cached (the dense factor includes its
    eigen-design; one BLAS thread, as ``exact_strategy`` builds it), "m+r" one
    exact measurement and reconstruction; the chosen one's note gives a whole
    release through ``matrix_mechanism(noise="gaussian")`` (cached strategy) and
    its first call (cold: every cache cleared, so both stored strategies are
    built, then the release).
    """
    import warnings

    from dpkit.histograms import _strategy_exact as exact
    from dpkit.histograms.matrix_mechanism import matrix_mechanism

    builders: list[tuple[str, Callable[[Gram], Any]]] = [("square_root", exact.toeplitz_exact)]
    if gram.n <= exact.DENSE_LIMIT:
        builders.append(("dense", exact.dense_exact))
    from threadpoolctl import threadpool_limits

    rows: dict[str, dict[str, Any]] = {}
    for _, build in builders:
        l2._CACHE.clear()
        with threadpool_limits(limits=1):  # as exact_strategy builds it
            strategy, seconds = _timed(functools.partial(build, gram))
        if strategy is None:
            continue
        _, mr = _timed_warm(lambda s=strategy: s.reconstruct(s.measure(x)))
        if gram.kind == "prefixes":  # re-derive the error from the variance map (a check)
            ends = np.arange(gram.n, dtype=np.int64)
            prefix = strategy.range_variances(np.zeros(gram.n, dtype=np.int64), ends)
            if not math.isclose(float(prefix.mean()), strategy.trace, rel_tol=1e-9):
                raise AssertionError(f"{strategy.name}: {prefix.mean()} != {strategy.trace}")
        note = f"Δ₂ = {strategy.sensitivity:.7f}"
        rows[strategy.name] = _row(
            f"Gaussian {strategy.name} (2⁻²⁰)", strategy.unit_error, None, 1.0, seconds, mr, note
        )
    exact._CACHE.clear()
    l2._CACHE.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")

        def release() -> Any:
            return matrix_mechanism(x, 1.0, noise="gaussian", delta=1e-6, workload=gram.kind, rng=0)

        _, first = _timed(release)
        published, seconds = _timed(release)
    chosen = rows[published.details["strategy"]]
    chosen["note"] = f"chosen; release {seconds:.3f} s (first {first:.1f} s); " + chosen["note"]
    return list(rows.values())


def run(sizes: tuple[int, ...]) -> list[dict[str, Any]]:
    results = []
    for kind in WORKLOADS:
        for n in sizes:
            gram = gram_for(n, kind)
            x = np.random.default_rng(0).poisson(50.0, n).astype(np.float64)
            bound = svd_bound(gram)
            rows = baseline_rows(gram, x) + l1_rows(gram, x) + l2_rows(gram, x)
            rows += gaussian_rows(gram, x)
            for row in rows:
                for key in ("l1", "l2"):
                    err = row[f"{key}_error"]
                    ok = err is not None and not math.isnan(err)
                    row[f"{key}_rmse"] = math.sqrt(err) if ok else None
                    row[f"{key}_ratio"] = math.sqrt(err / bound) if ok else None
            certs = [r["certificate"] for r in rows if "certificate" in r]
            results.append(
                {
                    "workload": kind,
                    "n": n,
                    "svd_bound_rmse": math.sqrt(bound),
                    "certificate_rmse": math.sqrt(max(certs)) if certs else None,
                    "rows": rows,
                }
            )
            print(f"{kind} n={n} done", flush=True)
    return results


def _fmt(value: float | None, digits: int = 2) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def markdown(results: list[dict[str, Any]]) -> str:
    lines = [
        "# Range-workload strategies: exact unit per-query RMSE vs the SVD bound",
        "",
        "Generated by `python benchmarks/histograms_strategies.py` (no data; every figure exact).",
        f"Python {platform.python_version()}, {platform.machine()}; 1-minute load average "
        f"{LOAD_AT_START:.1f} at the start (times on a busy 2-core machine are inflated; the "
        "errors are exact either way).",
        "Unit RMSE = sqrt(Δ²·tr(M (AᵀA)⁻¹)/m): multiply its square by 2/ε² (Laplace, ℓ1) or σ²",
        "(Gaussian, ℓ2) for the per-query mean squared error. ratio = RMSE / SVD-bound RMSE.",
        "The certificate is the weighted eigen-design's dual bound: no ℓ2 strategy beats it.",
        "",
    ]
    for block in results:
        cert = block["certificate_rmse"]
        lines.append(
            f"## {block['workload']}, n = {block['n']:,} — SVD bound {block['svd_bound_rmse']:.4f}"
            + (f", certified ℓ2 optimum ≥ {cert:.4f}" if cert else "")
        )
        lines.append("")
        lines.append(
            "| method | ℓ1 RMSE | ℓ1 ratio | ℓ2 RMSE | ℓ2 ratio | opt (s) | m+r (s) | note |"
        )
        lines.append("|---|---:|---:|---:|---:|---:|---:|---|")
        for r in block["rows"]:
            lines.append(
                f"| {r['method']} | {_fmt(r['l1_rmse'])} | {_fmt(r['l1_ratio'], 3)} | "
                f"{_fmt(r['l2_rmse'])} | {_fmt(r['l2_ratio'], 3)} | {r['opt_seconds']:.2f} | "
                f"{r['mr_seconds']:.3f} | {r['note']} |"
            )
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="n in 256, 1024 only (smoke run)")
    parser.add_argument("--sizes", nargs="*", type=int, default=None, help="only these n")
    parser.add_argument(
        "--out", type=Path, default=None, help="JSON path (.md beside it); default: results/"
    )
    args = parser.parse_args(argv)
    sizes = tuple(args.sizes) if args.sizes else (QUICK_SIZES if args.quick else SIZES)
    start = time.perf_counter()
    results = run(sizes)
    table = markdown(results)
    print()
    print(table)
    print(f"\n{time.perf_counter() - start:.0f} s")
    out = args.out
    if out is None and not (args.quick or args.sizes):  # a smoke run keeps the full tables
        out = ROOT / "benchmarks/results/histograms_strategies.json"
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(results, indent=1) + "\n")
        out.with_suffix(".md").write_text(table + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
