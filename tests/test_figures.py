"""The pictures: docs/figures/make_figures.py draws them, and every image link resolves."""

from __future__ import annotations

import importlib.util
import re
import warnings
from pathlib import Path
from types import ModuleType

import matplotlib.image
import pytest

ROOT = Path(__file__).resolve().parent.parent
PNG = b"\x89PNG\r\n\x1a\n"
IMAGE_LINK = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)")


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "make_figures", ROOT / "docs/figures/make_figures.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _valid_png(path: Path) -> None:
    assert path.read_bytes()[:8] == PNG, path
    height, width = matplotlib.image.imread(path).shape[:2]
    assert height > 100 and width > 100, path


def test_the_script_draws_each_figure_small_and_fast(tmp_path: Path) -> None:
    figures = _script()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the script's seeded noise warns, as it should
        drawn = [
            figures.histogram_figure(tmp_path, rows=300),
            figures.budget_figure(tmp_path, rows=300),
            figures.location_figure(tmp_path, people=40),
            figures.shapes_figure(tmp_path, rows=200),  # None until boosting can plot shapes
        ]
    for path in drawn:
        if path is not None:
            assert path.parent == tmp_path
            _valid_png(path)
    assert set(figures.FIGURES) == {"histogram", "budget", "shapes", "location"}


def _image_links(doc: Path) -> list[Path]:
    text = doc.read_text(encoding="utf-8")
    return [(doc.parent / link).resolve() for link in IMAGE_LINK.findall(text)]


@pytest.mark.parametrize(
    "doc", ["README.md", *sorted(p.relative_to(ROOT).as_posix() for p in ROOT.glob("docs/*.md"))]
)
def test_every_image_link_points_at_a_picture_that_exists(doc: str) -> None:
    for image in _image_links(ROOT / doc):
        assert image.is_file(), f"{doc} links {image.relative_to(ROOT)}, which does not exist"


def test_the_readme_shows_the_generated_pictures_and_they_are_small() -> None:
    script = _script()
    made = {"readme_histogram.png", "budget_over_time.png", "location_reports.png"}
    shown = {p.name for p in _image_links(ROOT / "README.md")}
    assert made <= shown
    assert "budget_over_time.png" in {p.name for p in _image_links(ROOT / "docs/accounting.md")}
    for name in made:
        path = script.OUT / name
        _valid_png(path)
        assert path.stat().st_size <= 150_000, f"{name} is over 150 KB: lower the dpi"
