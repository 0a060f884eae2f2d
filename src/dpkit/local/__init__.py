"""Local differential privacy: each respondent randomises their own value.

Frequency oracles (Wang et al., USENIX Security 2017), each with a vectorised
client-side ``perturb`` (every report ε-LDP for any change of that
respondent's value) and a server-side unbiased ``estimate`` with variances and
confidence intervals: :class:`GeneralizedRandomizedResponse`,
:class:`OptimizedUnaryEncoding`, :class:`SymmetricUnaryEncoding`,
:class:`OptimizedLocalHashing`; :func:`best_oracle` picks the lowest-variance
one for (ε, d). :func:`norm_sub` makes estimates non-negative and sum to n.

Means of numbers in public bounds: :class:`DuchiMean` (one-bit reports,
unbiased, with a :class:`MeanEstimate` and its interval).
"""

from dpkit.local._estimate import FrequencyEstimate
from dpkit.local.consistency import norm_sub
from dpkit.local.frequency_oracles import (
    FrequencyOracle,
    GeneralizedRandomizedResponse,
    OptimizedLocalHashing,
    OptimizedUnaryEncoding,
    SymmetricUnaryEncoding,
    best_oracle,
)
from dpkit.local.mean import DuchiMean, MeanEstimate

__all__ = [
    "DuchiMean",
    "FrequencyEstimate",
    "FrequencyOracle",
    "GeneralizedRandomizedResponse",
    "MeanEstimate",
    "OptimizedLocalHashing",
    "OptimizedUnaryEncoding",
    "SymmetricUnaryEncoding",
    "best_oracle",
    "norm_sub",
]
