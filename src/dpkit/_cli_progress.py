"""Feedback for long CLI work: see :mod:`dpkit._progress` (kept so CLI modules import it here)."""

from __future__ import annotations

from dpkit._progress import steps, working

__all__ = ["steps", "working"]
