"""The median of ``--people``'s ages: dpkit's grid against the intervals between data values.

``benchmarks/queries.py --people`` measures Tumult Analytics at about two minutes
per median release at 10⁶ rows, so its RMSE there rests on a handful of
releases. This script measures the two *algorithms* on the same table with
thousands of draws instead:

* dpkit: ``Session.median`` itself (permute-and-flip over the default grid of
  2²⁰ + 1 points of [0, 100]), ``--dpkit-reps`` real releases;
* the exponential mechanism over the intervals between sorted data values
  (Smith 2011), as Tumult's ``NoisyQuantile`` scores them: interval i has
  score ``log(length) - |rank - n/2| · ε / (2 max(q, 1 - q))`` and the
  highest score plus a standard Gumbel wins, then a uniform point of it.
  Simulated here in floating point (``--draws`` draws), which is exact enough
  for an RMSE: intervals more than 200 ranks from the middle have weight
  below e⁻²⁰⁰ and are left out.

Both at ε = 1, add/remove one row. Prints the RMSE ± its standard error of
each; run with ``--rows 1000000`` (the people table) or more.
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np

import _people

#: intervals kept on each side of the middle (weight e^-200 beyond: none in float)
_SIDE = 200


def rmse_se(errors: np.ndarray) -> tuple[float, float]:
    """RMSE and its delta-method standard error."""
    sq = errors.astype(np.float64) ** 2
    rmse = float(np.sqrt(sq.mean()))
    return rmse, float(sq.std(ddof=1) / np.sqrt(sq.size) / (2 * rmse))


def interval_median(x_sorted: np.ndarray, epsilon: float, draws: int, seed: int) -> np.ndarray:
    """``draws`` medians by the exponential mechanism over intervals between data values."""
    n = x_sorted.size
    lo, hi = _people.AGE
    edges = np.concatenate([[lo], x_sorted, [hi]])
    i = np.arange(max(0, n // 2 - _SIDE), min(n, n // 2 + _SIDE) + 1)  # i values below interval i
    length = edges[i + 1] - edges[i]
    with np.errstate(divide="ignore"):
        score = np.log(length) - np.abs(i - n / 2) * epsilon / (2 * 0.5)
    rng = np.random.default_rng(seed)
    chosen = np.argmax(score + rng.gumbel(size=(draws, i.size)), axis=1)
    return edges[i[chosen]] + rng.random(draws) * length[chosen]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--draws", type=int, default=20_000)
    parser.add_argument("--dpkit-reps", type=int, default=1_000)
    args = parser.parse_args()

    from dpkit.errors import PrivacyWarning
    from dpkit.tables import Session

    age = _people.generate(args.rows)["age"]
    truth = float(np.median(age))
    x = np.sort(age)
    spacing = float(np.median(np.diff(x[x.size // 2 - 1000 : x.size // 2 + 1000])))
    simulated = interval_median(x, 1.0, args.draws, seed=33) - truth

    warnings.filterwarnings("ignore", category=PrivacyWarning)  # the big total ε
    session = Session.from_pandas(
        __import__("pandas").DataFrame({"age": age}), types={"age": "DOUBLE"}, epsilon=1e9
    )
    start = time.perf_counter()
    ours = np.array(
        [
            session.median("age", epsilon=1.0, bounds=_people.AGE).value
            for _ in range(args.dpkit_reps)
        ]
    )
    seconds = (time.perf_counter() - start) / args.dpkit_reps
    print(f"{args.rows:,} rows, median {truth:.6f}, data spacing there {spacing:.2e}, ε = 1")
    r, se = rmse_se(ours - truth)
    print(f"dpkit Session.median ({args.dpkit_reps} releases, {seconds:.3f} s each): "
          f"RMSE {r:.3e} ± {se:.1e}")  # fmt: skip
    r, se = rmse_se(simulated)
    print(f"intervals between data values, Tumult's scores ({args.draws} simulated draws): "
          f"RMSE {r:.3e} ± {se:.1e}")  # fmt: skip


if __name__ == "__main__":
    main()
