"""Local-DP peers for benchmarks/local_frequency.py, run in the isolated ``.venv-bench``.

    .venv-bench/bin/python benchmarks/_peers_local.py SPEC.json

SPEC names a ``.npy`` of values in 0..d-1 (written by local_frequency.py from
the same simulated population dpkit sees) and the cells to run. For every
(library, oracle, ε) the script times the client on a probe of reports and the
server on the probe's reports, predicts one full repetition from those rates
and runs as many repetitions as fit the budget (none when one does not: the
row then carries the rates only). Prints one JSON object: estimated
frequencies per repetition and the measured rates.

pure-ldp's servers return unbiased counts (``estimate_all`` without
normalisation); multi-freq-ldpy's ``*_Aggregator_MI`` return frequencies
clipped at 0 and rescaled to sum to 1 (its only matrix-inversion output).
Both libraries' clients privatise one value per Python call.
"""

from __future__ import annotations

import json
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

warnings.filterwarnings("ignore")

Runner = Callable[[np.ndarray], np.ndarray]  # values -> estimated frequencies


def _pure_ldp(oracle: str, d: int, eps: float) -> tuple[Callable[..., Any], Callable[..., Any]]:
    import pure_ldp.frequency_oracles as fo

    if oracle == "grr":
        client, server = fo.DEClient(eps, d), fo.DEServer(eps, d)
    elif oracle == "oue":
        client, server = fo.UEClient(eps, d, use_oue=True), fo.UEServer(eps, d, use_oue=True)
    elif oracle == "olh":
        client, server = fo.LHClient(eps, d, use_olh=True), fo.LHServer(eps, d, use_olh=True)
    else:  # Hadamard response
        server = fo.HadamardResponseServer(eps, d)
        client = fo.HadamardResponseClient(eps, d, server.get_hash_funcs())

    def perturb(values: np.ndarray) -> list[Any]:
        return [client.privatise(int(v) + 1) for v in values]  # pure-ldp items are 1..d

    def estimate(reports: list[Any]) -> np.ndarray:
        server.reset()
        for report in reports:
            server.aggregate(report)
        counts = server.estimate_all(range(1, d + 1), suppress_warnings=True)
        return np.asarray(counts, dtype=float) / len(reports)

    return perturb, estimate


def _multi_freq(oracle: str, d: int, eps: float) -> tuple[Callable[..., Any], Callable[..., Any]]:
    from multi_freq_ldpy.pure_frequency_oracles import GRR, LH, UE

    if oracle == "grr":
        client = GRR.GRR_Client
        client(0, d, eps)  # numba compilation outside the timings

        def perturb(values: np.ndarray) -> list[Any]:
            return [client(int(v), d, eps) for v in values]

        def estimate(reports: list[Any]) -> np.ndarray:
            return np.asarray(GRR.GRR_Aggregator_MI(reports, d, eps), dtype=float)

    elif oracle == "oue":
        ue_client = UE.UE_Client
        ue_client(0, d, eps, True)

        def perturb(values: np.ndarray) -> list[Any]:
            return [ue_client(int(v), d, eps, True) for v in values]

        def estimate(reports: list[Any]) -> np.ndarray:
            return np.asarray(UE.UE_Aggregator_MI(reports, eps, True), dtype=float)

    else:

        def perturb(values: np.ndarray) -> list[Any]:
            return [LH.LH_Client(int(v), d, eps, True) for v in values]

        def estimate(reports: list[Any]) -> np.ndarray:
            return np.asarray(LH.LH_Aggregator_MI(reports, d, eps, True), dtype=float)

    return perturb, estimate


LIBRARIES = {"pure-ldp": _pure_ldp, "multi-freq-ldpy": _multi_freq}
ORACLES = {"pure-ldp": ("grr", "oue", "olh", "hr"), "multi-freq-ldpy": ("grr", "oue", "olh")}


def run(spec: dict[str, Any]) -> list[dict[str, Any]]:
    values = np.load(spec["values"])
    d, n = int(spec["d"]), values.size
    rows = []
    only = spec.get("only")  # {"library": ..., "oracle": ...}: one peer oracle (confirmations)
    for library, make in LIBRARIES.items():
        for oracle in ORACLES[library]:
            if only and (library, oracle) != (only["library"], only["oracle"]):
                continue
            for eps in spec["epsilons"]:
                perturb, estimate = make(oracle, d, eps)
                probe = values[: spec["probe"]]
                start = time.perf_counter()
                reports = perturb(probe)
                client_s = (time.perf_counter() - start) / probe.size
                start = time.perf_counter()
                estimate(reports)
                server_s = (time.perf_counter() - start) / probe.size
                one_rep = (client_s + server_s) * n
                reps = min(spec["reps"], int(spec["budget_s"] // one_rep))
                estimates = []
                for _ in range(reps):
                    estimates.append(estimate(perturb(values)).tolist())
                rows.append(
                    {
                        "library": library,
                        "oracle": oracle,
                        "epsilon": eps,
                        "perturb_per_s": 1.0 / client_s,
                        "estimate_s_per_report": server_s,
                        "predicted_rep_s": one_rep,
                        "estimates": estimates,
                    }
                )
    return rows


if __name__ == "__main__":
    with open(sys.argv[1]) as handle:
        print(json.dumps(run(json.load(handle))))
