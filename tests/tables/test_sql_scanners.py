"""``Session.from_sql`` through DuckDB's real ``sqlite`` and ``postgres`` scanner extensions.

The other tests only reach the ``sqlite3`` fallback. This module needs the
scanner extensions loadable in the running interpreter (DuckDB's own
extension directory, or the ``duckdb_ext`` package of the matching DuckDB
version), so it is skipped under the main venv; ``make scanners`` runs it with
DuckDB 1.4.4 and ``duckdb-ext-sqlite``/``duckdb-ext-postgres`` and sets
``DPKIT_REQUIRE_SCANNERS=1``, which turns every skip here into a failure.

The PostgreSQL tests start a throwaway server (``tests/_postgres.py``: ``initdb`` +
``pg_ctl`` in a temporary directory, listening on a Unix socket only, as the
``postgres`` OS user when running as root); it is stopped and removed at teardown.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import duckdb
import numpy as np
import pandas as pd
import pytest

from _postgres import Postgres, PostgresUnavailable
from dpkit.errors import DataError, InvalidParameterError
from dpkit.tables import Session
from dpkit.tables.engines.duckdb_engine import connect
from dpkit.tables.session import _load_scanner

from .conftest import SECRET

REQUIRE = os.environ.get("DPKIT_REQUIRE_SCANNERS") == "1"
KEYS = ["A", "B", "C"]
AGE_BOUNDS = (0.0, 100.0)
INCOME_BOUNDS = (0.0, 200_000.0)


def _unavailable(reason: str) -> NoReturn:
    """Skip, or fail when ``DPKIT_REQUIRE_SCANNERS=1`` (``make scanners``)."""
    if REQUIRE:
        pytest.fail(
            f"{reason} (DPKIT_REQUIRE_SCANNERS=1 requires the scanner tests)", pytrace=False
        )
    pytest.skip(reason, allow_module_level=True)


def _loads(kind: str) -> bool:
    """Whether dpkit can load the scanner here (same lookup as ``from_sql``)."""
    return bool(_load_scanner(connect(), kind, None))


if not _loads("sqlite"):
    _unavailable(
        f"DuckDB {duckdb.__version__}'s sqlite scanner extension cannot be loaded in this "
        "interpreter (make scanners runs this module with DuckDB 1.4.4 and duckdb-ext-*)"
    )


# ------------------------------------------------------------------ data and truth

#: The people table's declared column types (SQLite stores them as it likes).
PEOPLE_TYPES = {
    "id": "BIGINT",
    "age": "DOUBLE",
    "income": "DOUBLE",
    "district": "VARCHAR",
    "note": "VARCHAR",
}


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    """300 rows: an integer age with NULLs, a float income, a category, a text note."""
    rng = np.random.default_rng(20260205)
    n = 300
    age = rng.integers(18, 90, n).astype(float)
    age[[3, 50, 200]] = np.nan
    return pd.DataFrame(
        {
            "id": np.arange(n),
            "age": age,
            "income": np.round(rng.lognormal(10, 0.7, n), 2),
            "district": rng.choice(KEYS, n, p=[0.5, 0.3, 0.2]),
            "note": [SECRET if i % 7 == 0 else f"row {i}" for i in range(n)],
        }
    )


def _rows(frame: pd.DataFrame) -> list[tuple[Any, ...]]:
    return [
        (int(r.id), None if np.isnan(r.age) else int(r.age), float(r.income), r.district, r.note)
        for r in frame.itertuples(index=False)
    ]


def _utility(x: np.ndarray, value: float, q: float) -> float:
    n = x.size
    return -max(np.sum(x < value) - q * n, np.sum(x > value) - (1 - q) * n, 0.0)


def _within(release: Any, truth: float) -> None:
    lo, hi = release.ci
    assert lo <= truth <= hi, (truth, release.value, release.ci)


def _check_answers(s: Session, frame: pd.DataFrame) -> None:
    """count/sum/mean/median/group-by against the exact answers (intervals at level 0.99)."""
    assert set(frame.columns) <= set(s.columns)
    assert s.column_kinds["age"] == "numeric" and s.column_kinds["district"] == "text"
    age = frame["age"].dropna().clip(*AGE_BOUNDS)

    _within(s.count(epsilon=1.0), len(frame))
    _within(s.count("age", epsilon=1.0), len(age))  # NULLs are dropped (the default policy)
    _within(
        s.sum("income", epsilon=1.0, bounds=INCOME_BOUNDS),
        frame["income"].clip(*INCOME_BOUNDS).sum(),
    )
    _within(s.mean("age", epsilon=1.0, bounds=AGE_BOUNDS), age.mean())

    med = s.median("age", epsilon=1.0, bounds=AGE_BOUNDS, grid_size=101)
    x = age.to_numpy()
    opt = max(_utility(x, c, 0.5) for c in np.linspace(*AGE_BOUNDS, 101))
    assert _utility(x, med.value, 0.5) >= opt - med.details["rank_error"]
    assert abs(med.value - np.median(x)) <= 5

    counts = s.count(epsilon=1.0, group_by="district", keys=KEYS)
    means = s.mean("age", epsilon=1.0, bounds=AGE_BOUNDS, group_by="district", keys=KEYS)
    by = frame.dropna(subset=["age"]).assign(age=lambda f: f["age"].clip(*AGE_BOUNDS))
    for key in KEYS:
        lo, hi = counts.ci[key]
        assert lo <= int((frame["district"] == key).sum()) <= hi
        lo, hi = means.ci[key]
        assert lo <= by.loc[by["district"] == key, "age"].mean() <= hi


def _same_as_pandas(s: Session, frame: pd.DataFrame) -> None:
    """Same seed, same exact aggregates: the scanner session answers like from_pandas."""
    ref = Session.from_pandas(frame, types=PEOPLE_TYPES, epsilon=10.0, rng=11, level=0.99)
    for query in (
        lambda t: t.count(epsilon=1.0).value,
        lambda t: t.sum("income", epsilon=1.0, bounds=INCOME_BOUNDS).value,
        lambda t: t.mean("age", epsilon=1.0, bounds=AGE_BOUNDS).value,
        lambda t: t.median("age", epsilon=1.0, bounds=AGE_BOUNDS, grid_size=101).value,
    ):
        assert query(s) == pytest.approx(query(ref), rel=1e-9)


def _attached_type(s: Session) -> str:
    con: Any = s.engine._connection  # type: ignore[attr-defined]
    row = con.execute(
        "SELECT type FROM duckdb_databases() WHERE database_name = 'dpkit_source'"
    ).fetchone()
    assert row is not None, "from_sql did not attach the database: the scanner path was not taken"
    return str(row[0])


def _write_is_refused(s: Session) -> None:
    con: Any = s.engine._connection  # type: ignore[attr-defined]
    with pytest.raises(duckdb.Error, match=r"(?i)read.only"):
        con.execute("INSERT INTO dpkit_source.people VALUES (-1, 1, 1.0, 'A', 'x')")
    with pytest.raises(duckdb.Error, match=r"(?i)read.only"):
        con.execute("DELETE FROM dpkit_source.people")


# ------------------------------------------------------------------ SQLite


@pytest.fixture(scope="module")
def sqlite_db(frame: pd.DataFrame, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sqlite") / "people.sqlite"
    with sqlite3.connect(path) as db:
        db.execute(
            "CREATE TABLE people (id INTEGER PRIMARY KEY, age INTEGER, income REAL, "
            "district TEXT NOT NULL, note TEXT)"
        )
        db.executemany("INSERT INTO people VALUES (?, ?, ?, ?, ?)", _rows(frame))
    db.close()
    return path


def _digest(path: Path) -> tuple[str, list[str]]:
    return hashlib.sha256(path.read_bytes()).hexdigest(), sorted(os.listdir(path.parent))


def test_sqlite_scanner_answers(sqlite_db: Path, frame: pd.DataFrame) -> None:
    before = _digest(sqlite_db)
    s = Session.from_sql(sqlite_db, "people", types=PEOPLE_TYPES, epsilon=20.0, rng=5, level=0.99)
    assert _attached_type(s) == "sqlite"
    _check_answers(s, frame)
    _same_as_pandas(
        Session.from_sql(sqlite_db, "people", types=PEOPLE_TYPES, epsilon=10.0, rng=11, level=0.99),
        frame,
    )
    _write_is_refused(s)
    assert _digest(sqlite_db) == before  # same bytes, no journal or WAL files left


def test_sqlite_scanner_errors(sqlite_db: Path, tmp_path: Path) -> None:
    with pytest.raises(DataError, match="could not read table 'nope' from the SQLite file") as e:
        Session.from_sql(sqlite_db, "nope", types=PEOPLE_TYPES, epsilon=1.0)
    assert SECRET not in str(e.value) and e.value.__context__ is None
    with pytest.raises(InvalidParameterError, match="does not exist"):
        Session.from_sql(tmp_path / "missing.sqlite", "people", types=PEOPLE_TYPES, epsilon=1.0)
    with pytest.raises(DataError, match="could not read table 'people' from the SQLite file") as e:
        not_sqlite = tmp_path / "text.sqlite"
        not_sqlite.write_text(f"{SECRET}\n" * 100)
        Session.from_sql(not_sqlite, "people", types=PEOPLE_TYPES, epsilon=1.0)
    assert SECRET not in str(e.value)


def test_explicit_extension_directory(sqlite_db: Path, tmp_path: Path) -> None:
    con = connect()
    assert _load_scanner(con, "sqlite", None)
    row = con.execute(
        "SELECT install_path FROM duckdb_extensions() WHERE extension_name = 'sqlite_scanner'"
    ).fetchone()
    assert row is not None
    directory = Path(row[0]).parents[
        2
    ]  # <dir>/v<version>/<platform>/sqlite_scanner.duckdb_extension
    s = Session.from_sql(
        sqlite_db, "people", types=PEOPLE_TYPES, epsilon=1.0, extension_directory=directory
    )
    assert _attached_type(s) == "sqlite"
    # an explicit directory is the only one tried: no silent fallback when it lacks the extension
    with pytest.raises(InvalidParameterError, match=r"could not load its sqlite extension.*v\d"):
        Session.from_sql(
            sqlite_db, "people", types=PEOPLE_TYPES, epsilon=1.0, extension_directory=tmp_path
        )
    with pytest.raises(InvalidParameterError, match="is not a directory"):
        Session.from_sql(
            sqlite_db,
            "people",
            types=PEOPLE_TYPES,
            epsilon=1.0,
            extension_directory=tmp_path / "nope",
        )


# ------------------------------------------------------------------ PostgreSQL


def _sql_value(v: Any) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, str):
        return "'" + v.replace("'", "''") + "'"
    return repr(v)


@pytest.fixture(scope="module")
def postgres(frame: pd.DataFrame) -> Iterator[Postgres]:
    if not _loads("postgres"):
        _unavailable(f"DuckDB {duckdb.__version__}'s postgres scanner extension cannot be loaded")
    try:
        server = Postgres()
    except PostgresUnavailable as err:
        _unavailable(str(err))
    try:
        server.start()
        values = ",\n".join("(" + ", ".join(map(_sql_value, r)) + ")" for r in _rows(frame))
        server.psql(
            "CREATE TABLE people (id integer PRIMARY KEY, age integer, income double precision, "
            "district text NOT NULL, note text);\n"
            f"INSERT INTO people VALUES\n{values};\n"
        )
        yield server
    finally:
        server.stop()


_PG_DIGEST = "SELECT count(*), md5(string_agg(p::text, '|' ORDER BY id)) FROM people p;"


def test_postgres_scanner_answers(postgres: Postgres, frame: pd.DataFrame) -> None:
    before = postgres.psql(_PG_DIGEST)
    assert before.startswith(f"{len(frame)}|")
    s = Session.from_sql(
        postgres.dsn(),
        "people",
        kind="postgres",
        types=PEOPLE_TYPES,
        epsilon=20.0,
        rng=5,
        level=0.99,
    )
    assert _attached_type(s) == "postgres"
    _check_answers(s, frame)
    _same_as_pandas(
        Session.from_sql(
            postgres.dsn(),
            "people",
            kind="postgres",
            types=PEOPLE_TYPES,
            epsilon=10.0,
            rng=11,
            level=0.99,
        ),
        frame,
    )
    _write_is_refused(s)
    assert postgres.psql(_PG_DIGEST) == before


def test_postgres_scanner_errors(postgres: Postgres, tmp_path: Path) -> None:
    with pytest.raises(DataError, match="could not read table 'nope' from the PostgreSQL") as e:
        Session.from_sql(postgres.dsn(), "nope", kind="postgres", types=PEOPLE_TYPES, epsilon=1.0)
    assert SECRET not in str(e.value) and e.value.__context__ is None
    with pytest.raises(DataError, match="could not open the PostgreSQL database"):
        Session.from_sql(
            f"host={tmp_path} port=5432 user=dpkit dbname=postgres connect_timeout=5",
            "people",
            kind="postgres",
            types=PEOPLE_TYPES,
            epsilon=1.0,
        )
