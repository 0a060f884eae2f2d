"""Session.histogram2d: public checks before the charge, counts that match NumPy, every method."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from tests.tables._declared import types_of

from dpkit.errors import InvalidParameterError
from dpkit.histograms import PublishedGrid
from dpkit.tables import HISTOGRAM2D_METHODS, QuerySpec, Session

pytestmark = pytest.mark.filterwarnings("ignore::dpkit.PrivacyWarning")

XB, YB = (0.0, 10.0), (-5.0, 5.0)


@pytest.fixture
def points() -> pd.DataFrame:
    rng = np.random.default_rng(3)
    n = 4000
    frame = pd.DataFrame(
        {
            "lon": np.concatenate([rng.normal(3, 0.5, n // 2), rng.uniform(0, 10, n // 2)]),
            "lat": np.concatenate([rng.normal(1, 0.5, n // 2), rng.uniform(-5, 5, n // 2)]),
            "age": rng.integers(18, 90, n).astype(float),
        }
    )
    frame.loc[::97, "lat"] = np.nan  # missing in one axis: the row is left out
    return frame


@pytest.mark.parametrize("method", HISTOGRAM2D_METHODS)
def test_every_method_estimates_the_numpy_grid(points: pd.DataFrame, method: str) -> None:
    s = Session.from_pandas(points, types=types_of(points), epsilon=100.0, rng=1)
    r = s.histogram2d("lon", "lat", epsilon=50.0, bins=(20, 16), bounds=(XB, YB), method=method)
    kept = points.dropna()
    truth, _, _ = np.histogram2d(
        np.clip(kept.lon, *XB), np.clip(kept.lat, *YB), bins=[20, 16], range=[XB, YB]
    )
    grid = r.details["published"]
    assert isinstance(grid, PublishedGrid) and r.mechanism == method
    assert r.value.shape == (20, 16) and r.epsilon == 50.0 and r.ci is None
    assert float(r.remaining.epsilon) == pytest.approx(50.0)
    # At a large epsilon the whole-map total and a dense rectangle are close to the truth.
    assert grid.answer(0, 19, 0, 15) == pytest.approx(truth.sum(), rel=0.02)
    assert grid.answer(4, 7, 8, 10) == pytest.approx(truth[4:8, 8:11].sum(), rel=0.1)
    if method == "laplace2d":
        assert np.abs(r.value - truth).max() < 1.0


def test_edges_per_axis_filters_and_the_spec_round_trip(points: pd.DataFrame) -> None:
    s = Session.from_pandas(points, types=types_of(points), epsilon=10.0, rng=2)
    r = s.histogram2d(
        "lon",
        "age",
        epsilon=1.0,
        edges=([0, 2.5, 5, 10], [18, 40, 65, 90]),
        method="ugrid",
        n_records=4000,
        where={"age": (">=", 40)},
    )
    assert r.value.shape == (3, 3)
    assert r.details["y_edges"] == [18.0, 40.0, 65.0, 90.0]
    assert r.details["published"].details["n_records"] == 4000
    assert s._accountant.history[-1].label.startswith("histogram2d(lon, age, ugrid)")
    spec = QuerySpec("histogram2d", "lon", y_column="lat", epsilon=0.5, bins=8, bounds=(XB, YB))
    assert QuerySpec.from_json(spec.to_json()) == spec
    assert s.answer(spec).value.shape == (8, 8)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"bins": 8}, "no public bounds"),
        ({"bins": (8, 8, 8), "bounds": (XB, YB)}, "one entry per axis"),
        ({"bins": 8, "bounds": XB}, "bounds"),
        ({"bins": 8, "bounds": (XB, YB), "method": "quadtree"}, "method must be one of"),
        ({"bins": 8, "bounds": (XB, YB), "method": "laplace2d", "n_records": 10}, "n_records"),
        ({"bins": 8, "bounds": (XB, YB), "n_records": -1}, "n_records"),
        ({"bins": 1024, "bounds": (XB, YB), "method": "dawa2d"}, "at most"),
        ({"bins": 8, "bounds": (XB, YB), "group_by": "age"}, "unexpected (keyword )?argument"),
    ],
)
def test_public_mistakes_are_refused_before_the_charge(
    points: pd.DataFrame, kwargs: dict, message: str
) -> None:
    s = Session.from_pandas(points, types=types_of(points), epsilon=1.0, rng=1)
    with pytest.raises((InvalidParameterError, TypeError), match=message):
        s.histogram2d("lon", "lat", epsilon=0.5, **kwargs)
    with pytest.raises(InvalidParameterError, match="two different columns"):
        s.histogram2d("lon", "lon", epsilon=0.5, bins=4, bounds=(XB, XB))
    with pytest.raises(InvalidParameterError, match="unknown column"):
        s.histogram2d("lon", "height", epsilon=0.5, bins=4, bounds=(XB, YB))
    assert float(s.remaining.epsilon) == 1.0
