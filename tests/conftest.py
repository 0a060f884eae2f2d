import numpy as np
import pytest
from hypothesis import settings

settings.register_profile("dpkit", max_examples=60, deadline=None, derandomize=True)
settings.load_profile("dpkit")


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(20261121)
