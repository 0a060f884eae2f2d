"""DP synthetic data: marginals measured through dpkit's engines and accountant, a model sampled.

``Session.synthesize(method="mst", rows=..., epsilon=..., delta=...)`` runs
MST (:mod:`dpkit.synth.mst`, McKenna, Miklau & Sheldon 2021): noisy one-way
marginals, a private maximum spanning tree of column pairs, their noisy
marginals, then a graphical model fitted to them and sampled (Private-PGM,
the ``mbi`` package, loaded only here: ``pip install dpkit[synth]``). The
columns are discretised by their declared domains and bounds
(:mod:`dpkit.synth.domain`); the marginals are GROUP BY counts computed by the
engine (:mod:`dpkit.synth.marginals`). :func:`evaluate` (not DP, for the data
owner) measures the two-way total-variation error of a synthetic table.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dpkit._lazy import lazy_exports

if TYPE_CHECKING:
    from dpkit.synth.evaluate import Evaluation, evaluate
    from dpkit.synth.session import SynthesisReport, SynthesisResult

__all__ = ["Evaluation", "SynthesisReport", "SynthesisResult", "evaluate"]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "Evaluation": "dpkit.synth.evaluate",
        "evaluate": "dpkit.synth.evaluate",
        "SynthesisReport": "dpkit.synth.session",
        "SynthesisResult": "dpkit.synth.session",
    },
)
