"""Shared fixtures: small seeded tables and sessions on them."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd
import pytest
from tests.tables._declared import types_of

from dpkit.tables import Session

#: A value that must never appear in an error message (it is "private data").
SECRET = "SECRET-7731"


@pytest.fixture(scope="session")
def people() -> pd.DataFrame:
    """2,000 rows: age (with a few NaN), income, district, person id, a flag."""
    rng = np.random.default_rng(20240601)
    n = 2000
    age = rng.integers(18, 90, n).astype(float)
    age[:7] = np.nan
    return pd.DataFrame(
        {
            "age": age,
            "income": np.round(rng.lognormal(10, 0.8, n), 2),
            "district": rng.choice(["A", "B", "C", "D"], n, p=[0.4, 0.3, 0.2, 0.1]),
            "pid": rng.integers(0, 400, n),
            "smoker": rng.random(n) < 0.3,
        }
    )


@pytest.fixture
def session(people: pd.DataFrame) -> Session:
    """A seeded session with a large budget (tests only)."""
    return Session.from_pandas(
        people, types=types_of(people), epsilon=1000.0, delta=1e-3, rng=12345
    )


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    """One local Spark session per test module (start-up costs ~10 s).

    Skipped only when PySpark or a Java runtime is missing (``make test`` installs both).
    """
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("no Java runtime (install openjdk-17-jre-headless) for PySpark")
    pyspark_sql = pytest.importorskip(
        "pyspark.sql", reason="PySpark is not installed (pip install dpkit[spark])"
    )
    session = (
        pyspark_sql.SparkSession.builder.master("local[1]")
        .appName("dpkit-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "1")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
