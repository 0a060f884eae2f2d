"""Readable bin labels: as few digits as tell the edges apart (no ``[4.665e+04, 4.665e+04]``).

Shared with the tables' histograms (:mod:`dpkit.tables.kinds.histogram`).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["bin_labels"]


def bin_labels(edges: Sequence[float]) -> list[str]:
    """Readable bin labels: the shortest number format that tells every edge apart."""
    for digits in range(3, 18):
        text = [f"{e:.{digits}g}" for e in edges]
        if len(set(text)) == len(text):
            break
    last = len(edges) - 2
    return [f"[{text[i]}, {text[i + 1]}{']' if i == last else ')'}" for i in range(len(edges) - 1)]
