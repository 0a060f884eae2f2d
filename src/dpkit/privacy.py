"""What a release cost: the one privacy report every dpkit release carries.

Every release — a table query's :class:`dpkit.Release` and
:class:`~dpkit.tables.GroupedRelease`, a histogram publisher's
:class:`~dpkit.histograms.PublishedHistogram` and
:class:`~dpkit.histograms.PublishedGrid`, a fitted tree, forest or boosted model
(``model.privacy_``), a local-DP estimate, a service answer — has a
:class:`PrivacyReport` as ``.privacy``::

    r = session.mean("age", bounds=(0, 120), epsilon=0.1)
    r.privacy.epsilon, r.privacy.delta, r.privacy.rho   # what this release spent
    r.privacy.neighbouring                              # "add/remove one row"
    r.privacy.mechanisms                                # ("laplace",)
    r.privacy.remaining                                 # the Budget left, when an accountant paid

The report is built from public input only (the declared budget, the
mechanism chosen by public rules, the session's privacy unit and the
accountant's ledger), so it is identical on neighbouring datasets; the
transcript tests compare it field by field.
"""

from __future__ import annotations

import numbers
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from dpkit.accounting.budget import Budget

__all__ = ["LOCAL_NEIGHBOURING", "NEIGHBOURING", "PrivacyReport", "Reported", "neighbouring"]

NEIGHBOURING = "add/remove one row"
UNSET: Any = object()  # "remaining= not given" to a release's constructor (None means: nobody paid)
LOCAL_NEIGHBOURING = "change one respondent's input (local DP: each report on its own)"


def neighbouring(
    privacy_unit: str | None = None, max_contributions: int = 1, max_groups: int | None = None
) -> str:
    """The neighbouring relation as a short public phrase, from the declared privacy unit.

    With ``max_groups`` (a session's per-group bound) a grouped query keeps at
    most ``max_contributions`` rows of a person in each of ``max_groups`` groups.
    """
    if privacy_unit is None:
        return NEIGHBOURING
    k = int(max_contributions)
    rows = "row" if k == 1 else "rows"
    bound = f"≤ {k} {rows}"
    if max_groups is not None:
        bound += f" per group in ≤ {int(max_groups)} group{'' if max_groups == 1 else 's'}"
    return f"add/remove one person ({bound}, privacy unit {privacy_unit!r})"


@dataclass(frozen=True)
class PrivacyReport:
    """What one release spent, under which neighbouring relation, and what is left.

    Attributes:
        epsilon, delta: the (ε, δ)-DP guarantee of this release alone under
            ``neighbouring`` (``delta`` 0.0 for pure-ε releases).
        rho: the ρ-zCDP guarantee when the release was accounted in zCDP (then
            ``epsilon``/``delta`` is its conversion), else ``None``.
        neighbouring: the neighbouring relation, a short public phrase
            (``"add/remove one row"``, ``"add/remove one person (≤ 3 rows,
            privacy unit 'pid')"``, or the local-DP one).
        mechanisms: the names of the mechanisms that touched the data (a
            private-keys grouped query lists its partition selection first).
        remaining: the :class:`dpkit.Budget` left after this release, when an
            accountant paid; ``None`` otherwise.
        split, uses: for releases made of many queries (trees): the budget of
            one query of each kind on a row's path, and how many such queries a
            path meets, so ``sum(split[k] * uses[k])`` is the total.
        details: release-specific public facts about the cost (a forest's
            partition, a boosted model's accounting); empty for most releases.

    ``report["epsilon"]`` and the other keys of :meth:`as_dict` still work for
    scripts written against the trees' earlier dict form, with a
    ``DeprecationWarning``: read the attributes instead (removed in the next release).
    """

    epsilon: float
    delta: float = 0.0
    rho: float | None = None
    neighbouring: str = NEIGHBOURING
    mechanisms: tuple[str, ...] = ()
    remaining: Budget | None = None
    split: Mapping[str, float] = field(default_factory=dict)
    uses: Mapping[str, int] = field(default_factory=dict)
    details: Mapping[str, Any] = field(default_factory=dict)

    @property
    def budget(self) -> Budget:
        """The guarantee as a :class:`dpkit.Budget` (what an accountant was charged)."""
        return Budget(self.epsilon, self.delta, rho=self.rho)

    def paid(self, remaining: Budget | None, relation: str | None = None) -> PrivacyReport:
        """This report with the budget an accountant has left (and the relation, if given)."""
        if relation is None:
            return replace(self, remaining=remaining)
        return replace(self, remaining=remaining, neighbouring=relation)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (``remaining`` as ``{"epsilon", "delta"}``); see :meth:`from_dict`."""
        return {
            "epsilon": float(self.epsilon),
            "delta": float(self.delta),
            "rho": None if self.rho is None else float(self.rho),
            "neighbouring": self.neighbouring,
            "mechanisms": list(self.mechanisms),
            "remaining": None
            if self.remaining is None
            else {"epsilon": float(self.remaining.epsilon), "delta": float(self.remaining.delta)},
            "split": {k: float(v) for k, v in self.split.items()},
            "uses": {k: int(v) for k, v in self.uses.items()},
            "details": _plain(dict(self.details)),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PrivacyReport:
        """The report :meth:`to_dict` wrote."""
        left = data.get("remaining")
        rho = data.get("rho")
        return cls(
            epsilon=float(data["epsilon"]),
            delta=float(data.get("delta", 0.0)),
            rho=None if rho is None else float(rho),
            neighbouring=str(data.get("neighbouring", NEIGHBOURING)),
            mechanisms=tuple(str(m) for m in data.get("mechanisms", ())),
            remaining=None if left is None else Budget(left["epsilon"], left["delta"]),
            split={str(k): float(v) for k, v in (data.get("split") or {}).items()},
            uses={str(k): int(v) for k, v in (data.get("uses") or {}).items()},
            details=dict(data.get("details") or {}),
        )

    # -- the trees' earlier dict form, one release more --------------------------------

    def as_dict(self) -> dict[str, Any]:
        """The trees' earlier dict form (deprecated: read the attributes)."""
        out: dict[str, Any] = {
            "epsilon": self.epsilon,
            "delta": self.delta,
            "rho": self.rho,
            "neighbouring": self.neighbouring,
            "split": dict(self.split),
            "uses": dict(self.uses),
            "total": self.epsilon,
        }
        out.update(self.details)
        return out

    def __getitem__(self, key: str) -> Any:
        _deprecated_mapping()
        return self.as_dict()[key]

    def __iter__(self) -> Iterator[str]:
        _deprecated_mapping()
        return iter(self.as_dict())

    def __len__(self) -> int:
        _deprecated_mapping()
        return len(self.as_dict())

    def __contains__(self, key: object) -> bool:
        _deprecated_mapping()
        return key in self.as_dict()

    def keys(self) -> Any:
        """Deprecated (the dict form): read the attributes."""
        _deprecated_mapping()
        return self.as_dict().keys()


class Reported:
    """``epsilon``, ``delta`` and ``remaining`` of a release: read-only shortcuts to its ``privacy``."""

    privacy: PrivacyReport

    @property
    def epsilon(self) -> float:
        """``privacy.epsilon``: the ε of this release alone."""
        return self.privacy.epsilon

    @property
    def delta(self) -> float:
        """``privacy.delta``: the δ of this release alone."""
        return self.privacy.delta

    @property
    def remaining(self) -> Any:
        """``privacy.remaining``: the budget left after this release, when an accountant paid."""
        return self.privacy.remaining


def _plain(value: Any) -> Any:
    # JSON-ready facts: exact fractions become floats, tuples lists, mappings dicts.
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, bool | str) or value is None:
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    return str(value)


def _deprecated_mapping() -> None:
    warnings.warn(
        "reading a PrivacyReport as a dict (report['epsilon']) is deprecated and goes in the "
        "next release; read its attributes (report.epsilon, report.split, report.details).",
        DeprecationWarning,
        stacklevel=3,
    )


def build(
    privacy: PrivacyReport | None,
    epsilon: float | None,
    delta: float | None,
    mechanism: str | None,
    remaining: Any = UNSET,
) -> PrivacyReport:
    """The report of a release built the earlier way (epsilon=, delta=, remaining=) or from ``privacy``.

    Explicit ``epsilon``/``delta``/``remaining`` override ``privacy``'s (so
    ``dataclasses.replace(release, remaining=...)`` works); ``mechanism`` fills
    ``mechanisms`` only when no report is given (``"laplace+geometric"`` →
    ``("laplace", "geometric")``).
    """
    if privacy is None:
        if epsilon is None:
            raise TypeError("a release needs epsilon= (or privacy=).")
        return PrivacyReport(
            epsilon=epsilon,
            delta=0.0 if delta is None else delta,
            mechanisms=tuple(m for m in (mechanism or "").split("+") if m),
            remaining=None if remaining is UNSET else remaining,
        )
    if not isinstance(privacy, PrivacyReport):
        raise TypeError("privacy must be a dpkit.PrivacyReport.")
    changes: dict[str, Any] = {}
    if epsilon is not None:
        changes["epsilon"] = epsilon
    if delta is not None:
        changes["delta"] = delta
    if remaining is not UNSET:
        changes["remaining"] = remaining
    return replace(privacy, **changes) if changes else privacy
