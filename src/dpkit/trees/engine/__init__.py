"""The engine every dpkit tree shares (no estimator lives here).

* ``_grid``: public metadata of the inputs: bounds, categorical domains, the
  data-independent grid of candidate thresholds, and the per-row rules for
  values the grid cannot place.
* ``_growth``: the array tree (:class:`Tree`), level-wise growth with
  vectorised histograms, routing (``apply``) and forests grown as one
  multi-root structure.
* ``_policies``: how a level decides its splits (exponential mechanism /
  permute-and-flip over a utility, or random), which is where a tree spends
  its split budget.
* ``_budget``: exact budget splits (fractions) and the randomness plumbing.
* ``_privacy``: the ``privacy_`` report and the paid fit (accountant first).
* ``_rules``: the public "auto" rules (depth, rounds) of a noisy row count.
* ``_choices``: one registry per choice by name (criterion, selector,
  algorithm, partition, missing, leaf, loss): its names, its lookup and error,
  and the scikit-learn constraint built from them.
* ``_sklearn``: the scikit-learn plumbing (validation without quoting data).
* ``_export``: text, rules and Graphviz exports of any fitted tree.
"""
