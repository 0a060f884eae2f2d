"""Result types of table queries (scalar answers are :class:`dpkit.Release`)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from dpkit.release import Release

__all__ = ["GroupedRelease"]


@dataclass(frozen=True)
class GroupedRelease:
    """One differentially private answer per group, released together.

    The groups are disjoint, so the whole result costs what one group costs
    (parallel composition): ``epsilon`` and ``delta`` are that total cost, not
    a per-group share.

    Attributes:
        group_by: the group-by column names.
        keys: the released keys, in order (scalars for one column, tuples for
            several). With public keys, every listed key, present in the data or
            not; with private partition selection, only the keys that passed the
            noisy threshold.
        value: ``{key: answer}``.
        ci: ``{key: (low, high)}`` at confidence ``level``, each group's interval
            on its own (not simultaneous over all groups); ``None`` where the
            answer is a selection (a quantile's rank guarantee is in
            ``details``).
        epsilon, delta, level, mechanism, remaining, details: as in
            :class:`dpkit.Release`.
    """

    group_by: tuple[str, ...]
    keys: tuple[Any, ...]
    value: dict[Any, Any]
    ci: dict[Any, tuple[Any, Any] | None]
    epsilon: float
    delta: float = 0.0
    level: float = 0.95
    mechanism: str = ""
    remaining: Any = None
    details: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.keys)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.keys)

    def __contains__(self, key: object) -> bool:
        return key in self.value

    def __getitem__(self, key: Any) -> Release:
        """The answer for one group as a :class:`dpkit.Release` (same cost fields)."""
        if key not in self.value:
            raise KeyError(
                f"{key!r} is not among the released keys; with private partition selection "
                "a key that did not pass the noisy threshold is not released."
            )
        return Release(
            value=self.value[key],
            epsilon=self.epsilon,
            delta=self.delta,
            ci=self.ci.get(key),
            level=self.level,
            mechanism=self.mechanism,
            remaining=self.remaining,
            details=dict(self.details),
        )

    def to_frame(self) -> pd.DataFrame:
        """A DataFrame with the group columns, ``value``, ``ci_low`` and ``ci_high``."""
        records = []
        for key in self.keys:
            parts = key if isinstance(key, tuple) else (key,)
            ci = self.ci.get(key)
            val = self.value[key]
            records.append(
                (
                    *parts,
                    val.tolist() if isinstance(val, np.ndarray) else val,
                    None if ci is None else _plain(ci[0]),
                    None if ci is None else _plain(ci[1]),
                )
            )
        return pd.DataFrame(records, columns=[*self.group_by, "value", "ci_low", "ci_high"])


def _plain(x: Any) -> Any:
    return x.tolist() if isinstance(x, np.ndarray) else x
