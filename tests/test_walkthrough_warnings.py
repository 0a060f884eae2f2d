"""``dpkit walkthrough titanic``: one warning per run, and its table says what its rows are."""

import warnings

import numpy as np
import pandas as pd
import pytest

from dpkit.errors import PrivacyWarning
from dpkit.walkthroughs.titanic import run


@pytest.fixture
def titanic_file(tmp_path):
    rng = np.random.default_rng(1)
    n = 120
    sex = rng.choice(["female", "male"], n)
    path = tmp_path / "titanic.csv"
    pd.DataFrame(
        {
            "Survived": (rng.random(n) < np.where(sex == "female", 0.7, 0.2)).astype(int),
            "Pclass": rng.integers(1, 4, n),
            "Sex": sex,
            "Age": rng.uniform(1, 70, n).round(),
            "SibSp": rng.integers(0, 3, n),
            "Parch": rng.integers(0, 3, n),
            "Fare": rng.uniform(5, 100, n).round(2),
            "Embarked": rng.choice(["C", "Q", "S"], n),
        }
    ).to_csv(path, index=False)
    return path


def test_a_seeded_run_warns_once_not_once_per_model(titanic_file):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run(titanic_file, epsilons=(1.0, 2.0), algorithms=("greedy", "forest"), splits=3,
            rng=0, echo=False)  # fmt: skip
    privacy = [w for w in caught if issubclass(w.category, PrivacyWarning)]
    assert len(privacy) == 1, [str(w.message) for w in privacy]  # 2bf6f1e: one per fit (> 12)
    assert "seeded random source" in str(privacy[0].message)
    with warnings.catch_warnings(record=True) as again:  # and again on the next run
        warnings.simplefilter("always")
        run(titanic_file, epsilons=(1.0,), algorithms=("greedy",), splits=2, rng=0, echo=False)
    assert sum(issubclass(w.category, PrivacyWarning) for w in again) == 1


def test_secure_noise_does_not_warn(titanic_file):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run(titanic_file, epsilons=(1.0,), algorithms=("greedy",), splits=1, rng=None, echo=False)
    assert not [w for w in caught if issubclass(w.category, PrivacyWarning)]


def test_the_output_says_what_the_rows_mean(titanic_file, capsys):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        run(titanic_file, epsilons=(1.0,), splits=1, rng=0)
    out = " ".join(capsys.readouterr().out.split())  # Rich wraps lines
    assert "greedy: dpkit's default tree" in out
    assert "id3: the course project's ID3" in out
    assert "default forest is ONE tree, the same model as greedy" in out
