"""Local differential privacy: each respondent randomises their own value.

Frequency oracles (Wang et al., USENIX Security 2017), each with a vectorised
client-side ``perturb`` (every report ε-LDP for any change of that
respondent's value) and a server-side unbiased ``estimate`` with variances and
confidence intervals: :class:`GeneralizedRandomizedResponse`,
:class:`OptimizedUnaryEncoding`, :class:`SymmetricUnaryEncoding`,
:class:`OptimizedLocalHashing`, :class:`HadamardResponse`; :func:`best_oracle` picks the lowest-variance
one for (ε, d). :func:`norm_sub` makes estimates non-negative and sum to n.

Means of numbers in public bounds: :class:`DuchiMean` (one-bit reports) and
:class:`PiecewiseMean` (Wang et al.'s piecewise mechanism on a safe output
grid), both unbiased with a :class:`MeanEstimate`; :func:`best_mean_mechanism`
picks the one with the smaller worst-case variance at ε.

Surveys: :class:`Survey` of declared questions (:func:`yes_no`, :func:`one_of`,
:func:`number`), each with its ε and the lowest-variance mechanism; perturb
on the respondents' side, estimate with intervals on the collector's.
Location privacy lives in :mod:`dpkit.local.location`.
"""

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
from dpkit.local.survey import Question, Survey, SurveyEstimate, number, one_of, yes_no

__all__ = [
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
    "norm_sub",
    "number",
    "one_of",
    "yes_no",
]
