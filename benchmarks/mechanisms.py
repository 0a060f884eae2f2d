"""Mechanism benchmark: draws per second and empirical privacy audits.

Run: ``.venv/bin/python benchmarks/mechanisms.py [--draws 1000000] [--audit-samples 200000]``
(``make bench`` installs the peer ``opendp`` first). Every figure is measured in
this run: dpkit's exact samplers (secure source, the default) against NumPy's
plain floating-point samplers (fast, not DP-safe) and OpenDP's exact samplers.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np

from dpkit import mechanisms as M
from dpkit.audit import audit_samples
from dpkit.mechanisms._exact import discrete_gaussian, discrete_laplace


def _rate(fn: Callable[[], object], draws: int, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return draws / best


def _opendp_samplers(draws: int) -> dict[str, Callable[[], object]]:
    try:
        import opendp.prelude as dp
    except ImportError:
        return {}
    dp.enable_features("contrib")
    floats = [0.0] * draws
    ints = [0] * draws
    out: dict[str, Callable[[], object]] = {}
    try:
        lap = dp.m.make_laplace(
            dp.vector_domain(dp.atom_domain(T=float, nan=False)), dp.l1_distance(T=float), scale=1.0
        )
        out["laplace"] = lambda: lap(floats)
        geo = dp.m.make_laplace(
            dp.vector_domain(dp.atom_domain(T=int)), dp.l1_distance(T=int), scale=1.0
        )
        out["geometric"] = lambda: geo(ints)
        gau = dp.m.make_gaussian(
            dp.vector_domain(dp.atom_domain(T=float, nan=False)), dp.l2_distance(T=float), scale=1.0
        )
        out["gaussian"] = lambda: gau(floats)
        dg = dp.m.make_gaussian(
            dp.vector_domain(dp.atom_domain(T=int)), dp.l2_distance(T=int), scale=1.0
        )
        out["discrete_gaussian"] = lambda: dg(ints)
    except Exception as err:  # a peer's API change must not stop our own figures
        print(f"(OpenDP: {type(err).__name__}: {err})")
    return out


def speed(draws: int) -> list[tuple[str, float, float, float | None]]:
    zeros = np.zeros(draws)
    izeros = np.zeros(draws, dtype=np.int64)
    numpy_rng = np.random.default_rng()
    dpkit_fns = {
        "laplace": lambda: M.laplace(zeros, sensitivity=1.0, epsilon=1.0),
        "geometric": lambda: M.geometric(izeros, sensitivity=1, epsilon=1.0),
        "gaussian": lambda: M.gaussian(zeros, sensitivity=1.0, epsilon=1.0, delta=1e-6),
        "discrete_gaussian": lambda: M.discrete_gaussian(
            izeros, sensitivity=1, epsilon=1.0, delta=1e-6
        ),
        "exponential (1000 selections × 1000 candidates, per candidate)": lambda: M.exponential(
            np.zeros((draws // 1000, 1000)), epsilon=1.0, sensitivity=1.0
        ),
        "permute_and_flip (same, per candidate)": lambda: M.permute_and_flip(
            np.zeros((draws // 1000, 1000)), epsilon=1.0, sensitivity=1.0
        ),
        "randomized_response": lambda: M.randomized_response(
            np.zeros(draws, dtype=bool), epsilon=1.0
        ),
    }
    numpy_fns = {
        "laplace": lambda: numpy_rng.laplace(0, 1.0, draws),
        "geometric": lambda: numpy_rng.geometric(0.5, draws) - numpy_rng.geometric(0.5, draws),
        "gaussian": lambda: numpy_rng.normal(0, 1.0, draws),
        "discrete_gaussian": lambda: np.rint(numpy_rng.normal(0, 1.0, draws)),
    }
    peers = _opendp_samplers(draws)
    rows = []
    for name, fn in dpkit_fns.items():
        ours = _rate(fn, draws, repeat=1 if "selection" in name else 2)
        base = _rate(numpy_fns[name], draws) if name in numpy_fns else float("nan")
        peer = _rate(peers[name], draws, repeat=1) if name in peers else None
        rows.append((name, ours, base, peer))
    return rows


def audits(samples: int) -> list[tuple[str, float, float, float, bool]]:
    src = M.SeededRandom(np.random.default_rng(2026))
    out = []
    for eps in (0.5, 1.0, 2.0):
        lap = M.Laplace(epsilon=eps, sensitivity=1.0)
        noise = discrete_laplace(src, lap._t, lap._s, 2 * samples) * lap.granularity
        r = audit_samples(noise[:samples], noise[samples:] + 1.0, epsilon=eps)
        out.append((f"laplace ε={eps}", eps, r.epsilon_estimate, r.epsilon_lower_bound, r.passed))
        geo = M.Geometric(epsilon=eps)
        noise = discrete_laplace(src, geo._t, geo._s, 2 * samples)
        r = audit_samples(noise[:samples], noise[samples:] + 1, epsilon=eps)
        out.append((f"geometric ε={eps}", eps, r.epsilon_estimate, r.epsilon_lower_bound, r.passed))
        gau = M.Gaussian(epsilon=eps, delta=1e-3, sensitivity=1.0)
        noise = discrete_gaussian(src, gau._sigma2, 1, 2 * samples) * gau.granularity
        r = audit_samples(noise[:samples], noise[samples:] + 1.0, epsilon=eps, delta=1e-3)
        out.append(
            (f"gaussian ε={eps}, δ=1e-3", eps, r.epsilon_estimate, r.epsilon_lower_bound, r.passed)
        )
        k = 48
        u = np.zeros((samples // 3, k))
        u2 = np.full((samples // 3, k), -1.0)
        u2[:, 0] = 1.0
        for name, sel in (("exponential", M.exponential), ("permute_and_flip", M.permute_and_flip)):
            a, b = (
                sel(u, epsilon=eps, sensitivity=1.0, rng=src),
                sel(u2, epsilon=eps, sensitivity=1.0, rng=src),
            )
            r = audit_samples(a, b, epsilon=eps)
            out.append(
                (f"{name} ε={eps}", eps, r.epsilon_estimate, r.epsilon_lower_bound, r.passed)
            )
        rr_yes = M.randomized_response(np.ones(samples, dtype=bool), epsilon=eps, rng=src).astype(
            float
        )
        rr_no = M.randomized_response(np.zeros(samples, dtype=bool), epsilon=eps, rng=src).astype(
            float
        )
        r = audit_samples(rr_yes, rr_no, epsilon=eps)
        out.append(
            (
                f"randomized_response ε={eps}",
                eps,
                r.epsilon_estimate,
                r.epsilon_lower_bound,
                r.passed,
            )
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--draws", type=int, default=1_000_000)
    parser.add_argument("--audit-samples", type=int, default=200_000)
    args = parser.parse_args()
    print(f"## Draws per second ({args.draws:,} vectorised draws; dpkit uses the secure source)\n")
    print(
        "| mechanism | dpkit (exact) | NumPy (float, not DP-safe) | OpenDP (exact) | dpkit/NumPy | dpkit/OpenDP |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for name, ours, base, peer in speed(args.draws):
        peer_s = f"{peer:,.0f}" if peer else "n/a"
        ratio_peer = f"{ours / peer:.2f}" if peer else "n/a"
        ratio_base = f"{ours / base:.3f}" if base == base else "n/a"
        base_s = f"{base:,.0f}" if base == base else "n/a"
        print(f"| {name} | {ours:,.0f} | {base_s} | {peer_s} | {ratio_base} | {ratio_peer} |")
    print(
        f"\n## Empirical privacy audits ({args.audit_samples:,} samples per side, 99% confidence)\n"
    )
    print("| mechanism | claimed ε | empirical ε (point) | ε lower bound | passed |")
    print("|---|---:|---:|---:|---|")
    for name, eps, est, low, ok in audits(args.audit_samples):
        print(f"| {name} | {eps:g} | {est:.3f} | {low:.3f} | {'yes' if ok else 'NO'} |")


if __name__ == "__main__":
    main()
