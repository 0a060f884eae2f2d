import numpy as np
import pytest
from hypothesis import settings

settings.register_profile("dpkit", max_examples=60, deadline=None, derandomize=True)
settings.load_profile("dpkit")


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(20261121)


@pytest.fixture(autouse=True)
def _private_ledger_directory(tmp_path_factory, monkeypatch) -> None:
    """CLI default ledgers go to a fresh directory per test, never the user's."""
    monkeypatch.setenv("DPKIT_LEDGER_DIR", str(tmp_path_factory.mktemp("ledgers")))
