"""``dpkit demo``: private answers about a synthetic patients table.

The table is generated (seeded) so the demo needs no data files; the noise is
always drawn from the secure default source.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from rich.console import Console
from rich.table import Table

from dpkit import mechanisms
from dpkit.accounting import Accountant, Budget

DISTRICTS = ("Ba Dinh", "Hoan Kiem", "Dong Da", "Cau Giay", "Tay Ho")


def patients(n: int = 5000, seed: int = 7) -> pd.DataFrame:
    """A synthetic patients table: age, weight, a sensitive condition, a district."""
    rng = np.random.default_rng(seed)
    age = np.clip(rng.normal(48, 17, n), 18, 95).round()
    weight = np.clip(rng.normal(68, 14, n) + 0.1 * (age - 48), 38, 160).round(1)
    risk = 1 / (1 + np.exp(-(age - 60) / 8 - (weight - 80) / 15))
    condition = rng.random(n) < 0.6 * risk
    district = rng.choice(DISTRICTS, size=n, p=[0.3, 0.15, 0.25, 0.2, 0.1])
    return pd.DataFrame(
        {"age": age, "weight": weight, "condition": condition, "district": district}
    )


@dataclass
class _Row:
    question: str
    answer: str
    epsilon: float
    bound: str


def run_demo(seed: int = 7, console: Console | None = None) -> list[_Row]:
    """Answer a few private questions within a total budget of epsilon = 1."""
    console = console or Console()
    table = patients(seed=seed)
    accountant = Accountant(Budget(1.0))
    rows: list[_Row] = []

    def ask(question: str, epsilon: float, release: object, fmt: str, bound_fmt: str) -> None:
        rows.append(_Row(question, fmt, epsilon, bound_fmt))

    # 1. How many patients have the condition? Count: sensitivity 1 (add/remove one row).
    count = mechanisms.Geometric(epsilon=0.2)
    accountant.charge(count.cost, "count condition")
    r = count.release(int(table["condition"].sum()))
    ask("patients with the condition", 0.2, r, f"{r.value:,}", f"± {count.half_width(0.95):.0f}")

    # 2. Mean age, ages declared in [0, 120]: noisy clipped sum / noisy count.
    lo, hi = 0.0, 120.0
    ages = table["age"].clip(lo, hi)
    s_mech = mechanisms.Laplace(epsilon=0.15, sensitivity=max(abs(lo), abs(hi)))
    c_mech = mechanisms.Geometric(epsilon=0.05)
    accountant.charge(s_mech.cost + c_mech.cost, "mean age")
    noisy_sum = s_mech.randomise(float(ages.sum()))
    noisy_count = max(1, c_mech.randomise(len(ages)))
    mean = noisy_sum / noisy_count
    # Error bound: both noises within their 97.5% bounds (union bound gives 95%).
    hs, hc = s_mech.half_width(0.975), c_mech.half_width(0.975)
    worst = max(
        abs((noisy_sum + a) / max(1, noisy_count + b) - mean) for a in (-hs, hs) for b in (-hc, hc)
    )
    ask("mean age (bounds 0-120)", 0.2, None, f"{mean:.1f}", f"± {worst:.1f}")

    # 3. Patients per district (public list of districts): disjoint groups, parallel composition.
    hist = mechanisms.Geometric(epsilon=0.3, size=len(DISTRICTS))
    accountant.charge(hist.cost, "patients per district")
    counts = table["district"].value_counts().reindex(DISTRICTS, fill_value=0).to_numpy()
    noisy = hist.randomise(counts)
    ask(
        "largest district",
        0.3,
        None,
        f"{DISTRICTS[int(np.argmax(noisy))]} ({noisy.max():,})",
        f"± {hist.half_width(0.95):.0f} each",
    )

    # 4. A local-DP survey: each patient answers through the coin-flip protocol (ln 3-DP, local).
    responses = mechanisms.coin_flip_survey(table["condition"].to_numpy())
    survey = mechanisms.coin_flip_estimate(responses)
    assert survey.ci is not None  # numeric releases always carry an interval
    ask(
        "share with the condition (coin-flip survey, local DP)",
        survey.epsilon,
        None,
        f"{survey.value:.3f}",
        f"[{survey.ci[0]:.3f}, {survey.ci[1]:.3f}]",
    )

    out = Table(title=f"dpkit demo: {len(table):,} synthetic patients, central budget ε = 1")
    out.add_column("question")
    out.add_column("private answer", justify="right")
    out.add_column("ε", justify="right")
    out.add_column("95% error bound", justify="right")
    for row in rows:
        out.add_row(row.question, row.answer, f"{row.epsilon:.3g}", row.bound)
    console.print(out)
    console.print(
        f"Budget spent: {accountant.spent}; left: {accountant.remaining}. "
        "(The survey is local DP: each answer was randomised by the patient, ε = ln 3 per person.)"
    )
    return rows
