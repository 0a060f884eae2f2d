"""Peer synthesizers for benchmarks/synth.py, run in their own environments (never imported by dpkit).

Called by ``synth.py`` as a subprocess:

    .venv-bench-synth/bin/python benchmarks/_synth_peers.py SPEC.json

SPEC: ``lib`` ("opendp" or "smartnoise"), ``method`` ("mst" or "aim"), the
CSV ``path``, the ``columns`` (each ``{"keys": [...]}`` for a declared domain
or ``{"cuts": [...]}`` for the inner bin edges of a numeric column), ``rho``
(zCDP, the same ρ dpkit spends), ``epsilon``/``delta`` (the (ε, δ) that ρ is
stated at), ``seed`` and ``out`` (where the synthetic table is written, CSV).
Prints one JSON line: the seconds of the release and fit, and the version.
"""

from __future__ import annotations

import json
import sys
import time
import warnings
from typing import Any


def _opendp(spec: dict[str, Any]) -> tuple[Any, str]:
    import opendp.prelude as dp
    import polars as pl

    dp.enable_features("contrib")
    names = list(spec["columns"])
    frame = pl.read_csv(spec["path"], columns=names, infer_schema_length=100_000)
    keys = {c: v["keys"] for c, v in spec["columns"].items() if "keys" in v}
    cuts = {c: [float(x) for x in v["cuts"]] for c, v in spec["columns"].items() if "cuts" in v}
    frame = frame.with_columns(pl.col(c).cast(pl.Float64) for c in cuts)
    # A few parts in 10⁹ below dpkit's ρ: OpenDP's own float split of the budget refuses some ρ by
    # a rounding ulp ("insufficient budget for query: 0.000748…63 > 0.000748…62"), so the next
    # of these is tried when it does (the last a ρ 10⁻⁵ below dpkit's: σ 5·10⁻⁶ larger).
    tries = (1, 2, 3, 5, 8, 13, 21, 100, 1000, 10_000)
    for parts in tries:
        rho = float(spec["rho"]) * (1 - parts * 1e-9)
        context = dp.Context.compositor(
            data=frame.lazy(),
            privacy_unit=dp.unit_of(contributions=1),
            privacy_loss=dp.loss_of(rho=rho),
            split_evenly_over=1,
            margins=[dp.polars.Margin(max_length=2 * frame.height)],
        )
        algorithm = dp.mbi.MST() if spec["method"] == "mst" else dp.mbi.AIM(queries=2)
        query = context.query().select(*names)
        try:
            table = query.contingency_table(keys=keys, cuts=cuts, algorithm=algorithm).release()
        except Exception as error:  # OpenDP raises its own OpenDPException
            if "insufficient budget" not in str(error) or parts == tries[-1]:
                raise
            continue
        print(f"rho lowered by {parts} part(s) in 1e9", file=sys.stderr)
        break
    synth = table.synthesize(rows=frame.height)
    return synth.to_pandas(), dp.__version__ if hasattr(dp, "__version__") else _version("opendp")


def _smartnoise(spec: dict[str, Any]) -> tuple[Any, str]:
    import numpy as np
    import pandas as pd
    from snsynth import Synthesizer
    from snsynth.transform import LabelTransformer, TableTransformer

    names = list(spec["columns"])
    real = pd.read_csv(spec["path"], usecols=names)[names]
    coded = pd.DataFrame(index=real.index)
    cells = {}
    for c, v in spec["columns"].items():
        if "keys" in v:
            keys = list(v["keys"])
            coded[c] = [keys.index(x) if x in keys else len(keys) for x in real[c]]
            cells[c] = len(keys) + 1  # the declared keys and a missing cell, as dpkit codes them
        else:
            x = pd.to_numeric(real[c], errors="coerce").to_numpy(dtype=float)
            code = np.searchsorted(np.asarray(v["cuts"], dtype=float), x, side="right")
            coded[c] = np.where(np.isfinite(x), code, len(v["cuts"]) + 1)
            cells[c] = len(v["cuts"]) + 2  # the bins and a missing cell
    # The declared cells, not the ones the data has: a transformer fitted on every declared code
    # (left to itself, SmartNoise's preprocessor reads the categories off the data, which is not
    # the guarantee the others give).
    declared = pd.DataFrame(
        {c: np.arange(max(cells.values())) % cells[c] for c in names}, columns=names
    )
    transformer = TableTransformer([LabelTransformer(nullable=False) for _ in names])
    transformer.fit(declared, epsilon=0.0)
    synth = Synthesizer.create(
        spec["method"], epsilon=float(spec["epsilon"]), delta=float(spec["delta"]), verbose=False
    )
    synth.fit(coded, transformer=transformer, preprocessor_eps=0.0)
    out = synth.sample(len(real))
    return out, _version("smartnoise-synth")


def _version(name: str) -> str:
    from importlib.metadata import version

    return version(name)


def main() -> None:
    with open(sys.argv[1], encoding="utf-8") as f:
        spec = json.load(f)
    warnings.simplefilter("ignore")
    start = time.perf_counter()
    frame, version = (_opendp if spec["lib"] == "opendp" else _smartnoise)(spec)
    seconds = time.perf_counter() - start
    frame.to_csv(spec["out"], index=False)
    print(json.dumps({"seconds": seconds, "version": version}))


if __name__ == "__main__":
    main()
