"""The public settings of one classification tree (shared by the greedy, ID3 and random growers)."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction


@dataclass
class ClassificationTreeSpec:
    """Public settings of one classification tree (all data-independent).

    ``algorithm``:
      * "greedy": exponential-mechanism splits (Friedman & Schuster) with the
        utility of ``criterion``; ``count_share`` of each split level's budget
        buys a noisy node count, nodes below ``min_samples_split`` stop;
      * "id3": ID3 on Laplace/geometric-noised class counts (the decision-tree course project;
        SuLQ as summarised in the applications report), see ``_id3``;
      * "random": data-independent structure, all budget on the leaves.
    ``leaf_share``: fraction of epsilon spent on the leaf counts (random: 1).
    ``smoothing``: pseudo-rows pulling leaf probabilities toward their parent's
    (post-processing).
    ``level_growth`` r: split level t gets a share proportional to r^t of the
    split budget (r > 1: more budget deeper, where nodes hold fewer rows).
    """

    algorithm: str
    criterion: str
    max_depth: int
    leaf_share: Fraction = Fraction(1, 2)
    count_share: Fraction = Fraction(0)
    min_samples_split: float = 0.0
    min_information_gain: float = 0.0
    smoothing: float = 1.0
    selector: str = "exponential"
    level_growth: Fraction = Fraction(1)
