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
    # One part in 10⁹ below dpkit's ρ: OpenDP's own float split of the budget otherwise refuses
    # some ρ by a rounding ulp ("insufficient budget for query: 0.000748…93 > 0.000748…91").
    rho = float(spec["rho"]) * (1 - 1e-9)
    context = dp.Context.compositor(
        data=frame.lazy(),
        privacy_unit=dp.unit_of(contributions=1),
        privacy_loss=dp.loss_of(rho=rho),
        split_evenly_over=1,
        margins=[dp.polars.Margin(max_length=2 * frame.height)],
    )
    algorithm = dp.mbi.MST() if spec["method"] == "mst" else dp.mbi.AIM(queries=2)
    table = (
        context.query().select(*names).contingency_table(keys=keys, cuts=cuts, algorithm=algorithm)
    ).release()
    synth = table.synthesize(rows=frame.height)
    return synth.to_pandas(), dp.__version__ if hasattr(dp, "__version__") else _version("opendp")


def _smartnoise(spec: dict[str, Any]) -> tuple[Any, str]:
    import numpy as np
    import pandas as pd
    from snsynth import Synthesizer

    names = list(spec["columns"])
    real = pd.read_csv(spec["path"], usecols=names)[names]
    coded = pd.DataFrame(index=real.index)
    for c, v in spec["columns"].items():
        if "keys" in v:
            keys = list(v["keys"])
            coded[c] = [keys.index(x) if x in keys else len(keys) for x in real[c]]
        else:
            x = pd.to_numeric(real[c], errors="coerce").to_numpy(dtype=float)
            code = np.searchsorted(np.asarray(v["cuts"], dtype=float), x, side="right")
            coded[c] = np.where(np.isfinite(x), code, len(v["cuts"]) + 1)
    synth = Synthesizer.create(
        spec["method"], epsilon=float(spec["epsilon"]), delta=float(spec["delta"]), verbose=False
    )
    synth.fit(coded, categorical_columns=names, preprocessor_eps=0.0)
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
