"""Result types of table queries (scalar answers are :class:`dpkit.Release`)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from dpkit.privacy import UNSET, PrivacyReport, Reported, build
from dpkit.release import Release

__all__ = ["GroupedRelease"]


@dataclass(frozen=True, init=False)
class GroupedRelease(Reported):
    """One differentially private answer per group, released together.

    The groups are disjoint, so the whole result costs what one group costs
    (parallel composition): ``privacy.epsilon`` and ``privacy.delta`` are that
    total cost, not a per-group share.

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
        privacy, level, mechanism, details: as in :class:`dpkit.Release`
            (``epsilon``, ``delta`` and ``remaining`` are shortcuts to ``privacy``).
    """

    group_by: tuple[str, ...]
    keys: tuple[Any, ...]
    value: dict[Any, Any]
    ci: dict[Any, tuple[Any, Any] | None]
    level: float
    mechanism: str
    details: dict[str, Any]
    privacy: PrivacyReport

    def __init__(
        self,
        group_by: tuple[str, ...],
        keys: tuple[Any, ...],
        value: dict[Any, Any],
        ci: dict[Any, tuple[Any, Any] | None],
        epsilon: float | None = None,
        delta: float | None = None,
        level: float = 0.95,
        mechanism: str = "",
        remaining: Any = UNSET,
        details: dict[str, Any] | None = None,
        *,
        privacy: PrivacyReport | None = None,
    ) -> None:
        report = build(privacy, epsilon, delta, mechanism, remaining)
        for name, item in (
            ("group_by", group_by),
            ("keys", keys),
            ("value", value),
            ("ci", ci),
            ("level", level),
            ("mechanism", mechanism),
            ("details", {} if details is None else details),
            ("privacy", report),
        ):
            object.__setattr__(self, name, item)

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
            ci=self.ci.get(key),
            level=self.level,
            mechanism=self.mechanism,
            details=dict(self.details),
            privacy=self.privacy,
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
