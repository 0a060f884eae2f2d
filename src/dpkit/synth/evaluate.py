"""How close a synthetic table is to the real one: two-way total-variation distances.

Optionally also the utility of the synthetic table for a downstream model:
"train on synthetic, test on real" (TSTR) against "train on real, test on
real" (TRTR), with scikit-learn.

NOT differentially private: it reads the real table as it is. It is a tool
for the data owner (who may see the data) to judge a release before
publishing it; its numbers must not be published as if they were DP.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from dpkit.errors import InvalidParameterError

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = ["Evaluation", "evaluate"]


@dataclass(frozen=True)
class Evaluation:
    """``mean`` and ``max`` of ``pairs`` (each column pair's two-way total-variation distance).

    ``utility`` (when ``evaluate`` was given a ``target``): the downstream
    scores on the real test part, ``accuracy_synthetic`` / ``accuracy_real``
    for the model trained on the synthetic table / on the real train part,
    and ``auc_synthetic`` / ``auc_real`` (ROC AUC) for a binary target.
    """

    mean: float
    max: float
    pairs: dict[tuple[str, str], float]
    utility: dict[str, float] | None = None

    def plot(self, ax: Any = None) -> Axes:
        """Draw each column pair's TV distance as a horizontal bar, the mean as a line.

        Sorted with the largest distance on top; the ``utility`` scores, if
        any, go into the title. Draws on ``ax`` or on a new figure (no pyplot
        state, so it works without a display). Returns the Axes.
        """
        from matplotlib.figure import Figure

        if ax is None:
            fig = Figure(figsize=(7.0, 1.6 + 0.3 * len(self.pairs)), layout="constrained")
            ax = fig.add_subplot()
        items = sorted(self.pairs.items(), key=lambda item: item[1])
        positions = np.arange(len(items))
        ax.barh(positions, [v for _, v in items], color="#0072B2", height=0.7)
        ax.set_yticks(positions, [f"{a} \u00d7 {b}" for (a, b), _ in items])
        ax.axvline(self.mean, color="#D55E00", linestyle="--", label=f"mean {self.mean:.3f}")
        ax.set_xlabel("two-way total-variation distance (real vs synthetic)")
        ax.legend(frameon=False, fontsize=9, loc="lower right")
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
        ax.tick_params(colors="#333333", labelsize=9)
        ax.grid(axis="x", color="#e6e6e6", linewidth=0.8)
        ax.set_axisbelow(True)
        if self.utility is not None:
            u = self.utility
            title = (
                "train on synthetic / on real, test on real: "
                f"accuracy {u['accuracy_synthetic']:.3f} / {u['accuracy_real']:.3f}"
            )
            if "auc_synthetic" in u:
                title += f", AUC {u['auc_synthetic']:.3f} / {u['auc_real']:.3f}"
            ax.set_title(title, fontsize=10)
        return ax


def _cells(values: pd.Series, edges: Sequence[float] | None) -> pd.Series:
    """Each value's cell: its bin under ``edges`` (clamped to the end bins), else the value itself.

    Missing values (None, NaN, ±inf) form one cell of their own.
    """
    if edges is None:
        return values.astype(object).where(values.notna(), "<missing>").astype(str)
    x = pd.to_numeric(values, errors="coerce").to_numpy(dtype=np.float64)
    e = np.asarray(edges, dtype=np.float64)
    codes = np.clip(np.searchsorted(e, x, side="right") - 1, 0, len(e) - 2)
    return pd.Series(np.where(np.isfinite(x), codes.astype(str), "<missing>"), index=values.index)


def evaluate(
    real: pd.DataFrame,
    synthetic: pd.DataFrame,
    columns: Sequence[str],
    *,
    edges: Mapping[str, Sequence[float]] | None = None,
    target: str | None = None,
    seed: int = 0,
) -> Evaluation:
    """Mean and max total-variation distance between the two tables' two-way marginals.

    For every pair of ``columns``, TV = ½ Σ |p_real(cell) - p_synth(cell)|
    over the cells of the pair (each table's counts divided by its own
    rows). A column named in ``edges`` is compared by bin (values beyond the
    outer edges in the end bins: the rule of :mod:`dpkit.synth.domain`, so a
    synthetic column of bin midpoints compares with the real values); other
    columns by value. For a table from ``Session.synthesize``, pass
    ``edges=result.report.edges`` (numeric columns hold bin midpoints).

    With ``target`` (one of ``columns``), also the downstream utility
    (``Evaluation.utility``): the real table is split 70/30 (``seed``;
    stratified by the target when every class has two rows or more); a
    logistic regression predicting the target's cell from the other columns'
    cells (one-hot, cells as above; a numeric target with edges is
    predicted by bin) is fitted on the whole synthetic table and on the real
    train part, and both are scored on the real test part.

    Not DP: run by the data owner, on the real data; see the module docstring.
    """
    names = list(columns)
    if len(names) < 2:
        raise InvalidParameterError("evaluate needs at least two columns.")
    for frame, what in ((real, "real"), (synthetic, "synthetic")):
        missing = [c for c in names if c not in frame.columns]
        if missing:
            raise InvalidParameterError(f"the {what} table has no column(s) {missing}.")
    if target is not None and target not in names:
        raise InvalidParameterError(f"target {target!r} is not one of the columns {names}.")
    edges = dict(edges or {})
    r = {c: _cells(real[c], edges.get(c)) for c in names}
    s = {c: _cells(synthetic[c], edges.get(c)) for c in names}
    pairs: dict[tuple[str, str], float] = {}
    for a, b in combinations(names, 2):
        p = pd.crosstab(r[a], r[b], normalize=True).stack()
        q = pd.crosstab(s[a], s[b], normalize=True).stack()
        p, q = p.align(q, fill_value=0.0)
        pairs[a, b] = float(0.5 * np.abs(p.to_numpy() - q.to_numpy()).sum())
    values = list(pairs.values())
    utility = None
    if target is not None:
        utility = _utility(r, s, [c for c in names if c != target], target, seed)
    return Evaluation(float(np.mean(values)), float(np.max(values)), pairs, utility)


def _utility(
    real: Mapping[str, pd.Series],
    synthetic: Mapping[str, pd.Series],
    features: Sequence[str],
    target: str,
    seed: int,
) -> dict[str, float]:
    """TSTR and TRTR scores of a logistic regression on the coded cells (see ``evaluate``)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import accuracy_score, roc_auc_score
    from sklearn.model_selection import train_test_split
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import OneHotEncoder

    x_real = pd.DataFrame({c: real[c] for c in features})
    x_synth = pd.DataFrame({c: synthetic[c] for c in features})
    y_real, y_synth = real[target], synthetic[target]
    if y_synth.nunique() < 2:
        raise InvalidParameterError(
            f"the synthetic table has a single class of the target {target!r}: "
            "no model can be trained on it; choose another target or check the table."
        )
    counts = y_real.value_counts()
    if counts.size < 2:
        raise InvalidParameterError(
            f"the real table has a single class of the target {target!r}: "
            "there is nothing to predict; choose another target."
        )
    n_test = int(np.ceil(0.3 * len(y_real)))
    stratified = counts.min() >= 2 and min(n_test, len(y_real) - n_test) >= counts.size
    x_train, x_test, y_train, y_test = train_test_split(
        x_real,
        y_real,
        test_size=0.3,
        random_state=seed,
        stratify=y_real if stratified else None,
    )
    if y_train.nunique() < 2:
        raise InvalidParameterError(
            f"the real train part has a single class of the target {target!r}: "
            "the real table is too small for a 70/30 split; use more rows."
        )

    def model() -> Pipeline:
        return Pipeline(
            [
                ("onehot", OneHotEncoder(handle_unknown="ignore")),
                ("model", LogisticRegression(max_iter=1000)),
            ]
        )

    fitted = {"synthetic": model().fit(x_synth, y_synth), "real": model().fit(x_train, y_train)}
    scores: dict[str, float] = {}
    for name, m in fitted.items():
        scores[f"accuracy_{name}"] = float(accuracy_score(y_test, m.predict(x_test)))
    classes = sorted(counts.index)
    if len(classes) == 2 and y_test.nunique() == 2:
        positive = classes[1]
        truth = (y_test == positive).to_numpy()
        for name, m in fitted.items():
            known = list(m.classes_)
            proba = m.predict_proba(x_test)
            p = proba[:, known.index(positive)] if positive in known else np.zeros(len(truth))
            scores[f"auc_{name}"] = float(roc_auc_score(truth, p))
    return scores
