"""Analysts and their keys: hashing, authentication in constant time, rotation, revocation.

A key is ``dpk_<key id>_<secret>``; the store keeps the key id and the SHA-256
of the secret only, so a copy of the database lets nobody in. A key is shown
once, when it is made. :meth:`Keys.authenticate` compares digests in constant
time, and also when the key id is unknown, so its timing does not tell whether a
key id exists. A revoked analyst stays revoked.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy import exc

from dpkit.errors import InvalidParameterError
from dpkit.service.store._database import (
    ConflictError,
    Database,
    UnknownAnalystError,
    _analysts,
    _name,
)
from dpkit.service.store.audit import audit_row

_KEY = re.compile(r"dpk_([A-Za-z0-9_-]{8})_([A-Za-z0-9_-]{32,128})")
_KEY_HASH = re.compile(r"([A-Za-z0-9_-]{8}):([0-9a-f]{64})")
# Compared against when a key id is unknown, so that a miss costs what a hit costs.
_DUMMY_DIGEST = hashlib.sha256(b"dpkit: no analyst has this key").hexdigest()


@dataclass(frozen=True)
class Analyst:
    """An analyst as the service shows it: never the key or its hash."""

    name: str
    active: bool
    created_at: float


def make_key() -> str:
    """A fresh key ``dpk_<8-char key id>_<43-char secret>`` (about 256 bits of secret)."""
    return f"dpk_{secrets.token_urlsafe(6)}_{secrets.token_urlsafe(32)}"


def _parse_key(key: object) -> tuple[str, str] | None:
    if not isinstance(key, str):
        return None
    found = _KEY.fullmatch(key)
    return None if found is None else (found.group(1), found.group(2))


def key_id(key: object) -> str | None:
    """The public id of a well-formed key (``dpk_<key id>_...``), else None: what a log
    may name, never the secret."""
    parsed = _parse_key(key)
    return None if parsed is None else parsed[0]


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("ascii")).hexdigest()


def hash_key(key: str) -> str:
    """``"<key id>:<sha256 hex of the secret>"``: what a config file holds instead of a key."""
    parsed = _parse_key(key)
    if parsed is None:
        raise InvalidParameterError(
            "a key looks like dpk_XXXXXXXX_ followed by its secret; this is not one "
            "(`dpkit admin hash-key` makes a new key)."
        )
    return f"{parsed[0]}:{_digest(parsed[1])}"


def analyst_row(conn: sa.Connection, name: str) -> Any:
    """The analyst's ``active`` and ``key_id``, or None when there is no such analyst."""
    return conn.execute(
        sa.select(_analysts.c.active, _analysts.c.key_id).where(_analysts.c.name == name)
    ).first()


class Keys(Database):
    """The analysts' part of the store."""

    def authenticate(self, key: str) -> Analyst | None:
        """The active analyst holding ``key``, else None (also for a malformed key)."""
        parsed = _parse_key(key)
        if parsed is None:
            return None
        key_id, secret = parsed
        given = _digest(secret)
        with self._read() as conn:
            row = conn.execute(
                sa.select(
                    _analysts.c.name,
                    _analysts.c.key_hash,
                    _analysts.c.active,
                    _analysts.c.created_at,
                ).where(_analysts.c.key_id == key_id)
            ).first()
        stored = row.key_hash if row is not None and row.key_hash else _DUMMY_DIGEST
        same = hmac.compare_digest(given.encode(), str(stored).encode())
        if row is None or not same or not row.active:
            return None
        return Analyst(row.name, True, float(row.created_at))

    def add_analyst(self, name: str, actor: str) -> str:
        """Register a new analyst and return their key (shown once; only its hash is kept)."""
        _name(name, "analyst")
        key = make_key()
        key_id, digest = hash_key(key).split(":")
        taken = ConflictError(f"the analyst {name!r} exists already.")
        with self._write(exclusive=True) as conn:
            if analyst_row(conn, name) is not None:
                raise taken
            try:
                conn.execute(
                    _analysts.insert().values(
                        name=name,
                        key_id=key_id,
                        key_hash=digest,
                        active=True,
                        created_at=time.time(),
                    )
                )
            except exc.IntegrityError:  # another process added it in between (PostgreSQL)
                raise taken from None
            audit_row(conn, actor, "add_analyst", {"analyst": name})
        return key

    def ensure_analyst(self, name: str, key_hash: str | None = None) -> None:
        """Register an analyst declared in the service's config, unless already known.

        ``key_hash`` is what :func:`hash_key` prints. An analyst already in the
        store keeps their key (rotating goes through :meth:`rotate_key`, so that
        a restart never brings back a replaced key), except that one declared
        without a key gets this one.
        """
        _name(name, "analyst")
        key_id = digest = None
        if key_hash is not None:
            found = _KEY_HASH.fullmatch(key_hash) if isinstance(key_hash, str) else None
            if found is None:
                raise InvalidParameterError(
                    "key_hash must be what `dpkit admin hash-key` prints (KEYID:SHA256HEX)."
                )
            key_id, digest = found.group(1), found.group(2)
        with self._write(exclusive=True) as conn:
            row = analyst_row(conn, name)
            try:
                if row is None:
                    conn.execute(
                        _analysts.insert().values(
                            name=name,
                            key_id=key_id,
                            key_hash=digest,
                            active=True,
                            created_at=time.time(),
                        )
                    )
                    audit_row(conn, "config", "add_analyst", {"analyst": name})
                elif row.key_id is None and key_id is not None and row.active:
                    conn.execute(
                        _analysts.update()
                        .where(_analysts.c.name == name)
                        .values(key_id=key_id, key_hash=digest)
                    )
                    audit_row(conn, "config", "set_key", {"analyst": name})
            except exc.IntegrityError:
                raise ConflictError(
                    f"the analyst {name!r} was given a key another analyst holds (or was "
                    "added by another process at the same time); give each analyst a key "
                    "of their own."
                ) from None

    def rotate_key(self, name: str, actor: str) -> str:
        """A new key for the analyst (returned once); the old one stops working now."""
        _name(name, "analyst")
        key = make_key()
        key_id, digest = hash_key(key).split(":")
        with self._write() as conn:
            row = analyst_row(conn, name)
            if row is None:
                raise UnknownAnalystError(f"there is no analyst {name!r}.")
            if not row.active:
                raise ConflictError(
                    f"the analyst {name!r} is revoked, for good; register a new analyst instead."
                )
            conn.execute(
                _analysts.update()
                .where(_analysts.c.name == name)
                .values(key_id=key_id, key_hash=digest)
            )
            audit_row(conn, actor, "rotate_key", {"analyst": name})
        return key

    def revoke(self, name: str, actor: str) -> None:
        """The analyst's key stops working, for good (their grants and charges stay)."""
        _name(name, "analyst")
        with self._write() as conn:
            if analyst_row(conn, name) is None:
                raise UnknownAnalystError(f"there is no analyst {name!r}.")
            conn.execute(_analysts.update().where(_analysts.c.name == name).values(active=False))
            audit_row(conn, actor, "revoke", {"analyst": name})

    def analysts(self) -> list[Analyst]:
        """Every analyst, by name (never a key or its hash)."""
        with self._read() as conn:
            rows = conn.execute(
                sa.select(_analysts.c.name, _analysts.c.active, _analysts.c.created_at).order_by(
                    _analysts.c.name
                )
            ).all()
        return [Analyst(r.name, bool(r.active), float(r.created_at)) for r in rows]
