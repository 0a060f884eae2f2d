"""DPBench-style evaluation of dpkit's 1-D histogram algorithms (Hay et al., SIGMOD 2016).

Protocol (DPBench's, on the shared data's shapes):

* shape: a real column binned over a fixed public range into a domain of
  ``--domain`` unit bins (default 1,024) and normalised to a distribution;
* scale s: a dataset of s records drawn from the shape (multinomial), for
  s in 10³ .. 10⁷;
* workloads: all prefix ranges, and 2,000 random ranges;
* error: DPBench's scaled average per-query L2 error,
  ||W x - W x̂||₂ / (s · |W|), averaged over ``--reps`` independent runs (data
  sample and noise both redrawn).

Every algorithm runs in the same process and run. The table per (shape,
scale, epsilon, workload) gives each algorithm's error, the winner, and the
ratio of dpkit's default (``histograms.auto``) to the winner. ``auto`` is run
for real on the same data samples, starting from the random state the
contender its public rule names (``histograms.choose_method``) started from:
where that rule decides, auto's release is that contender's, bit for bit;
where auto spends 1% of epsilon on its concentration probe (high signal),
its noise is its own. "public rule / best" is what the data-blind rule alone
gives (the named contender's error on the same runs). Usage::

    python benchmarks/histograms_dpbench.py                 # full grid
    python benchmarks/histograms_dpbench.py --quick         # fewer scales, 3 reps
    python benchmarks/histograms_dpbench.py --out benchmarks/results/histograms_dpbench.md

The 4,096-bin grid (hours) runs in pieces: ``--jsonl FILE`` appends one
record per cell and chunk of runs (every run's error for every algorithm) and
skips the runs FILE already holds, so any number of invocations, in any
order, across processes and days, fill the grid; each run is seeded by
(run, scale, epsilon) alone, so a cell computed in pieces is bit for bit the
cell computed at once. ``--report`` reads FILE and writes the table and the
floor checks from whatever is in::

    python benchmarks/histograms_dpbench.py --domain 4096 --reps 100 \
        --jsonl grid4096.jsonl --shapes income fare --epsilons 0.1 --workloads prefixes
    python benchmarks/histograms_dpbench.py --domain 4096 --reps 100 --jsonl grid4096.jsonl \
        --report --out benchmarks/results/histograms_dpbench.md   # replaces its own section
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from dpkit import histograms

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "data"
EPSILONS = (0.01, 0.1, 1.0)
SCALES = (1_000, 10_000, 100_000, 1_000_000, 10_000_000)
WORKLOADS = ("prefixes", "ranges")
#: The shapes :func:`shapes` makes, in its order.
SHAPE_NAMES = ("income", "house_value", "population", "fare", "births_by_year")


def shapes(data_dir: Path, domain: int) -> dict[str, np.ndarray]:
    """Distributions over ``domain`` bins from real columns (fixed public ranges)."""
    import duckdb
    import pandas as pd

    out: dict[str, np.ndarray] = {}

    def shape_of(values: np.ndarray, lo: float, hi: float, weights: Any = None) -> np.ndarray:
        counts, _ = np.histogram(
            np.clip(values, lo, hi), bins=domain, range=(lo, hi), weights=weights
        )
        return counts / counts.sum()

    housing = pd.read_csv(data_dir / "california_housing_raw.csv")
    out["income"] = shape_of(housing["medianIncome"].to_numpy(), 0.0, 15.0)
    out["house_value"] = shape_of(housing["medianHouseValue"].to_numpy(), 0.0, 510_000.0)
    out["population"] = shape_of(housing["population"].to_numpy(), 0.0, 10_000.0)
    titanic = pd.read_csv(data_dir / "titanic.csv", usecols=["Age", "Fare"])
    out["fare"] = shape_of(titanic["Fare"].dropna().to_numpy(), 0.0, 520.0)
    con = duckdb.connect()
    path = str(data_dir / "us_babynames_1880_2010.csv")
    by_year = con.execute(
        "SELECT year, sum(births) FROM read_csv_auto(?) GROUP BY year", [path]
    ).fetchnumpy()
    con.close()
    years = np.asarray(by_year["year"], dtype=float)
    births = np.asarray(by_year["sum(births)"], dtype=float)
    out["births_by_year"] = shape_of(years, 1880.0, 2011.0, weights=births)
    return out


def workload(n: int, kind: str, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    if kind == "prefixes":
        hi = np.arange(n)
        return np.zeros(n, dtype=np.int64), hi
    rng = np.random.default_rng(seed)
    ends = np.sort(rng.integers(0, n, size=(2000, 2)), axis=1)
    return ends[:, 0], ends[:, 1]


def algorithms(scale: int, kind: str) -> dict[str, Callable[[np.ndarray, float, Any], Any]]:
    """Every algorithm with the public parameters a user has: the scale bound and the workload."""
    return {
        "laplace": lambda x, e, r: histograms.laplace(x, e, rng=r),
        "hierarchical": lambda x, e, r: histograms.hierarchical(x, e, rng=r),
        "hb": lambda x, e, r: histograms.hb(x, e, workload=kind, rng=r),
        "noise_first": lambda x, e, r: histograms.noise_first(x, e, rng=r),
        "structure_first": lambda x, e, r: histograms.structure_first(x, e, max_count=scale, rng=r),
        "ahp": lambda x, e, r: histograms.ahp(x, e, rng=r),
        "dawa": lambda x, e, r: histograms.dawa(x, e, workload=kind, rng=r),
        "matrix_mechanism": lambda x, e, r: histograms.matrix_mechanism(x, e, workload=kind, rng=r),
    }


def run_cell(
    shape: np.ndarray, domain: int, scale: int, eps: float, kind: str, runs: list[int]
) -> dict[str, Any]:
    """Every algorithm and auto on the given runs of one cell: per-run errors, auto's picks."""
    lo, hi = workload(domain, kind)
    errors: dict[str, list[float]] = {}
    picks: list[str] = []
    rules: list[str] = []
    public = histograms.choose_method(domain, eps, scale, kind)
    for rep in runs:
        rng = np.random.default_rng([rep, scale, int(eps * 1000)])
        x = rng.multinomial(scale, shape).astype(float)
        prefix = np.concatenate(([0.0], np.cumsum(x)))
        truth = prefix[hi + 1] - prefix[lo]
        auto_rng = rng  # replaced by the state the public choice starts from
        for algo, publish in algorithms(scale, kind).items():
            if algo == public:
                auto_rng = copy.deepcopy(rng)
            h = publish(x, eps, rng)
            errors.setdefault(algo, []).append(_error(h, lo, hi, truth, scale))
        h = histograms.auto(x, eps, max_records=scale, workload=kind, rng=auto_rng)
        errors.setdefault("auto", []).append(_error(h, lo, hi, truth, scale))
        picks.append(h.details["auto_choice"])
        rules.append(h.details["auto_rule"])
    return {"errors": errors, "picks": picks, "rules": rules, "public_choice": public}


def summarise(
    name: str, scale: int, eps: float, kind: str, measured: dict[str, Any]
) -> dict[str, Any]:
    """One table row from a cell's per-run errors (means over the runs)."""
    errors, picks, public = measured["errors"], measured["picks"], measured["public_choice"]
    mean = {a: float(np.mean(v)) for a, v in errors.items()}
    contenders = {a: v for a, v in mean.items() if a != "auto"}
    winner = min(contenders, key=lambda a: contenders[a])
    return {
        "shape": name,
        "scale": scale,
        "epsilon": eps,
        "workload": kind,
        **mean,
        "winner": winner,
        "auto_choice": _picks(picks, set(measured["rules"])),
        "auto_dawa_share": picks.count("dawa") / len(picks),
        "auto_ratio": mean["auto"] / contenders[winner],
        "auto_vs_laplace": mean["auto"] / mean["laplace"],
        "public_choice": public,
        "public_ratio": mean[public] / contenders[winner],
        "public_vs_laplace": mean[public] / mean["laplace"],
    }


def _progress_line(row: dict[str, Any]) -> str:
    return (
        f"{row['shape']:15s} s={row['scale']:>10,} eps={row['epsilon']:<5g} "
        f"{row['workload']:8s} winner={row['winner']:16s}"
        f" auto={row['auto_choice']:12s} auto/best={row['auto_ratio']:.2f}"
        f" public/best={row['public_ratio']:.2f}"
    )


def run(
    data_dir: Path,
    domain: int,
    scales: tuple[int, ...],
    reps: int,
    only: list[str] | None = None,
    epsilons: tuple[float, ...] = EPSILONS,
    workloads: tuple[str, ...] = WORKLOADS,
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for name, shape, scale, eps, kind in cells(data_dir, domain, only, scales, epsilons, workloads):
        measured = run_cell(shape, domain, scale, eps, kind, list(range(reps)))
        rows.append(summarise(name, scale, eps, kind, measured))
        print(_progress_line(rows[-1]), flush=True)
    return rows


def cells(
    data_dir: Path,
    domain: int,
    only: list[str] | None,
    scales: tuple[int, ...],
    epsilons: tuple[float, ...],
    workloads: tuple[str, ...],
) -> Iterator[tuple[str, np.ndarray, int, float, str]]:
    """The selected cells (shape name, shape, scale, epsilon, workload), in the grid's order."""
    for name, shape in shapes(data_dir, domain).items():
        if only and name not in only:
            continue
        for scale in scales:
            for eps in epsilons:
                for kind in workloads:
                    yield name, shape, scale, eps, kind


# ---------------------------------------------------------------------------
# The grid in pieces: a JSON-lines file of per-run results, appended to.


def _cell_key(record: dict[str, Any]) -> tuple[int, str, int, float, str]:
    return (
        int(record["domain"]),
        str(record["shape"]),
        int(record["scale"]),
        float(record["epsilon"]),
        str(record["workload"]),
    )


def read_records(path: Path) -> list[dict[str, Any]]:
    """The records of a results file; a last line cut short by a killed run is ignored."""
    if not path.exists():
        return []
    records = []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a partial final line: its runs are simply redone
    return records


def merge_records(records: list[dict[str, Any]]) -> dict[tuple[Any, ...], dict[str, Any]]:
    """Per cell, every run's results once (the first record of a run wins), in run order."""
    runs: dict[tuple[Any, ...], dict[int, dict[str, Any]]] = {}
    public: dict[tuple[Any, ...], str] = {}
    for record in records:
        key = _cell_key(record)
        public[key] = record["public_choice"]
        cell = runs.setdefault(key, {})
        for i, run_index in enumerate(record["runs"]):
            if run_index in cell:
                continue
            cell[run_index] = {
                "errors": {a: v[i] for a, v in record["errors"].items()},
                "pick": record["picks"][i],
                "rule": record["rules"][i],
            }
    merged: dict[tuple[Any, ...], dict[str, Any]] = {}
    for key, cell in runs.items():
        order = sorted(cell)
        algos = list(cell[order[0]]["errors"])
        merged[key] = {
            "runs": order,
            "errors": {a: [cell[r]["errors"][a] for r in order] for a in algos},
            "picks": [cell[r]["pick"] for r in order],
            "rules": [cell[r]["rule"] for r in order],
            "public_choice": public[key],
        }
    return merged


def _append_line(path: Path, line: str) -> None:
    """Append one line, flushed to disk; after a line cut short by a kill, on a line of its own."""
    cut = False
    if path.exists() and path.stat().st_size:
        with path.open("rb") as f:
            f.seek(-1, os.SEEK_END)
            cut = f.read(1) != b"\n"
    with path.open("a") as out:
        out.write(("\n" if cut else "") + line + "\n")
        out.flush()
        os.fsync(out.fileno())


def run_pieces(
    data_dir: Path,
    domain: int,
    scales: tuple[int, ...],
    reps: int,
    only: list[str] | None,
    epsilons: tuple[float, ...],
    workloads: tuple[str, ...],
    path: Path,
    chunk: int,
) -> int:
    """Fill runs 0 .. reps - 1 of every selected cell into ``path``; returns runs computed."""
    done = {key: set(cell["runs"]) for key, cell in merge_records(read_records(path)).items()}
    computed = 0
    for name, shape, scale, eps, kind in cells(data_dir, domain, only, scales, epsilons, workloads):
        key = (domain, name, scale, float(eps), kind)
        missing = [r for r in range(reps) if r not in done.get(key, set())]
        for start in range(0, len(missing), chunk):
            piece = missing[start : start + chunk]
            began = time.perf_counter()
            measured = run_cell(shape, domain, scale, eps, kind, piece)
            record = {
                "domain": domain,
                "shape": name,
                "scale": scale,
                "epsilon": float(eps),
                "workload": kind,
                "runs": piece,
                **measured,
                "seconds": round(time.perf_counter() - began, 3),
            }
            _append_line(path, json.dumps(record))
            computed += len(piece)
            print(
                f"{name:15s} s={scale:>10,} eps={eps:<5g} {kind:8s} runs "
                f"{piece[0]}..{piece[-1]} in {record['seconds']:.0f} s",
                flush=True,
            )
    return computed


def _error(h: Any, lo: np.ndarray, hi: np.ndarray, truth: np.ndarray, scale: int) -> float:
    """DPBench's scaled average per-query L2 error of one release."""
    return float(np.linalg.norm(h.answer(lo, hi) - truth) / (scale * lo.size))


def _picks(picks: list[str], rules: set[str]) -> str:
    """The method auto chose, or "dawa 7/10" (a probe's switch) when it chose differently between runs."""
    names = sorted(set(picks))
    switch = next((p for p in histograms.select.PROBE_CHOICES if p in names), names[0])
    label = names[0] if len(names) == 1 else f"{switch} {picks.count(switch)}/{len(picks)}"
    return f"{label} (probe)" if "probe" in rules else label


def _summary(rows: list[dict[str, Any]], key: str, what: str) -> str:
    ratio, vs_laplace = f"{key}_ratio", f"{key}_vs_laplace"
    worst = max(rows, key=lambda r: r[ratio])
    return (
        f"{what} within 1.2× of the best in {sum(r[ratio] <= 1.2 for r in rows)} of "
        f"{len(rows)} cells; worst ratio {worst[ratio]:.2f} ({worst['shape']}, "
        f"s={worst['scale']:,}, ε={worst['epsilon']:g}, {worst['workload']}); "
        f"never worse than Laplace: {all(r[vs_laplace] <= 1.0 for r in rows)} "
        f"(max ratio to Laplace {max(r[vs_laplace] for r in rows):.2f})."
    )


def markdown(rows: list[dict[str, Any]]) -> str:
    algos = list(algorithms(1, "ranges"))
    head = ["shape", "scale", "ε", "workload", *algos, "auto", "winner", "auto picks"]
    head += ["auto / best", "public rule / best"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["shape"], f"{r['scale']:.0e}", f"{r['epsilon']:g}", r["workload"]]
        cells += [f"{r[a]:.2e}" for a in [*algos, "auto"]]
        cells += [r["winner"], r["auto_choice"], f"{r['auto_ratio']:.2f}"]
        cells += [f"{r['public_ratio']:.2f} ({r['public_choice']})"]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines.append(_summary(rows, "auto", "auto (measured, with the probe)"))
    lines.append("")
    lines.append(_summary(rows, "public", "The public rule alone (choose_method)"))
    return "\n".join(lines)


def _paired_gap(auto: list[float], best: list[float]) -> tuple[float, float]:
    """Mean of auto's error minus the best's over the same runs, and its standard error."""
    gap = np.asarray(auto) - np.asarray(best)
    se = float(gap.std(ddof=1) / np.sqrt(gap.size)) if gap.size > 1 else float("nan")
    return float(gap.mean()), se


def report(
    path: Path,
    domain: int,
    reps: int,
    high_signal: float,
    selection: tuple[tuple[str, ...], tuple[int, ...], tuple[float, ...], tuple[str, ...]],
) -> str:
    """The markdown section for ``domain`` bins from whatever runs ``path`` holds."""
    names, scales, epsilons, workloads = selection
    merged = merge_records(read_records(path))
    planned = [
        (domain, name, scale, float(eps), kind)
        for name in names
        for scale in scales
        for eps in epsilons
        for kind in workloads
    ]
    cells = [key for key in planned if key in merged]
    runs_in = sum(min(len(merged[key]["runs"]), reps) for key in cells)
    complete = sum(len(merged[key]["runs"]) >= reps for key in cells)
    wanted = set(planned)
    seconds = sum(
        float(r.get("seconds", 0.0)) for r in read_records(path) if _cell_key(r) in wanted
    )
    head = [
        "shape",
        "scale",
        "ε",
        "workload",
        "runs",
        "signal s·ε/n",
        "auto",
        "best publisher",
        "best",
        "Hb",
        "auto / best",
        "auto − best (2 SE)",
        "auto / Hb",
        "auto picks",
    ]
    lines = [
        f"## {domain:,} bins: DPBench-style grid (`--domain {domain} --reps {reps}`, in pieces)",
        "",
        f"{len(cells)} of {len(planned)} cells in ({complete} with all {reps} runs); "
        f"{runs_in:,} of {len(planned) * reps:,} runs "
        f"({seconds / 3600:.1f} h of compute so far). Errors: DPBench's scaled per-query "
        "L2 error, mean over the runs; best = the least of dpkit's publishers (not auto); "
        f"high signal: s·ε/n ≥ {high_signal:g} (where the data-blind tree rule says Hb).",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    at_or_below = within_noise = high = high_ok = 0
    worst: tuple[float, str] = (0.0, "")
    for key in cells:
        _, name, scale, eps, kind = key
        cell = merged[key]
        errs = {a: v[:reps] for a, v in cell["errors"].items()}
        measured = {**cell, "errors": errs, "picks": cell["picks"][:reps]}
        row = summarise(name, scale, eps, kind, measured)
        best = row["winner"]
        gap, se = _paired_gap(errs["auto"], errs[best])
        signal = scale * eps / domain
        vs_hb = row["auto"] / row["hb"]
        at_or_below += row["auto_ratio"] <= 1.0
        within_noise += gap <= 2 * se
        if signal >= high_signal:
            high += 1
            high_ok += vs_hb <= 0.9
        label = f"{name}, s={scale:.0e}, ε={eps:g}, {kind}"
        worst = max(worst, (row["auto_ratio"], label))
        cells_md = [
            name,
            f"{scale:.0e}",
            f"{eps:g}",
            kind,
            str(len(errs["auto"])),
            f"{signal:.3g}",
            f"{row['auto']:.3e}",
            best,
            f"{row[best]:.3e}",
            f"{row['hb']:.3e}",
            f"{row['auto_ratio']:.3f}",
            f"{gap:+.1e} ({2 * se:.1e})",
            f"{vs_hb:.3f}",
            row["auto_choice"],
        ]
        lines.append("| " + " | ".join(cells_md) + " |")
    lines += [
        "",
        "Floor checks (issue 32), on the cells in so far:",
        "",
        f"- auto at or below the best of dpkit's publishers: {at_or_below} of {len(cells)} "
        f"cells (mean over the runs); not above it by more than 2 standard errors of the "
        f"paired difference: {within_noise} of {len(cells)}"
        + (f"; worst auto / best {worst[0]:.3f} ({worst[1]})." if cells else "."),
        f"- auto ≤ 0.9 × Hb in the high-signal cells: {high_ok} of {high}.",
    ]
    return "\n".join(lines)


def write_section(path: Path, domain: int, text: str) -> None:
    """Put ``text`` between this domain's markers in ``path`` (appended the first time)."""
    begin = f"<!-- histograms_dpbench --domain {domain} begin -->"
    end = f"<!-- histograms_dpbench --domain {domain} end -->"
    block = f"{begin}\n{text}\n{end}\n"
    old = path.read_text() if path.exists() else ""
    if begin in old and end in old:
        new = old[: old.index(begin)] + block + old[old.index(end) + len(end) + 1 :]
    else:
        new = old + ("\n" if old and not old.endswith("\n\n") else "") + block
    path.write_text(new)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--domain", type=int, default=1024)
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="scales 10³, 10⁵, 10⁷; 3 reps")
    parser.add_argument("--shapes", nargs="*", default=None, help="only these shapes")
    parser.add_argument("--scales", nargs="*", type=int, default=None, help="only these scales")
    parser.add_argument("--epsilons", nargs="*", type=float, default=None, help="only these ε")
    parser.add_argument(
        "--workloads", nargs="*", choices=WORKLOADS, default=None, help="only these workloads"
    )
    parser.add_argument("--out", type=Path, default=None, help="also write the table here")
    parser.add_argument(
        "--jsonl",
        type=Path,
        default=None,
        help="append per-run results here, skipping the runs it holds (resumable)",
    )
    parser.add_argument("--chunk", type=int, default=25, help="runs per record with --jsonl")
    parser.add_argument(
        "--report",
        action="store_true",
        help="with --jsonl: print the table and floor checks from the file (--out: replace "
        "this domain's section there) and run nothing",
    )
    parser.add_argument(
        "--high-signal",
        type=float,
        default=None,
        help="signal s·ε/n from which a cell is high-signal (default select.DAWA_BELOW)",
    )
    args = parser.parse_args(argv)
    if args.report and args.jsonl is None:
        parser.error("--report reads the results of --jsonl FILE; pass it")
    epsilons = tuple(args.epsilons) if args.epsilons else EPSILONS
    workloads = tuple(args.workloads) if args.workloads else WORKLOADS
    if args.report:
        from dpkit.histograms.select import DAWA_BELOW

        selection = (
            tuple(args.shapes) if args.shapes else SHAPE_NAMES,
            tuple(args.scales) if args.scales else SCALES,
            epsilons,
            workloads,
        )
        high = DAWA_BELOW if args.high_signal is None else args.high_signal
        text = report(args.jsonl, args.domain, args.reps, high, selection)
        print(text)
        if args.out is not None:
            write_section(args.out, args.domain, text)
        return 0
    if not args.data_dir.is_dir():
        print(f"data directory {args.data_dir} not found; pass --data-dir", file=sys.stderr)
        return 2
    warnings.simplefilter("ignore")  # seeded sources warn; this is an experiment
    scales = (1_000, 100_000, 10_000_000) if args.quick else SCALES
    if args.scales:
        scales = tuple(args.scales)
    reps = 3 if args.quick else args.reps
    start = time.perf_counter()
    if args.jsonl is not None:
        computed = run_pieces(
            args.data_dir,
            args.domain,
            scales,
            reps,
            args.shapes,
            epsilons,
            workloads,
            args.jsonl,
            max(1, args.chunk),
        )
        print(f"{computed} runs added to {args.jsonl} in {time.perf_counter() - start:.0f} s")
        return 0
    rows = run(args.data_dir, args.domain, scales, reps, args.shapes, epsilons, workloads)
    table = markdown(rows)
    print()
    print(table)
    print(f"\n{len(rows)} cells, {reps} reps each, {time.perf_counter() - start:.0f} s")
    if args.out is not None:
        args.out.write_text(table + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
