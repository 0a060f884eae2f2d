"""Benchmark of dpkit's DP classification trees and forests (issue 5). One command measures all:

    .venv/bin/python benchmarks/trees_classification.py           # full run (~10 min, 2 cores)
    .venv/bin/python benchmarks/trees_classification.py --quick   # smoke test
    .venv/bin/python benchmarks/trees_classification.py --defaults  # the experiment behind the defaults
    .venv/bin/python benchmarks/trees_classification.py --replot OUT.json  # redraw the figures

1. Accuracy (and AUC) on the same random 70/30 splits for every model, at
   epsilon in {0.1, 0.5, 1, 2, 5}: Titanic (``--titanic``, 20 splits), the
   breast-cancer data bundled with scikit-learn (20 splits) and a generated
   census-like table of 50,000 rows (``make_mixed_table``, 5 splits) and California
   housing as a classification task (value above the median; ``--california``, 5 splits).
   Models: dpkit's boosted classifier, tree and forest (defaults) and its other algorithms;
   diffprivlib's DecisionTreeClassifier, RandomForestClassifier and GaussianNB
   (in the isolated ``.venv-bench``, scikit-learn < 1.6, see
   ``benchmarks/requirements-peers.txt``; this same file runs there with
   ``--peers SPEC``); DP-EBM (``interpret-core``, delta = 1e-6) with its
   defaults and with learning_rate = 0.1; non-private scikit-learn
   DecisionTreeClassifier(max_depth=5) and RandomForestClassifier (the limit).
2. Speed on 50,000 x 14 generated rows, depth 6: one tree, a 100-tree forest,
   prediction on 1,000,000 rows, against scikit-learn and diffprivlib in the
   same run.

Peers that need numbers get the same features: categorical columns one-hot
encoded, missing numeric values replaced by a public constant plus a missing
indicator. Nothing is written into the repository except ``--out`` (JSON) and,
with ``--plots``, the figures under docs/img/.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
EPSILONS = (0.1, 0.5, 1.0, 2.0, 5.0)

# --------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------

OCCUPATIONS = [
    "exec",
    "prof",
    "tech",
    "sales",
    "craft",
    "admin",
    "service",
    "farming",
    "transport",
    "handler",
]
OCC_EFFECT = np.array([1.0, 0.9, 0.5, 0.2, 0.0, -0.2, -1.0, -0.8, -0.3, -1.0])
MARITAL = ["never", "married", "divorced", "widowed", "separated"]
MARITAL_EFFECT = np.array([-1.0, 2.2, 0.0, -0.3, -0.2])
REGIONS = ["north", "south", "east", "west", "central", "coast", "mountain", "islands"]
REGION_EFFECT = np.array([0.2, -0.2, 0.1, 0.0, -0.1, 0.25, -0.15, 0.0])
EMPLOYMENT = ["private", "self", "government", "none"]
EMPLOYMENT_EFFECT = np.array([0.0, 0.3, 0.1, -1.2])

MIXED_BOUNDS = {
    "age": (17.0, 90.0),
    "hours_per_week": (1.0, 99.0),
    "education_years": (1.0, 20.0),
    "capital_gain": (0.0, 100_000.0),
    "capital_loss": (0.0, 5_000.0),
    "years_at_job": (0.0, 60.0),
    "children": (0.0, 10.0),
    "commute_km": (0.0, 200.0),
    "credit_score": (300.0, 850.0),
}
MIXED_DOMAINS = {
    "sex": ["female", "male"],
    "marital": MARITAL,
    "occupation": OCCUPATIONS,
    "region": REGIONS,
    "employment": EMPLOYMENT,
}


def make_mixed_table(n_rows: int = 50_000, seed: int = 0) -> tuple[Any, np.ndarray]:
    """A census-like table of 9 numeric and 5 categorical columns with a non-linear label.

    Generator (documented in docs/trees-classification.md): age ~ 17 + Gamma;
    marital status depends on age; education years ~ rounded normal; the
    occupation depends on education (softmax of education x occupation
    affinities); hours, years at the job (<= age - 17), capital gain (92 % zero,
    else log-normal), capital loss (95 % zero), children, commute distance and a
    credit score (correlated with age and education). The label is
    Bernoulli(sigmoid(f)) with f a sum of non-linear parts: an inverted-U in age
    (peak at 48), steps in education at 13 and 16 years, capped hours, a
    threshold at capital gain 7,000 (+3.5), a band of capital losses, marital,
    occupation, region and employment effects, a married x male and a
    professional x degree interaction and a saturating job-tenure effect.
    About 28 % positives; the Bayes accuracy (from the true probabilities) is 0.857.
    """
    import pandas as pd

    rng = np.random.default_rng(seed)
    n = n_rows
    age = np.clip(17 + rng.gamma(3.0, 8.0, n), 17, 90)
    p_married = 1 / (1 + np.exp(-(age - 30) / 6))
    marital = np.where(
        rng.random(n) < p_married,
        rng.choice([1, 2, 3, 4], size=n, p=[0.72, 0.16, 0.06, 0.06]),
        0,
    )
    marital = np.where((marital == 3) & (age < 45), 1, marital)
    sex = rng.integers(0, 2, n)
    edu = np.clip(np.rint(rng.normal(12.5, 2.8, n)), 1, 20)
    affinity = np.array([0.35, 0.45, 0.25, 0.05, -0.15, 0.05, -0.3, -0.35, -0.2, -0.4])
    logits = np.outer(edu - 12, affinity) + rng.gumbel(size=(n, len(OCCUPATIONS)))
    occupation = logits.argmax(axis=1)
    hours = np.clip(np.rint(rng.normal(40, 11, n)), 1, 99)
    years = np.clip(rng.exponential(7, n), 0, age - 17)
    gain = np.where(rng.random(n) < 0.08, np.exp(rng.normal(8.5, 1.2, n)), 0.0)
    loss = np.where(rng.random(n) < 0.05, rng.normal(1900, 350, n), 0.0)
    children = np.clip(rng.poisson(np.where(marital > 0, 1.6, 0.3)), 0, 10)
    commute = np.clip(rng.exponential(18, n), 0, 200)
    credit = np.clip(rng.normal(640 + 2.0 * (age - 40) + 8 * (edu - 12), 70, n), 300, 850)
    region = rng.integers(0, len(REGIONS), n)
    employment = rng.choice(4, size=n, p=[0.7, 0.1, 0.14, 0.06])
    f = (
        -2.6
        - 1.5 * ((age - 48) / 14) ** 2
        + 1.2 * (edu >= 13)
        + 0.8 * (edu >= 16)
        + 0.04 * (np.minimum(hours, 60) - 40)
        + 3.5 * (gain > 7000)
        + 1.5 * ((loss > 1800) & (loss < 2400))
        + MARITAL_EFFECT[marital]
        + OCC_EFFECT[occupation]
        + REGION_EFFECT[region]
        + EMPLOYMENT_EFFECT[employment]
        + 0.4 * ((marital == 1) & (sex == 1))
        + 0.8 * ((occupation == 1) & (edu >= 16))
        + 0.4 * np.tanh(years / 10)
        - 0.05 * children
        + 0.002 * (credit - 640)
    )
    y = (rng.random(n) < 1 / (1 + np.exp(-f))).astype(np.int64)
    X = pd.DataFrame(
        {
            "age": np.rint(age),
            "sex": pd.Categorical.from_codes(sex, MIXED_DOMAINS["sex"]),
            "marital": pd.Categorical.from_codes(marital, MARITAL),
            "education_years": edu,
            "occupation": pd.Categorical.from_codes(occupation, OCCUPATIONS),
            "hours_per_week": hours,
            "years_at_job": np.round(years, 1),
            "capital_gain": np.round(gain),
            "capital_loss": np.round(np.maximum(loss, 0.0)),
            "children": children.astype(np.float64),
            "commute_km": np.round(commute, 1),
            "credit_score": np.rint(credit),
            "region": pd.Categorical.from_codes(region, REGIONS),
            "employment": pd.Categorical.from_codes(employment, EMPLOYMENT),
        }
    )
    return X, y


def cancer_data() -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """scikit-learn's breast-cancer data with public bounds from its documentation.

    The bounds are the published ranges of the dataset's description (DESCR,
    "Summary Statistics"), widened to [0, 1.25 x max]: a codebook, as a data
    owner would publish, the same for every model in the benchmark.
    """
    from sklearn.datasets import load_breast_cancer

    data = load_breast_cancer()
    descr = data.DESCR
    block = descr[descr.index("Summary Statistics") :].split("\n")
    highs = []
    for line in block:
        if ":" in line and "(" in line and line.strip()[0].isalpha():
            parts = line.split(":")[1].split()
            if len(parts) == 2:
                highs.append(float(parts[1]))
    highs_arr = np.array(highs[: data.data.shape[1]]) * 1.25
    return data.data, data.target, (np.zeros(data.data.shape[1]), highs_arr)


class Dataset:
    """One benchmark dataset in both shapes: a DataFrame / array for dpkit, numbers for peers."""

    def __init__(
        self,
        name: str,
        X: Any,
        y: np.ndarray,
        dpkit_meta: dict[str, Any],
        numeric: np.ndarray,
        numeric_bounds: tuple[np.ndarray, np.ndarray],
        ebm_types: list[Any],
        ebm_bounds: dict[Any, tuple[float, float]],
        reps: int,
    ) -> None:
        self.name, self.X, self.y = name, X, y
        self.dpkit_meta = dpkit_meta
        self.numeric, self.numeric_bounds = numeric, numeric_bounds
        self.ebm_types, self.ebm_bounds = ebm_types, ebm_bounds
        self.reps = reps
        self.splits = [split_indices(len(y), rep) for rep in range(reps)]
        #: fits per split, each with its own noise seed (``--noise-seeds``)
        self.noise_seeds = 1

    def fits(self) -> list[tuple[int, tuple[np.ndarray, np.ndarray]]]:
        """(seed, split) for every split and noise seed: split r's k-th fit has seed r + 1000 k
        (k = 0 is the one-seed protocol's seed), so more seeds only add fits."""
        return [
            (rep + 1000 * k, split)
            for k in range(self.noise_seeds)
            for rep, split in enumerate(self.splits)
        ]

    def rows(self, idx: np.ndarray) -> Any:
        return self.X.iloc[idx] if hasattr(self.X, "iloc") else self.X[idx]


def split_indices(n: int, rep: int, test: float = 0.3) -> tuple[np.ndarray, np.ndarray]:
    perm = np.random.default_rng(1000 + rep).permutation(n)
    cut = round(n * (1 - test))
    return np.sort(perm[:cut]), np.sort(perm[cut:])


def _numeric_frame(
    X: Any, bounds: dict[str, tuple[float, float]], fills: dict[str, float]
) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """One-hot categoricals, numeric columns with a public fill value plus a missing indicator."""
    import pandas as pd

    cols, lows, highs = [], [], []
    for name in X.columns:
        series = X[name]
        if isinstance(series.dtype, pd.CategoricalDtype):
            for cat in series.cat.categories:
                cols.append((series == cat).to_numpy(dtype=np.float64))
                lows.append(0.0)
                highs.append(1.0)
        else:
            values = series.to_numpy(dtype=np.float64)
            lo, hi = bounds[name]
            if np.isnan(values).any() or name in fills:
                cols.append(np.isnan(values).astype(np.float64))
                lows.append(0.0)
                highs.append(1.0)
                values = np.where(np.isnan(values), fills.get(name, lo), values)
            cols.append(np.clip(values, lo, hi))
            lows.append(lo)
            highs.append(hi)
    return np.column_stack(cols), (np.array(lows), np.array(highs))


# Public bounds for California housing (a codebook: the state's bounding box, and caps
# on the per-household averages and block population; values beyond are clipped).
CALIFORNIA_BOUNDS = {
    "MedInc": (0.0, 15.0),
    "HouseAge": (1.0, 52.0),
    "AveRooms": (0.0, 15.0),
    "AveBedrms": (0.0, 4.0),
    "Population": (0.0, 10_000.0),
    "AveOccup": (0.0, 8.0),
    "Latitude": (32.0, 42.0),
    "Longitude": (-125.0, -114.0),
}
# The classification task: median house value above the data's median ($179,700).
CALIFORNIA_THRESHOLD = 1.797


def california_classification(path: Path) -> tuple[Any, np.ndarray]:
    """California housing (shared data) as a binary task: value above the median."""
    import pandas as pd

    frame = pd.read_csv(path)
    y = (frame.pop("MedHouseVal") > CALIFORNIA_THRESHOLD).to_numpy(dtype=np.int64)
    return frame[list(CALIFORNIA_BOUNDS)], y


def load_datasets(
    titanic: Path | None, quick: bool, california: Path | None = None
) -> list[Dataset]:
    from dpkit.walkthroughs.titanic import BOUNDS as TITANIC_BOUNDS
    from dpkit.walkthroughs.titanic import DOMAINS as TITANIC_DOMAINS
    from dpkit.walkthroughs.titanic import load_titanic

    out = []
    small_reps = 4 if quick else 20
    if titanic is not None and titanic.exists():
        X, y = load_titanic(titanic)
        num, nb = _numeric_frame(X, TITANIC_BOUNDS, {"Age": 30.0})
        types = ["nominal" if c in TITANIC_DOMAINS else "continuous" for c in X.columns]
        out.append(
            Dataset(
                "titanic",
                X,
                y,
                {"bounds": TITANIC_BOUNDS, "domains": TITANIC_DOMAINS, "missing": "separate"},
                num,
                nb,
                types,
                dict(TITANIC_BOUNDS),
                small_reps,
            )
        )
    Xc, yc, bc = cancer_data()
    out.append(
        Dataset(
            "breast_cancer",
            Xc,
            yc,
            {"bounds": bc},
            Xc.copy(),
            bc,
            ["continuous"] * Xc.shape[1],
            {j: (float(bc[0][j]), float(bc[1][j])) for j in range(Xc.shape[1])},
            small_reps,
        )
    )
    Xm, ym = make_mixed_table(12_000 if quick else 50_000, seed=0)
    num, nb = _numeric_frame(Xm, MIXED_BOUNDS, {})
    out.append(
        Dataset(
            "mixed_50k" if not quick else "mixed_12k",
            Xm,
            ym,
            {"bounds": MIXED_BOUNDS, "domains": MIXED_DOMAINS},
            num,
            nb,
            ["nominal" if c in MIXED_DOMAINS else "continuous" for c in Xm.columns],
            dict(MIXED_BOUNDS),
            2 if quick else 5,
        )
    )
    if california is not None and california.exists():
        Xh, yh = california_classification(california)
        num, nb = _numeric_frame(Xh, CALIFORNIA_BOUNDS, {})
        out.append(
            Dataset(
                "california",
                Xh,
                yh,
                {"bounds": CALIFORNIA_BOUNDS},
                num,
                nb,
                ["continuous"] * Xh.shape[1],
                dict(CALIFORNIA_BOUNDS),
                2 if quick else 5,
            )
        )
    return out


# --------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------

DPKIT_MODELS: dict[str, dict[str, Any]] = {
    "dpkit boosting (default)": {"kind": "boosting"},
    "dpkit tree (default)": {"kind": "tree"},
    "dpkit forest (default)": {"kind": "forest"},
    "dpkit tree, id3": {"kind": "tree", "algorithm": "id3"},
    "dpkit tree, max operator": {"kind": "tree", "criterion": "max"},
    "dpkit random forest (50 random trees)": {
        "kind": "forest",
        "algorithm": "random",
        "n_estimators": 50,
    },
}


def make_dpkit(spec: dict[str, Any], eps: float, seed: int, meta: dict[str, Any]) -> Any:
    from dpkit.trees import (
        DPDecisionTreeClassifier,
        DPGradientBoostingClassifier,
        DPRandomForestClassifier,
    )

    params = dict(spec)
    kind = params.pop("kind")
    cls = {
        "forest": DPRandomForestClassifier,
        "tree": DPDecisionTreeClassifier,
        "boosting": DPGradientBoostingClassifier,
    }[kind]
    return cls(epsilon=eps, classes=[0, 1], random_state=seed, **meta, **params)


def _auc(y: np.ndarray, score: np.ndarray) -> float:
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(y, score)) if len(np.unique(y)) == 2 else float("nan")


def run_dpkit(
    ds: Dataset, epsilons: tuple[float, ...], models: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, spec in models.items():
        for eps in epsilons:
            accs, aucs = [], []
            for rep, (tr, te) in ds.fits():
                model = make_dpkit(spec, eps, 10_000 + rep, ds.dpkit_meta)
                model.fit(ds.rows(tr), ds.y[tr])
                proba = model.predict_proba(ds.rows(te))[:, 1]
                accs.append(float(np.mean((proba > 0.5) == ds.y[te])))
                aucs.append(_auc(ds.y[te], proba))
            out.setdefault(name, {})[str(eps)] = {"accuracy": accs, "auc": aucs}
    return out


#: The non-private reference of the boosting floors (issue: within 0.010 AUC at ε = 1).
HGB = "scikit-learn HistGradientBoosting (non-private)"


def run_sklearn(ds: Dataset) -> dict[str, Any]:
    from sklearn.ensemble import HistGradientBoostingClassifier, RandomForestClassifier
    from sklearn.tree import DecisionTreeClassifier

    out: dict[str, Any] = {}
    models = {
        HGB: lambda s: HistGradientBoostingClassifier(random_state=s),
        "scikit-learn tree (depth 5, non-private)": lambda s: DecisionTreeClassifier(
            max_depth=5, random_state=s
        ),
        "scikit-learn forest (100 trees, non-private)": lambda s: RandomForestClassifier(
            100, random_state=s, n_jobs=1
        ),
    }
    for name, factory in models.items():
        accs, aucs = [], []
        for rep, (tr, te) in enumerate(ds.splits):
            m = factory(rep).fit(ds.numeric[tr], ds.y[tr])
            proba = m.predict_proba(ds.numeric[te])[:, 1]
            accs.append(float(np.mean((proba > 0.5) == ds.y[te])))
            aucs.append(_auc(ds.y[te], proba))
        out[name] = {"all": {"accuracy": accs, "auc": aucs}}
    return out


def run_ebm(ds: Dataset, epsilons: tuple[float, ...]) -> dict[str, Any]:
    try:
        from interpret.privacy import DPExplainableBoostingClassifier
    except ImportError as err:  # a benchmark-only dependency
        return {"error": f"interpret-core not installed ({err})"}
    import pandas as pd

    warnings.filterwarnings("ignore")
    X = ds.X
    types, bounds = list(ds.ebm_types), dict(ds.ebm_bounds)
    if isinstance(X, pd.DataFrame):
        # DP-EBM's private binning refuses NaN: categorical NaN becomes the category
        # "missing", a numeric NaN a public constant (the bounds' midpoint) plus an indicator.
        X = X.copy()
        for c in list(X.columns):
            if isinstance(X[c].dtype, pd.CategoricalDtype):
                X[c] = X[c].astype(object).where(X[c].notna(), "missing").astype(str)
            elif X[c].isna().any():
                lo, hi = bounds[c]
                X[c + "_missing"] = np.where(X[c].isna(), "yes", "no")
                X[c] = X[c].fillna((lo + hi) / 2)
                types.append("nominal")
    out: dict[str, Any] = {}
    variants = {
        "DP-EBM (defaults, delta 1e-6)": {},
        "DP-EBM (learning_rate 0.1, delta 1e-6)": {"learning_rate": 0.1},
    }
    for name, extra in variants.items():
        for eps in epsilons:
            accs, aucs = [], []
            for rep, (tr, te) in ds.fits():
                m = DPExplainableBoostingClassifier(
                    epsilon=eps,
                    delta=1e-6,
                    feature_types=types,
                    privacy_bounds=bounds,
                    random_state=rep,
                    n_jobs=1,
                    **extra,
                )
                Xtr = X.iloc[tr] if hasattr(X, "iloc") else X[tr]
                Xte = X.iloc[te] if hasattr(X, "iloc") else X[te]
                m.fit(Xtr, ds.y[tr])
                proba = m.predict_proba(Xte)[:, 1]
                accs.append(float(np.mean((proba > 0.5) == ds.y[te])))
                aucs.append(_auc(ds.y[te], proba))
            out.setdefault(name, {})[str(eps)] = {"accuracy": accs, "auc": aucs}
    return out


# --------------------------------------------------------------------------
# Peers in the isolated environment (diffprivlib needs scikit-learn < 1.6)
# --------------------------------------------------------------------------


def run_peers(
    datasets: list[Dataset],
    epsilons: tuple[float, ...],
    python: Path,
    speed_rows: np.ndarray | None,
    speed_y: np.ndarray | None,
    speed_bounds: Any,
) -> dict[str, Any]:
    if not python.exists():
        return {
            "error": f"{python} not found: create it with python3 -m venv .venv-bench && .venv-bench/bin/pip install -r benchmarks/requirements-peers.txt"
        }
    with tempfile.TemporaryDirectory() as tmp:
        spec: dict[str, Any] = {"epsilons": list(epsilons), "datasets": []}
        for ds in datasets:
            path = Path(tmp) / f"{ds.name}.npz"
            np.savez(
                path,
                X=ds.numeric,
                y=ds.y,
                lows=ds.numeric_bounds[0],
                highs=ds.numeric_bounds[1],
                train=np.array([tr for tr, _ in ds.splits], dtype=object),
                test=np.array([te for _, te in ds.splits], dtype=object),
            )
            spec["datasets"].append({"name": ds.name, "path": str(path)})
        if speed_rows is not None:
            path = Path(tmp) / "speed.npz"
            np.savez(path, X=speed_rows, y=speed_y, lows=speed_bounds[0], highs=speed_bounds[1])
            spec["speed"] = str(path)
        spec_path = Path(tmp) / "spec.json"
        spec_path.write_text(json.dumps(spec), encoding="utf-8")
        done = subprocess.run(
            [str(python), str(Path(__file__).resolve()), "--peers", str(spec_path)],
            capture_output=True,
            text=True,
            check=False,
        )
    if done.returncode != 0:
        return {"error": "peers failed: " + done.stderr[-3000:]}
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def peer_main(spec_path: str) -> None:
    """Runs inside .venv-bench: NumPy, scikit-learn < 1.6 and diffprivlib only."""
    from importlib.metadata import version

    import diffprivlib.models as dpl
    from sklearn.metrics import roc_auc_score

    warnings.filterwarnings("ignore")
    spec = json.loads(Path(spec_path).read_text(encoding="utf-8"))
    out: dict[str, Any] = {
        "accuracy": {},
        "speed": {},
        "versions": {lib: version(lib) for lib in ("diffprivlib", "scikit-learn", "numpy")},
    }
    models = {
        "diffprivlib tree (depth 5)": lambda e, b, s: dpl.DecisionTreeClassifier(
            max_depth=5, epsilon=e, bounds=b, classes=[0, 1], random_state=s
        ),
        "diffprivlib forest (10 trees, depth 5)": lambda e, b, s: dpl.RandomForestClassifier(
            n_estimators=10, max_depth=5, epsilon=e, bounds=b, classes=[0, 1], random_state=s
        ),
        "diffprivlib forest (100 trees, depth 5)": lambda e, b, s: dpl.RandomForestClassifier(
            n_estimators=100, max_depth=5, epsilon=e, bounds=b, classes=[0, 1], random_state=s
        ),
        "diffprivlib GaussianNB": lambda e, b, s: dpl.GaussianNB(
            epsilon=e, bounds=b, random_state=s
        ),
    }
    for ds in spec["datasets"]:
        data = np.load(ds["path"], allow_pickle=True)
        X, y = data["X"], data["y"]
        bounds = (data["lows"], data["highs"])
        res: dict[str, Any] = {}
        for name, factory in models.items():
            for eps in spec["epsilons"]:
                accs, aucs = [], []
                for rep, (tr_obj, te_obj) in enumerate(zip(data["train"], data["test"])):
                    tr, te = np.asarray(tr_obj, dtype=np.int64), np.asarray(te_obj, dtype=np.int64)
                    m = factory(eps, bounds, rep).fit(X[tr], y[tr])
                    proba = m.predict_proba(X[te])[:, 1]
                    accs.append(float(np.mean((proba > 0.5) == y[te])))
                    aucs.append(
                        float(roc_auc_score(y[te], proba))
                        if len(np.unique(y[te])) == 2
                        else float("nan")
                    )
                res.setdefault(name, {})[str(eps)] = {"accuracy": accs, "auc": aucs}
        out["accuracy"][ds["name"]] = res
    if spec.get("speed"):
        data = np.load(spec["speed"])
        X, y, bounds = data["X"], data["y"], (data["lows"], data["highs"])
        timers = {
            "diffprivlib tree fit (depth 6)": lambda: dpl.DecisionTreeClassifier(
                max_depth=6, epsilon=1.0, bounds=bounds, classes=[0, 1], random_state=0
            ).fit(X, y),
            "diffprivlib forest fit (100 trees, depth 6)": lambda: dpl.RandomForestClassifier(
                n_estimators=100,
                max_depth=6,
                epsilon=1.0,
                bounds=bounds,
                classes=[0, 1],
                random_state=0,
            ).fit(X, y),
        }
        for name, fn in timers.items():
            start = time.perf_counter()
            model = fn()
            out["speed"][name] = time.perf_counter() - start
            big = np.tile(X, (int(np.ceil(1_000_000 / X.shape[0])), 1))[:1_000_000]
            start = time.perf_counter()
            model.predict(big)
            out["speed"][name.replace("fit", "predict 1e6 rows")] = time.perf_counter() - start
    print(json.dumps(out))


# --------------------------------------------------------------------------
# Speed
# --------------------------------------------------------------------------


def _best_time(fn: Any, reps: int) -> float:
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def speed_section(quick: bool) -> tuple[dict[str, float], np.ndarray, np.ndarray, Any]:
    """Fit/predict times on 50,000 x 14 generated rows at depth 6 (best of a few runs)."""
    import pandas as pd
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.tree import DecisionTreeClassifier

    from dpkit.trees import (
        DPDecisionTreeClassifier,
        DPGradientBoostingClassifier,
        DPRandomForestClassifier,
    )

    X, y = make_mixed_table(50_000, seed=1)
    num, nb = _numeric_frame(X, MIXED_BOUNDS, {})
    reps = 1 if quick else 3
    big = pd.concat([X] * 20, ignore_index=True)
    big_num = np.tile(num, (20, 1))
    out: dict[str, float] = {}
    tree = DPDecisionTreeClassifier(
        epsilon=1.0, max_depth=6, bounds=MIXED_BOUNDS, classes=[0, 1], random_state=0
    )
    out["dpkit tree fit (depth 6)"] = _best_time(lambda: tree.fit(X, y), reps)
    out["dpkit tree predict 1e6 rows"] = _best_time(lambda: tree.predict(big), reps)
    for partition in ("disjoint", "shared"):
        forest = DPRandomForestClassifier(
            epsilon=1.0,
            n_estimators=100,
            max_depth=6,
            partition=partition,
            bounds=MIXED_BOUNDS,
            classes=[0, 1],
            random_state=0,
        )
        out[f"dpkit forest fit (100 trees, depth 6, {partition})"] = _best_time(
            lambda f=forest: f.fit(X, y), reps
        )
    out["dpkit forest predict 1e6 rows (100 trees)"] = _best_time(lambda: forest.predict(big), 1)
    boost = DPGradientBoostingClassifier(
        epsilon=1.0, max_iter=100, bounds=MIXED_BOUNDS, classes=[0, 1], random_state=0
    )
    out["dpkit boosting fit (100 rounds)"] = _best_time(lambda: boost.fit(X, y), reps)
    default_boost = DPGradientBoostingClassifier(
        epsilon=1.0, bounds=MIXED_BOUNDS, classes=[0, 1], random_state=0
    )
    out["dpkit boosting fit (default: 150 rounds, 64 bins)"] = _best_time(
        lambda: default_boost.fit(X, y), reps
    )
    out["dpkit boosting predict 1e6 rows"] = _best_time(lambda: boost.predict_proba(big), reps)
    sk_tree = DecisionTreeClassifier(max_depth=6, random_state=0)
    out["scikit-learn tree fit (depth 6)"] = _best_time(lambda: sk_tree.fit(num, y), reps)
    out["scikit-learn tree predict 1e6 rows"] = _best_time(lambda: sk_tree.predict(big_num), reps)
    sk_forest = RandomForestClassifier(100, max_depth=6, random_state=0, n_jobs=1)
    out["scikit-learn forest fit (100 trees, depth 6, 1 job)"] = _best_time(
        lambda: sk_forest.fit(num, y), 1
    )
    out["scikit-learn forest predict 1e6 rows (100 trees)"] = _best_time(
        lambda: sk_forest.predict(big_num), 1
    )
    return out, num, y, nb


# --------------------------------------------------------------------------
# Defaults experiment
# --------------------------------------------------------------------------

DEFAULTS_GRID: dict[str, dict[str, Any]] = {
    # single trees: the default and one change at a time
    "tree: default (greedy, criterion auto, depth auto, leaf share 0.3)": {"kind": "tree"},
    "tree: criterion gini": {"kind": "tree", "criterion": "gini"},
    "tree: criterion max": {"kind": "tree", "criterion": "max"},
    "tree: criterion entropy": {"kind": "tree", "criterion": "entropy"},
    "tree: leaf share 0.5": {"kind": "tree", "leaf_share": 0.5},
    "tree: level growth 2": {"kind": "tree", "level_growth": 2.0},
    "tree: permute-and-flip": {"kind": "tree", "selector": "permute_and_flip"},
    "tree: noisy counts (count share 0.2, min 20 rows)": {
        "kind": "tree",
        "count_share": 0.2,
        "min_samples_split": 20.0,
    },
    "tree: id3": {"kind": "tree", "algorithm": "id3"},
    # forests
    "forest: 3 trees, disjoint": {"kind": "forest", "n_estimators": 3},
    "forest: 10 trees, disjoint": {"kind": "forest", "n_estimators": 10},
    "forest: 5 trees, shared": {"kind": "forest", "n_estimators": 5, "partition": "shared"},
    "forest: 50 random trees, disjoint": {
        "kind": "forest",
        "algorithm": "random",
        "n_estimators": 50,
    },
    "forest: 20 random trees, shared": {
        "kind": "forest",
        "algorithm": "random",
        "n_estimators": 20,
        "partition": "shared",
    },
}


def defaults_experiment(titanic: Path | None, quick: bool) -> None:
    """Accuracy of candidate settings on the benchmark datasets (the evidence for the defaults)."""
    datasets = load_datasets(titanic, quick)
    for ds in datasets:
        ds.splits = ds.splits[: 12 if not ds.name.startswith("mixed") else 2]
        res = run_dpkit(ds, EPSILONS, DEFAULTS_GRID)
        print(accuracy_table(ds.name, res, EPSILONS))
        print(flush=True)


# --------------------------------------------------------------------------
# Reporting
# --------------------------------------------------------------------------


def summarise(values: list[float]) -> tuple[float, float]:
    arr = np.asarray(values, dtype=float)
    return float(np.mean(arr)), float(np.std(arr))


def render(paths: list[Path]) -> None:
    """The tables and floors of saved runs, merged model by model (the first file wins)."""
    merged: dict[str, Any] = {}
    for path in paths:
        saved = json.loads(path.read_text(encoding="utf-8"))["results"]
        for name, models in saved.items():
            for model, values in models.items():
                merged.setdefault(name, {}).setdefault(model, values)
    for name, res in merged.items():
        print(accuracy_table(name, res, EPSILONS))
        print()
        print(accuracy_table(name, res, EPSILONS, metric="auc"))
        print()
    print("### floors")
    for note in floors(merged, EPSILONS):
        print("-", note)


def accuracy_table(
    name: str, results: dict[str, Any], epsilons: tuple[float, ...], metric: str = "accuracy"
) -> str:
    lines = [
        f"### {name}: {metric} (mean ± std over fits: splits × noise seeds for the DP models)",
        "",
    ]
    lines.append("| model | " + " | ".join(f"ε = {e:g}" for e in epsilons) + " |")
    lines.append("|---|" + "---|" * len(epsilons))
    for model, per_eps in results.items():
        cells = []
        for e in epsilons:
            entry = per_eps.get(str(e), per_eps.get("all"))
            if entry is None:
                cells.append("")
                continue
            m, s = summarise(entry[metric])
            cells.append(f"{m:.3f} ± {s:.3f}")
        lines.append(f"| {model} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def floors(all_results: dict[str, Any], epsilons: tuple[float, ...]) -> list[str]:
    """The issue's floors, checked on the measured means."""
    notes = []
    for ds, res in all_results.items():
        dpkit = {k: v for k, v in res.items() if k.startswith("dpkit")}
        peers = {k: v for k, v in res.items() if k.startswith("diffprivlib")}
        for e in epsilons:
            if e < 0.5 or not peers:
                continue
            best_name, best = max(
                ((k, summarise(v[str(e)]["accuracy"])[0]) for k, v in dpkit.items()),
                key=lambda kv: kv[1],
            )
            default = summarise(res["dpkit tree (default)"][str(e)]["accuracy"])[0]
            peer_name, peer = max(
                ((k, summarise(v[str(e)]["accuracy"])[0]) for k, v in peers.items()),
                key=lambda kv: kv[1],
            )
            ok = "PASS" if best > peer else "FAIL"
            notes.append(
                f"{ds} ε={e:g}: best dpkit {best:.3f} ({best_name}); default tree {default:.3f}; best diffprivlib {peer:.3f} ({peer_name}) -> {ok}"
            )
        sk = res.get("scikit-learn tree (depth 5, non-private)")
        if sk is not None and ds.startswith("mixed") and "1.0" in res["dpkit tree (default)"]:
            sk_acc = summarise(sk["all"]["accuracy"])[0]
            best = max(summarise(v["1.0"]["accuracy"])[0] for v in dpkit.values())
            ok = "PASS" if best >= sk_acc - 0.03 else "FAIL"
            notes.append(
                f"{ds} ε=1: best dpkit {best:.3f} vs non-private depth-5 tree {sk_acc:.3f} (gap {sk_acc - best:+.3f}) -> {ok}"
            )
        boost = res.get("dpkit boosting (default)")
        ebm = {k: v for k, v in res.items() if k.startswith("DP-EBM")}
        if boost is not None and ebm:
            for e in epsilons:
                auc = summarise(boost[str(e)]["auc"])[0]
                acc = summarise(boost[str(e)]["accuracy"])[0]
                best_ebm = max(summarise(v[str(e)]["auc"])[0] for v in ebm.values())
                tree_acc = summarise(res["dpkit tree (default)"][str(e)]["accuracy"])[0]
                ok = "PASS" if auc >= best_ebm and acc >= tree_acc - 0.005 else "FAIL"
                notes.append(
                    f"{ds} ε={e:g}: boosting AUC {auc:.3f} vs best DP-EBM {best_ebm:.3f}; "
                    f"accuracy {acc:.3f} vs default tree {tree_acc:.3f} -> {ok}"
                )
        hgb = res.get(HGB)
        if (
            boost is not None and hgb is not None and ds.startswith("mixed")
        ):  # the census-like table
            reference = summarise(hgb["all"]["auc"])[0]
            for e, allowed in ((1.0, 0.010), (0.1, 0.030)):
                if str(e) not in boost:
                    continue
                auc = summarise(boost[str(e)]["auc"])[0]
                ok = "PASS" if auc >= reference - allowed else "FAIL"
                notes.append(
                    f"{ds} ε={e:g}: boosting AUC {auc:.3f} vs non-private HistGradientBoosting "
                    f"{reference:.3f} (gap {reference - auc:+.3f}, allowed {allowed}) -> {ok}"
                )
    return notes


def plot(all_results: dict[str, Any], epsilons: tuple[float, ...], out_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    for ds, res in all_results.items():
        fig, ax = plt.subplots(figsize=(7.5, 4.5))
        references = 0
        for model, per_eps in res.items():
            if "all" in per_eps:
                m, _ = summarise(per_eps["all"]["accuracy"])
                ax.axhline(m, linestyle=":", color="grey")
                # Stagger the labels (left above, right below) so close lines stay readable.
                x, ha, va = (
                    (epsilons[0], "left", "bottom")
                    if references % 2 == 0
                    else (epsilons[-1], "right", "top")
                )
                ax.text(x, m, f" {model} ", fontsize=7, ha=ha, va=va, color="grey")
                references += 1
                continue
            means = [summarise(per_eps[str(e)]["accuracy"])[0] for e in epsilons]
            style = "-o" if model.startswith("dpkit") else "--s"
            ax.plot(
                epsilons,
                means,
                style,
                label=model,
                markersize=4,
                linewidth=2 if "(default)" in model else 1,
            )
        ax.set_xscale("log")
        ax.set_xticks(list(epsilons), [f"{e:g}" for e in epsilons])
        ax.set_xlabel("ε")
        ax.set_ylabel("test accuracy")
        ax.set_title(f"DP classifiers on {ds}")
        ax.legend(fontsize=6.5, loc="lower right")
        fig.tight_layout()
        path = (
            out_dir
            / f"trees_classification_{ds.split('_')[0] if ds.startswith('mixed') else ds}.png"
        )
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="small data and few splits (smoke test)"
    )
    parser.add_argument(
        "--defaults", action="store_true", help="run the experiment behind the defaults instead"
    )
    parser.add_argument(
        "--titanic", type=Path, default=ROOT.parent / "shared" / "data" / "titanic.csv"
    )
    parser.add_argument(
        "--california",
        type=Path,
        default=ROOT.parent / "shared" / "data" / "california_housing.csv",
        help="California housing CSV (the value-above-median task)",
    )
    parser.add_argument(
        "--peers-python", type=Path, default=ROOT / ".venv-bench" / "bin" / "python"
    )
    parser.add_argument(
        "--noise-seeds",
        type=int,
        default=1,
        help="fits per split for dpkit and DP-EBM, each with its own noise (default 1)",
    )
    parser.add_argument("--skip-peers", action="store_true")
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument(
        "--plots", action="store_true", help="write docs/img/trees_classification_*.png"
    )
    parser.add_argument("--out", type=Path, default=None, help="write all raw results as JSON")
    parser.add_argument(
        "--replot", type=Path, default=None, help="redraw the figures from an --out JSON"
    )
    parser.add_argument("--peers", type=str, default=None, help=argparse.SUPPRESS)
    parser.add_argument(
        "--render",
        type=Path,
        nargs="+",
        default=None,
        help="print the tables and floors of --out JSONs; a later file adds only the models "
        "an earlier one lacks (e.g. peers measured in another run)",
    )
    args = parser.parse_args(argv)
    if args.render:
        render(args.render)
        return
    if args.peers:
        peer_main(args.peers)
        return
    if args.replot:
        saved = json.loads(args.replot.read_text(encoding="utf-8"))
        for path in plot(saved["results"], EPSILONS, ROOT / "docs" / "img"):
            print("wrote", path.relative_to(ROOT))
        return
    if args.defaults:
        defaults_experiment(args.titanic, args.quick)
        return
    start = time.perf_counter()
    epsilons = EPSILONS
    datasets = load_datasets(args.titanic, args.quick, args.california)
    for ds in datasets:
        ds.noise_seeds = args.noise_seeds
    results: dict[str, Any] = {}
    for ds in datasets:
        t0 = time.perf_counter()
        results[ds.name] = run_dpkit(ds, epsilons, DPKIT_MODELS)
        ebm = run_ebm(ds, epsilons)
        if "error" in ebm:
            print(f"[DP-EBM skipped: {ebm.pop('error')}]", file=sys.stderr, flush=True)
        results[ds.name].update(ebm)
        results[ds.name].update(run_sklearn(ds))
        print(
            f"[{ds.name}: dpkit, DP-EBM, scikit-learn in {time.perf_counter() - t0:.0f} s]",
            file=sys.stderr,
            flush=True,
        )
    speed: dict[str, float] = {}
    speed_data: tuple[Any, Any, Any] = (None, None, None)
    if not args.skip_speed:
        speed, num, y, nb = speed_section(args.quick)
        speed_data = (num, y, nb)
    peers: dict[str, Any] = {}
    if not args.skip_peers:
        t0 = time.perf_counter()
        peers = run_peers(datasets, epsilons, args.peers_python, *speed_data)
        print(f"[peers in {time.perf_counter() - t0:.0f} s]", file=sys.stderr, flush=True)
        for name, res in peers.get("accuracy", {}).items():
            results[name].update(res)
        speed.update(peers.get("speed", {}))
    for ds in datasets:
        print(accuracy_table(ds.name, results[ds.name], epsilons))
        print()
        print(accuracy_table(ds.name, results[ds.name], epsilons, metric="auc"))
        print()
    if "error" in peers:
        print("peers:", peers["error"])
    print("### floors")
    for note in floors(results, epsilons):
        print("-", note)
    if speed:
        print("\n### speed (seconds, best of runs; 50,000 x 14 rows)")
        for k, v in speed.items():
            print(f"- {k}: {v:.3f}")
        ratios = _ratios(speed)
        for k, v in ratios.items():
            print(f"- {k}: {v}")
    if args.plots:
        for path in plot(results, epsilons, ROOT / "docs" / "img"):
            print("wrote", path.relative_to(ROOT))
    if args.out:
        args.out.write_text(
            json.dumps(
                {"results": results, "speed": speed, "versions": peers.get("versions")}, indent=1
            ),
            encoding="utf-8",
        )
    print(f"\n(total {time.perf_counter() - start:.0f} s)")


def _ratios(speed: dict[str, float]) -> dict[str, str]:
    pairs = {
        "tree fit: dpkit / scikit-learn": (
            "dpkit tree fit (depth 6)",
            "scikit-learn tree fit (depth 6)",
        ),
        "tree fit: dpkit / diffprivlib": (
            "dpkit tree fit (depth 6)",
            "diffprivlib tree fit (depth 6)",
        ),
        "forest fit: dpkit (disjoint) / scikit-learn (1 job)": (
            "dpkit forest fit (100 trees, depth 6, disjoint)",
            "scikit-learn forest fit (100 trees, depth 6, 1 job)",
        ),
        "forest fit: dpkit (disjoint) / diffprivlib": (
            "dpkit forest fit (100 trees, depth 6, disjoint)",
            "diffprivlib forest fit (100 trees, depth 6)",
        ),
        "tree predict: dpkit / scikit-learn": (
            "dpkit tree predict 1e6 rows",
            "scikit-learn tree predict 1e6 rows",
        ),
        "tree predict: dpkit / diffprivlib": (
            "dpkit tree predict 1e6 rows",
            "diffprivlib tree predict 1e6 rows (depth 6)",
        ),
    }
    out = {}
    for label, (a, b) in pairs.items():
        if a in speed and b in speed and speed[b] > 0:
            out[label] = f"{speed[a] / speed[b]:.2f}x"
    return out


if __name__ == "__main__":
    main()
