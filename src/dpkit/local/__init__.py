"""Local differential privacy: each respondent randomises their own value.

Frequency oracles (Wang et al., USENIX Security 2017), each with a vectorised
client-side ``perturb`` (every report ε-LDP for any change of that
respondent's value) and a server-side unbiased ``estimate`` with variances and
confidence intervals: :class:`GeneralizedRandomizedResponse`,
:class:`OptimizedUnaryEncoding`, :class:`SymmetricUnaryEncoding`,
:class:`OptimizedLocalHashing`, :class:`HadamardResponse`; :func:`best_oracle` picks the lowest-variance
one for (ε, d); :data:`ORACLES` lists them by name and :func:`oracle` looks one up
(:mod:`dpkit.local.methods`). :func:`norm_sub` makes estimates non-negative and sum to n.

Means of numbers in public bounds: :class:`DuchiMean` (one-bit reports) and
:class:`PiecewiseMean` (Wang et al.'s piecewise mechanism on a safe output
grid), both unbiased with a :class:`MeanEstimate`; :func:`best_mean_mechanism`
picks the one with the smaller worst-case variance at ε.

Surveys: :class:`Survey` of declared questions (:func:`yes_no`, :func:`one_of`,
:func:`number`), each with its ε and the lowest-variance mechanism; perturb
on the respondents' side, estimate with intervals on the collector's.
Location privacy lives in :mod:`dpkit.local.location`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dpkit._lazy import lazy_exports

if TYPE_CHECKING:
    from dpkit.local import methods
    from dpkit.local._estimate import FrequencyEstimate
    from dpkit.local.consistency import norm_sub
    from dpkit.local.frequency_oracles import (
        FrequencyOracle,
        GeneralizedRandomizedResponse,
        HadamardResponse,
        OptimizedLocalHashing,
        OptimizedUnaryEncoding,
        SymmetricUnaryEncoding,
        best_oracle,
    )
    from dpkit.local.mean import DuchiMean, MeanEstimate, PiecewiseMean, best_mean_mechanism
    from dpkit.local.methods import MEAN_MECHANISMS, ORACLES, mean_mechanism, oracle
    from dpkit.local.survey import Question, Survey, SurveyEstimate, number, one_of, yes_no

__all__ = [
    "MEAN_MECHANISMS",
    "ORACLES",
    "DuchiMean",
    "FrequencyEstimate",
    "FrequencyOracle",
    "GeneralizedRandomizedResponse",
    "HadamardResponse",
    "MeanEstimate",
    "OptimizedLocalHashing",
    "OptimizedUnaryEncoding",
    "PiecewiseMean",
    "Question",
    "Survey",
    "SurveyEstimate",
    "SymmetricUnaryEncoding",
    "best_mean_mechanism",
    "best_oracle",
    "mean_mechanism",
    "methods",
    "norm_sub",
    "number",
    "one_of",
    "oracle",
    "yes_no",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "MEAN_MECHANISMS": "dpkit.local.methods",
        "ORACLES": "dpkit.local.methods",
        "DuchiMean": "dpkit.local.mean",
        "FrequencyEstimate": "dpkit.local._estimate",
        "FrequencyOracle": "dpkit.local.frequency_oracles",
        "GeneralizedRandomizedResponse": "dpkit.local.frequency_oracles",
        "HadamardResponse": "dpkit.local.frequency_oracles",
        "MeanEstimate": "dpkit.local.mean",
        "OptimizedLocalHashing": "dpkit.local.frequency_oracles",
        "OptimizedUnaryEncoding": "dpkit.local.frequency_oracles",
        "PiecewiseMean": "dpkit.local.mean",
        "Question": "dpkit.local.survey",
        "Survey": "dpkit.local.survey",
        "SurveyEstimate": "dpkit.local.survey",
        "SymmetricUnaryEncoding": "dpkit.local.frequency_oracles",
        "best_mean_mechanism": "dpkit.local.mean",
        "best_oracle": "dpkit.local.frequency_oracles",
        "mean_mechanism": "dpkit.local.methods",
        "methods": "dpkit.local.methods",
        "oracle": "dpkit.local.methods",
        "norm_sub": "dpkit.local.consistency",
        "number": "dpkit.local.survey",
        "one_of": "dpkit.local.survey",
        "yes_no": "dpkit.local.survey",
    },
)
