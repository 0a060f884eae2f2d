"""``benchmarks/queries.py --people`` (issue 33): seven queries at ε = 1 against five peers.

One seeded table (:func:`generate`): ``pid`` with 1–20 rows per person
(uniform), ``age`` a DOUBLE in [0, 100] (continuous), ``income`` in
[0, 500,000] (lognormal, clipped), ``region`` one of 10 public labels. It is
written once into a temporary directory (never the repository) as Parquet,
plus one ``.npy`` per column for the environment without pyarrow
(``.venv-bench-google``); every library reads the same rows.

Each library makes ``reps`` releases of each query at ε = 1 (interleaved,
:mod:`_people_loop`), run in its own environment: dpkit here; OpenDP and
Tumult through ``_peers.py`` (``.venv-bench``, ``.venv-bench-tumult``);
SmartNoise SQL, PipelineDP and PyDP through ``_peers_google.py``
(``.venv-bench-google``). Every query is at row level (add or remove one row)
except "count, ≤ 5 rows per person" (privacy unit = person, at most 5 rows
each, bounded by each library's own mechanism). The bounds [0, 100] and
[0, 500,000] are declared to every library. Judged against one truth per
query: the exact value on the raw rows; for the bounded count, the sum over
persons of min(rows, 5).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np

import _people_loop
from _people_loop import QUERIES

HEADING = "## People: seven queries at ε = 1 against five peers (issue 33)"
AGE = (0.0, 100.0)
INCOME = (0.0, 500_000.0)
K = 5  # rows per person kept by the bounded count
FEW = 50  # releases below which a ratio is marked as resting on few releases
REGIONS = [f"region_{i}" for i in range(10)]  # public labels
#: OpenDP's median candidates: its cost is linear in them (dpkit's 2^20 + 1: 66–109 s a release)
OPENDP_GRID = 2**17 + 1
LIBRARIES = ("dpkit", "opendp", "tumult", "smartnoise", "pipelinedp", "pydp")
LABELS = {
    "dpkit": "dpkit",
    "opendp": "OpenDP (Polars)",
    "tumult": "Tumult Analytics",
    "smartnoise": "SmartNoise SQL",
    "pipelinedp": "PipelineDP (local)",
    "pydp": "PyDP",
}
#: which module runs each peer, and in which environment (relative to the repository)
RUNNERS = {
    "opendp": ("_peers.py", ".venv-bench"),
    "tumult": ("_peers.py", ".venv-bench-tumult"),
    "smartnoise": ("_peers_google.py", ".venv-bench-google"),
    "pipelinedp": ("_peers_google.py", ".venv-bench-google"),
    "pydp": ("_peers_google.py", ".venv-bench-google"),
}


def generate(rows: int, seed: int = 33) -> dict[str, np.ndarray]:
    """The table: persons with 1–20 rows each until ``rows`` rows (the last person cut short)."""
    rng = np.random.default_rng(seed)
    per_person = rng.integers(1, 21, rows // 10 + 2)
    cut = int(np.searchsorted(np.cumsum(per_person), rows))
    per_person = per_person[: cut + 1]
    per_person[-1] -= int(per_person.sum()) - rows
    pid = np.repeat(np.arange(per_person.size, dtype=np.int64), per_person)
    age = 100.0 * rng.beta(1.3, 1.6, rows)  # continuous, uniform-ish, median ≈ 44
    income = np.clip(rng.lognormal(10.6, 0.9, rows), *INCOME)  # median ≈ 40,000
    region = rng.integers(0, len(REGIONS), rows)
    return {"pid": pid, "age": age, "income": income, "region": region}


def truths(data: dict[str, np.ndarray]) -> dict[str, Any]:
    """The one stated truth per query (exact, on the raw rows; bounded count: Σ min(rows, K))."""
    r = len(REGIONS)
    n_region = np.bincount(data["region"], minlength=r)
    sum_region = np.bincount(data["region"], weights=data["income"], minlength=r)
    per_person = np.bincount(data["pid"])
    return {
        "median_age": float(np.median(data["age"])),
        "mean_income_by_region": (sum_region / n_region).tolist(),
        "count_bounded": float(np.minimum(per_person[per_person > 0], K).sum()),
        "count": float(data["pid"].size),
        "sum_income": float(data["income"].sum()),
        "count_by_region": n_region.astype(float).tolist(),
        "mean_income": float(data["income"].mean()),
    }


def write(data: dict[str, np.ndarray], folder: Path) -> dict[str, str]:
    """The table as Parquet (region as its label) and as one ``.npy`` per column (region as 0..9)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    labels = np.asarray(REGIONS, dtype=object)[data["region"]]
    table = pa.table({**{c: data[c] for c in ("pid", "age", "income")}, "region": labels})
    pq.write_table(table, folder / "people.parquet")
    paths = {"parquet": str(folder / "people.parquet")}
    for column, values in data.items():
        np.save(folder / f"{column}.npy", values)
        paths[column] = str(folder / f"{column}.npy")
    return paths


# --------------------------------------------------------------------------- dpkit


def _geometric_sd(scale: float) -> float:
    """Standard deviation of the two-sided geometric noise of scale ``scale`` (P(z) ∝ e^(-|z|/scale))."""
    a = math.exp(-1.0 / scale)
    return math.sqrt(2 * a) / (1 - a)


def run_dpkit(paths: dict[str, str], reps: int, only: list[str] | None = None) -> dict[str, Any]:
    """dpkit on DuckDB: the seven releasers, their stated noise, and the guarantee notes."""
    from importlib.metadata import version

    from dpkit.errors import PrivacyWarning
    from dpkit.tables import Session
    from dpkit.tables.engines.duckdb_engine import connect

    warnings.filterwarnings("ignore", category=PrivacyWarning)  # the big total ε
    con = connect()
    con.execute(f"CREATE TABLE people AS SELECT * FROM read_parquet('{paths['parquet']}')")
    types = {"pid": "BIGINT", "age": "DOUBLE", "income": "DOUBLE", "region": "VARCHAR"}
    # dpkit's default noise source (the OS CSPRNG), as a deployment runs it: timed as used
    rows = Session.from_duckdb("people", connection=con, types=types, epsilon=1e9)
    persons = Session.from_duckdb(
        "people", connection=con, types=types, epsilon=1e9,
        privacy_unit="pid", max_contributions=K,
    )  # fmt: skip
    last: dict[str, Any] = {}

    def kept(query: str, release: Any) -> dict[str, Any]:
        last[query] = release
        value = release.value
        ci = release.ci
        if isinstance(value, dict):  # grouped: in the public regions' order
            value = [float(value[g]) for g in REGIONS]
            ci = None if ci is None else [list(ci[g]) for g in REGIONS]
        return {"value": value, "ci": ci}

    by = {"group_by": "region", "keys": REGIONS}
    releasers = {
        "median_age": lambda: kept("median_age", rows.median("age", epsilon=1.0, bounds=AGE)),
        "mean_income_by_region": lambda: kept(
            "mean_income_by_region", rows.mean("income", epsilon=1.0, bounds=INCOME, **by)
        ),
        "count_bounded": lambda: kept("count_bounded", persons.count(epsilon=1.0)),
        "count": lambda: kept("count", rows.count(epsilon=1.0)),
        "sum_income": lambda: kept("sum_income", rows.sum("income", epsilon=1.0, bounds=INCOME)),
        "count_by_region": lambda: kept("count_by_region", rows.count(epsilon=1.0, **by)),
        "mean_income": lambda: kept("mean_income", rows.mean("income", epsilon=1.0, bounds=INCOME)),
    }
    out = _people_loop.run(releasers, reps, only)
    out["stated"] = {q: _dpkit_stated(last[q]) for q in last}
    out["stated"] = {q: s for q, s in out["stated"].items() if s is not None}
    out["notes"] = {
        q: "pure ε = 1, add/remove one "
        + ("person" if q == "count_bounded" else "row")
        + (f" (privacy_unit=pid, max_contributions={K}: dpkit's own bounding)" if q == "count_bounded" else "")
        + ("; median: permute-and-flip over dpkit's default grid" if q == "median_age" else "")
        + (
            "; mean: two-sided sums Σ(x - lo), Σ(hi - x), one Laplace of all of ε"
            if q.startswith("mean")
            else ""
        )
        for q in QUERIES
    }  # fmt: skip
    out["versions"] = {"duckdb": version("duckdb")}
    return out


def _dpkit_stated(release: Any) -> dict[str, Any] | None:
    """The noise a dpkit release states in its ``details`` (None where it states none)."""
    d = release.details
    if d.get("estimator") == "two-sided sums":  # mean: Laplace on Σ(x - lo) and Σ(hi - x)
        return {"pair_sd": math.sqrt(2) * d["scale"], "bounds": list(d["bounds"])}
    if "epsilon_split" in d:  # mean: Laplace on the sum centred at the middle, geometric count
        lo, hi = d["bounds"]
        k = d.get("sensitivity_factor", 1)
        split = d["epsilon_split"]
        return {
            "sum_sd": math.sqrt(2) * k * (hi - lo) / 2 / split["sum"],
            "count_sd": _geometric_sd(k / split["count"]),
            "centred": True,
        }
    if "scale" in d:
        discrete = release.mechanism.lower().startswith(("geometric", "discrete"))
        sd = _geometric_sd(d["scale"]) if discrete else math.sqrt(2) * d["scale"]
        return {"sd": sd, "mechanism": release.mechanism}
    return None


# --------------------------------------------------------------------------- peers


def run_peer(
    lib: str,
    paths: dict[str, str],
    reps: int,
    venvs: Path,
    tmp: Path,
    only: list[str] | None = None,
) -> dict[str, Any]:
    """One peer in its environment under ``venvs`` (a subprocess given a JSON spec), or ``not_run``."""
    module, venv = RUNNERS[lib]
    python = venvs / venv / "bin" / "python"
    if not python.exists():
        return {"not_run": f"{python} not found (see benchmarks/requirements-*.txt)"}
    spec = {
        "experiment": "people",
        "lib": lib,
        "paths": paths,
        "reps": reps,
        "age": list(AGE),
        "income": list(INCOME),
        "k": K,
        "regions": REGIONS,
        "opendp_grid": OPENDP_GRID,
        "queries": only,
    }
    spec_path = tmp / f"{lib}.json"
    spec_path.write_text(json.dumps(spec), encoding="utf-8")
    done = subprocess.run(
        [str(python), str(Path(__file__).resolve().parent / module), str(spec_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        return {"not_run": "failed: " + done.stderr[-1500:]}
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


# --------------------------------------------------------------------------- accuracy


def rmse_and_se(errors: np.ndarray) -> tuple[float, float]:
    """RMSE over releases (rows; columns = groups, pooled) and its standard error.

    Each release's mean squared error (over its groups) is one sample m_r; the
    RMSE is sqrt(mean m_r) and its standard error by the delta method
    sd(m_r) / (2 RMSE sqrt(R)) (0 with fewer than two releases).
    """
    per_release = np.square(np.asarray(errors, dtype=float)).reshape(len(errors), -1).mean(axis=1)
    rmse = float(np.sqrt(per_release.mean()))
    if per_release.size < 2 or rmse == 0.0:
        return rmse, 0.0
    se = float(per_release.std(ddof=1) / (2 * rmse * math.sqrt(per_release.size)))
    return rmse, se


def predicted_rmse(stated: dict[str, Any], truth: Any, n: Any) -> float:
    """The RMSE a library's stated noise predicts: its sd, or noisy sum / noisy count by the delta method.

    For a mean, ``n`` is the rows averaged (per group) and the shift is the truth
    minus the centre the library subtracts before summing (0 if it does not centre);
    dpkit's two-sided sums (``pair_sd`` each) weigh their two noises by the mean's
    place in the bounds.
    """
    if "sd" in stated:
        return float(stated["sd"])
    truth, n = np.asarray(truth, dtype=float), np.asarray(n, dtype=float)
    if "pair_sd" in stated:  # mean error (Z_A (1 - f) - Z_B f) / n, f = (mean - lo) / (hi - lo)
        lo, hi = stated["bounds"]
        f = (truth - lo) / (hi - lo)
        var = stated["pair_sd"] ** 2 * ((1 - f) ** 2 + f**2) / n**2
        return float(np.sqrt(var.mean()))
    shift = truth - (sum(INCOME) / 2 if stated["centred"] else 0.0)
    var = (stated["sum_sd"] ** 2 + (shift * stated["count_sd"]) ** 2) / n**2
    return float(np.sqrt(var.mean()))


def coverage(cis: list[Any], truth: Any) -> float:
    """The fraction of confidence intervals (one per release, or one per group) that hold the truth."""
    lo_hi = np.asarray(cis, dtype=float).reshape(-1, 2)
    t = np.broadcast_to(np.asarray(truth, dtype=float), (len(cis), np.size(truth))).reshape(-1)
    return float(np.mean((lo_hi[:, 0] <= t) & (t <= lo_hi[:, 1])))


def summarise(lib_out: dict[str, Any], truth: dict[str, Any], n: dict[str, Any]) -> dict[str, Any]:
    """Per query: RMSE, its SE, the predicted RMSE, the time per release and the CI coverage."""
    rows: dict[str, Any] = {}
    for query, values in lib_out.get("values", {}).items():
        errors = np.asarray(values, dtype=float) - np.asarray(truth[query], dtype=float)
        rmse, se = rmse_and_se(errors)
        row = {"rmse": rmse, "se": se, "releases": len(values), "time_s": lib_out["time_s"][query]}
        if query in lib_out.get("stated", {}):
            stated = lib_out["stated"][query]
            row["predicted"] = predicted_rmse(stated, truth[query], n.get(query, 0))
        if lib_out.get("cis", {}).get(query):
            row["coverage"] = coverage(lib_out["cis"][query], truth[query])
        rows[query] = row
    return rows


def run(
    rows: int,
    reps: int,
    libs: list[str],
    venvs: Path,
    folder: Path | None,
    dpkit_reps: int | None = None,
    only: list[str] | None = None,
) -> dict[str, Any]:
    """The whole section: generate, write, run every library, summarise.

    ``dpkit_reps`` (default ``reps``): dpkit's releases per query. dpkit is cheap to
    repeat, and more releases pin its RMSE and its CI coverage; ``reps`` stays the
    least any library makes (the report says how many each made). ``only``: run
    these queries alone (a rerun with more releases, merged by :func:`merge`).
    """
    import tempfile

    data = generate(rows)
    truth = truths(data)
    n_region = np.bincount(data["region"], minlength=len(REGIONS))
    n = {"mean_income_by_region": n_region.tolist(), "mean_income": rows}
    result: dict[str, Any] = {"rows": rows, "reps": reps, "truth": truth, "libraries": {}}
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        paths = write(data, Path(tmp))
        del data
        for lib in libs:
            print(f"      {LABELS[lib]} ...", file=sys.stderr)
            out = (
                run_dpkit(paths, max(reps, dpkit_reps or reps), only)
                if lib == "dpkit"
                else run_peer(lib, paths, reps, venvs, Path(tmp), only)
            )
            entry = {k: out[k] for k in ("not_run", "notes", "cannot", "versions") if k in out}
            if "values" in out:
                entry["queries"] = summarise(out, truth, n)
            result["libraries"][lib] = entry
    return result


def _check_same_table(results: list[dict[str, Any]]) -> None:
    """A ValueError unless every run generated the same rows (row count and every truth)."""
    first = results[0]
    for other in results[1:]:
        for key in ("rows", "truth"):
            if other[key] != first[key]:
                raise ValueError(f"cannot merge runs whose {key!r} differ (different tables)")


def merge(results: list[dict[str, Any]]) -> dict[str, Any]:
    """One result from several runs on the same table (per library and query, later runs win).

    Runs are on the same table only if they generated the same rows: the row count
    and every truth must match, else a ValueError says which differs.
    """
    _check_same_table(results)
    out = {**results[0], "libraries": {}, "reps": min(r["reps"] for r in results)}
    for result in results:  # per library and query: a rerun of some queries replaces those
        for lib, entry in result["libraries"].items():
            merged = out["libraries"].setdefault(lib, {})
            for key, value in entry.items():
                if isinstance(value, dict) and isinstance(merged.get(key), dict):
                    merged[key] = {**merged[key], **value}
                else:
                    merged[key] = value
    return out


def pool_rows(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One query's summary rows from independent runs on the same table, as one run of all their releases.

    Each row's release-level mean squared errors m_r are recovered from its
    RMSE (their mean is RMSE²) and SE (their sd is 2 · RMSE · SE · √R, the
    inverse of :func:`rmse_and_se`); the pooled RMSE is √(mean of all m_r)
    and its SE the same delta method over the pooled spread (within plus
    between runs). Coverage is weighted by releases; the time is the median
    over the runs; the rest is the first row's.
    """
    counts = np.array([r["releases"] for r in rows], dtype=float)
    means = np.array([r["rmse"] ** 2 for r in rows])
    sds = np.array([2.0 * r["rmse"] * r.get("se", 0.0) * math.sqrt(r["releases"]) for r in rows])
    total = counts.sum()
    mean = float((counts * means).sum() / total)
    spread = ((counts - 1) * sds**2).sum() + (counts * (means - mean) ** 2).sum()
    rmse = math.sqrt(mean)
    se = math.sqrt(spread / (total - 1)) / (2 * rmse * math.sqrt(total)) if total > 1 else 0.0
    out = {**rows[0], "rmse": rmse, "se": float(se), "releases": int(total)}
    out["time_s"] = float(np.median([r["time_s"] for r in rows]))
    if all("coverage" in r for r in rows):
        out["coverage"] = float((counts * [r["coverage"] for r in rows]).sum() / total)
    return out


def pool(result: dict[str, Any], runs: list[dict[str, Any]]) -> dict[str, Any]:
    """``result`` with the releases of ``runs`` (more of the same queries) pooled into its rows.

    For a slow peer's query, run in chunks so that a stopped run loses one chunk.
    Every run must be on ``result``'s table (:func:`merge`'s check).
    """
    _check_same_table([result, *runs])
    out = json.loads(json.dumps(result))
    for run in runs:
        for lib, entry in run["libraries"].items():
            target = out["libraries"].setdefault(lib, {})
            for key in ("notes", "versions"):
                if key in entry:
                    target[key] = {**entry[key], **target.get(key, {})}
            queries = target.setdefault("queries", {})
            for query, row in entry.get("queries", {}).items():
                queries[query] = pool_rows([queries[query], row]) if query in queries else row
    return out


def retime(result: dict[str, Any], timed: list[dict[str, Any]]) -> dict[str, Any]:
    """``result`` with each library's time per release the median over the ``timed`` runs.

    Accuracy wants many releases, a fair time wants every library timed under
    the same load: on a shared machine a long run meets whatever else runs.
    Short runs made back to back (``--people-reps 6``) time each library
    close together; their RMSEs are not used. A query no timing run made keeps
    its own time.
    """
    out = json.loads(json.dumps(result))
    for lib, entry in out["libraries"].items():
        for query, row in entry.get("queries", {}).items():
            times = [
                run["libraries"][lib]["queries"][query]["time_s"]
                for run in timed
                if query in run["libraries"].get(lib, {}).get("queries", {})
            ]
            if times:
                row["time_s"] = float(np.median(times))
                row["timing_runs"] = len(times)
    return out


# --------------------------------------------------------------------------- report


def _releases(table: dict[str, dict[str, Any]], libs: list[str]) -> str:
    """ "dpkit 400, OpenDP 50, ...": each library's fewest releases of a query."""
    counts = {lib: min((r["releases"] for r in table[lib].values()), default=0) for lib in libs}
    return ", ".join(f"{LABELS[lib]} {n}" for lib, n in counts.items())


def _cell(row: dict[str, Any] | None, fmt: str) -> str:
    return "" if row is None else fmt.format(**row)


def report(result: dict[str, Any], smoke: bool) -> str:
    """The Markdown section: ratios to dpkit, absolute RMSEs (± SE, predicted), times, notes."""
    libs = [lib for lib in LIBRARIES if lib in result["libraries"]]
    ran = [lib for lib in libs if "queries" in result["libraries"][lib]]
    table = {lib: result["libraries"][lib].get("queries", {}) for lib in libs}
    lines = [HEADING, ""]
    if smoke:
        lines += [
            f"**Smoke run (rows={result['rows']:,}, reps={result['reps']}): it checks the format "
            "only; these are not the issue's figures.** The issue's run: "
            "`.venv/bin/python benchmarks/queries.py --people --people-rows 1000000 "
            "--people-reps 50` (and `--people-rows 10000000`).",
            "",
        ]
    # a merge's "reps" is its smallest run's; pooled chunks add releases: count those
    fewest = min((r["releases"] for lib in ran for r in table[lib].values()), default=0)
    lines += [
        f"`benchmarks/queries.py --people`: {result['rows']:,} rows, at least {fewest} "
        f"releases per library and query ({_releases(table, ran)}) at ε = 1, add/remove one "
        "row except the bounded count (privacy unit = person). Blank: the library cannot make "
        "that release (reason in the notes). Standard errors are the RMSE's, by the delta "
        "method over the releases.",
    ]

    def ratio(lib: str, query: str) -> str:
        row, base = table[lib].get(query), table.get("dpkit", {}).get(query)
        ok = row is not None and base is not None and base["rmse"] > 0
        if not ok:
            return ""
        few = "†" if row["releases"] < FEW else ""
        return f"{row['rmse'] / base['rmse']:.3g}{few}"

    def rmse(lib: str, query: str) -> str:
        row = table[lib].get(query)
        text = _cell(row, "{rmse:.4g} ± {se:.2g}")
        return text + (f" ({row['predicted']:.4g})" if row and "predicted" in row else "")

    def seconds(lib: str, query: str) -> str:
        return _cell(table[lib].get(query), "{time_s:.4g}")

    for title, cell in (
        ("RMSE relative to dpkit (below 1: the peer is more accurate)", ratio),
        ("RMSE ± its standard error (predicted from the library's stated noise)", rmse),
        ("Time per release (s; median of 5 after a warm-up, queries interleaved)", seconds),
    ):
        lines += [
            "",
            f"### {title}",
            "",
            "| query | " + " | ".join(LABELS[lib] for lib in ran) + " |",
        ]
        lines.append("|---|" + "---:|" * len(ran))
        for query, label in QUERIES.items():
            lines.append(f"| {label} | " + " | ".join(cell(lib, query) for lib in ran) + " |")
        retimed = [lib for lib in ran if any("timing_runs" in r for r in table[lib].values())]
        if cell is seconds and retimed:
            runs = max(r.get("timing_runs", 0) for lib in retimed for r in table[lib].values())
            names = ", ".join(LABELS[lib] for lib in retimed)
            lines += [
                "",
                f"Times of {names}: the median over {runs} short runs made back to back "
                "(`--people-times`), so that they met the same load; the others' from their "
                "own runs.",
            ]
        if cell is ratio and any(r["releases"] < FEW for t in table.values() for r in t.values()):
            lines += [
                "",
                f"† fewer than {FEW} releases: a ratio that chance can move by half; compare the "
                "RMSE predicted from the library's stated noise (next table).",
            ]
    dpkit = table.get("dpkit", {})
    covered = {q: r["coverage"] for q, r in dpkit.items() if "coverage" in r}
    if covered:
        lines += ["", "dpkit's 95% CI coverage over the releases (pooled over groups): "]
        lines[-1] += "; ".join(f"{QUERIES[q]} {c:.1%}" for q, c in covered.items()) + "."
    lines += ["", "### How each library's guarantee was matched", ""]
    for lib in libs:
        entry = result["libraries"][lib]
        if "not_run" in entry:
            lines.append(f"- **{LABELS[lib]}**: not run: {entry['not_run'][:400]}")
            continue
        lines.append(f"- **{LABELS[lib]}** ({entry.get('versions', {})}):")
        for query, label in QUERIES.items():
            if query in entry.get("cannot", {}):
                lines.append(f"  - {label}: cannot: {entry['cannot'][query]}")
            elif query in entry.get("notes", {}):
                lines.append(f"  - {label}: {entry['notes'][query]}")
    return "\n".join(lines)
