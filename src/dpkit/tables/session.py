"""``dpkit.Session``: private aggregate queries over one table, paid from one budget.

A session binds a table (through an engine: DuckDB by default, or Spark), a
:class:`~dpkit.tables.schema.Schema` of public metadata, and an
:class:`~dpkit.accounting.Accountant` holding the budget (optionally persisted
in a ledger file). The session is a thin façade: every query method builds a
frozen :class:`~dpkit.tables.specs.QuerySpec` and :meth:`Session.answer` runs
it through the same steps, each in its own module:

1. :func:`~dpkit.tables.kinds.validate` — every public parameter
   (columns, literals as values of the declared types, bounds, domains, keys,
   sizes) is checked with no data read, so errors here reveal nothing;
2. :mod:`~dpkit.tables.costing` — the privacy event (ε, δ) and ledger label;
3. :func:`~dpkit.accounting.charge_and_run` charges the accountant (refused
   with :class:`~dpkit.errors.BudgetExceededError` before anything is read);
4. :func:`~dpkit.tables.execution.execute` — one engine pass and calibrated
   noise (:mod:`dpkit.tables.kinds`), the only step that reads data; a failure
   there is one :class:`~dpkit.errors.ReleaseFailedError` for every dataset.

Neighbouring relation: add or remove one row; with ``privacy_unit=`` add or
remove all rows of one person, of which each query keeps at most
``max_contributions``. The privacy argument of each query is in its docstring
and, at length, in ``docs/queries.md``.
"""

from __future__ import annotations

import secrets
import threading
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from os import PathLike
from pathlib import Path
from typing import Any, TypedDict, Unpack

import numpy as np
import pandas as pd

from dpkit._checks import check_delta, check_epsilon, check_level
from dpkit.accounting import Budget, charge_and_run
from dpkit.errors import DataError, InvalidParameterError, PrivacyWarning
from dpkit.privacy import neighbouring
from dpkit.release import Release
from dpkit.tables import costing
from dpkit.tables.engines.base import ColumnKind, Condition, Engine
from dpkit.tables.execution import execute
from dpkit.tables.kinds import validate
from dpkit.tables.noise import check_noise, for_payer
from dpkit.tables.plans import Plan, PlannedQuery, provably_disjoint, same_costs, total_cost
from dpkit.tables.query_methods import QueryMethods
from dpkit.tables.results import GroupedRelease
from dpkit.tables.schema import Schema
from dpkit.tables.sources import (
    _as_declared,
    _as_view,
    _attach_and_read,
    _check_types,
    _collect_lazy,
    _duckdb_build,
    _guard_read,
    _is_select,
    _load_scanner,
    _pandas_without_inference,
    _spark_as_declared,
    _sqlite_fallback,
    _sqlite_types,
    check_sqlite_path,
    read_csv_text,
)
from dpkit.tables.specs import QUERY_KINDS, Parallel, Query, QuerySpec
from dpkit.tables.validation import (
    HISTOGRAM2D_METHODS,
    HISTOGRAM_METHODS,
    TableContext,
    ValidatedQuery,
    check_where,
)
from dpkit.tables.work import (
    LIBRARY_LIMITS,
    Cancellation,
    GuardedEngine,
    WorkLimits,
    estimate,
    estimate_all,
    presize,
)

__all__ = [
    "HISTOGRAM2D_METHODS",
    "HISTOGRAM_METHODS",
    "QUERY_KINDS",
    "Parallel",
    "Plan",
    "Query",
    "Session",
    "_load_scanner",
]

Result = Release | GroupedRelease


class SessionOptions(TypedDict, total=False):
    """The :class:`Session` arguments every constructor (``from_csv`` ...) passes on."""

    epsilon: float | None
    delta: float
    ledger: str | PathLike[str] | None
    schema: Schema | Mapping[str, Any] | str | PathLike[str] | None
    privacy_unit: str | None
    max_contributions: int
    max_groups: int | None
    rng: object
    level: float
    accountant: Any
    dataset: str | None
    noise: str


class Session(QueryMethods):
    """Private queries over one table, paid from one privacy budget.

    Build one with a constructor for your source: :meth:`from_csv`,
    :meth:`from_parquet`, :meth:`from_pandas`, :meth:`from_polars`,
    :meth:`from_arrow`, :meth:`from_duckdb`, :meth:`from_sql`,
    :meth:`from_spark` (or pass an engine directly).

    Column types are public metadata the data owner declares: every
    constructor takes ``types=`` (column name → DuckDB type name, every
    column) and reads the source through a per-value conversion to them (see
    the constructors block below); a source's own types only with
    ``infer_types=True``, which warns.

    Args:
        engine: the table engine (see :mod:`dpkit.tables.engines`). Its column
            types are published as they are: an engine built by hand must
            already read its source into the declared types (the constructors
            do this for every source).
        epsilon, delta: the total budget of the session.
        ledger: a file that records every charge; a new session on the same
            file (in this process or another) sees what was already spent.
        schema: a :class:`Schema`, a mapping in the schema file format, or a
            path to a JSON/TOML/YAML schema file.
        privacy_unit: a column identifying people. The guarantee is then per
            person (adding or removing all their rows); each query keeps at
            most ``max_contributions`` rows per person, chosen by a random
            order that ignores values, and scales its sensitivities by that.
        max_contributions: the per-person row bound ``k`` (default 1).
        max_groups: with ``privacy_unit``, the most groups ``G`` one person
            adds rows to in a grouped query (``None``, the default: no bound,
            a person's ``k`` rows may all fall in one group). A grouped query
            then keeps, per person, ``k`` rows in each of ``G`` groups chosen
            by a salted hash of the group key (Tumult's max_groups /
            max_rows_per_group), so a count vector's sensitivity is ℓ1 ``k·G``
            (Laplace) and ℓ2 ``k·√G`` (Gaussian noise): a person in many
            groups costs √G, not G. Ungrouped queries ignore it (one group).
        rng: ``None`` (secure randomness, the default), or an ``int`` seed /
            ``numpy.random.Generator`` for reproducible tests. Never publish
            answers made with a seed.
        level: default confidence level of the intervals (0.95).
        accountant: an existing :class:`~dpkit.accounting.Accountant` to pay
            from instead of ``epsilon``/``delta``/``ledger`` (one budget shared
            by several sessions or other releases); or the name of the
            composition rule of the session's own accountant, with
            ``epsilon``/``delta``: ``"basic"`` (the default), ``"zcdp"``,
            ``"rdp"`` (adaptive-valid and the tightest for an interactive
            session), ``"pld"`` or ``"tightest"`` (valid only for queries fixed
            in advance, a script: warned). See ``docs/accounting.md``.
        noise: ``"laplace"`` (the default), ``"gaussian"`` or ``"auto"``: the
            noise of every additive step (:mod:`dpkit.tables.noise`). Gaussian
            noise needs ``accountant="zcdp"``, ``"rdp"``, ``"pld"`` or
            ``"tightest"`` and ``delta > 0``; ``"auto"`` takes, per step, the
            noise with the smaller error bar at the same zCDP cost.
        dataset: the identity of the dataset (a name the data owner chooses;
            file constructors default to the file's resolved path). A ledger
            records it and refuses to guard another dataset; a dataset that
            has a ledger is refused any other one, or a budget in memory
            (:mod:`dpkit.accounting.registry`; the owner's explicit override
            is ``accountant=Accountant(..., dataset=..., new_ledger=True)``).

    Every query runs in four steps, and the order is the guarantee's
    structure: **validate** the spec against the declared schema
    (:mod:`dpkit.tables.validation`, no data read), **cost** it
    (:mod:`dpkit.tables.costing`), **charge** the accountant (refused before
    any read if it does not fit), then **execute** it
    (:mod:`dpkit.tables.execution`, the only step that reads data) through
    :func:`dpkit.accounting.charge_and_run`: a failure after the charge is one
    :class:`~dpkit.errors.ReleaseFailedError`, the same for every dataset, and
    the charge stands. A session is safe to share between threads: each query
    is charged exactly once and answered; executions run one at a time (the
    engine and the random source are not shared), charges may overlap them.

    The emptiness of the whole table is treated as public metadata (like its
    column names): a session refuses an empty table at construction. Whether
    a *filter* or *group* is empty is private and only ever shows through
    noisy answers.
    """

    def __init__(
        self,
        engine: Engine,
        *,
        epsilon: float | None = None,
        delta: float = 0.0,
        ledger: str | PathLike[str] | None = None,
        schema: Schema | Mapping[str, Any] | str | PathLike[str] | None = None,
        privacy_unit: str | None = None,
        max_contributions: int = 1,
        rng: object = None,
        level: float = 0.95,
        accountant: Any = None,
        dataset: str | None = None,
        noise: str = "laplace",
        max_groups: int | None = None,
    ) -> None:
        from dpkit.accounting import Accountant

        self._noise = check_noise(noise)
        composition = "basic"
        if isinstance(accountant, str):
            composition = _check_rule(accountant)
            accountant = None
        if accountant is not None:
            if epsilon is not None or delta or ledger is not None:
                raise InvalidParameterError(
                    "give either accountant= (a shared budget) or epsilon=/delta=/ledger=, not both."
                )
            if not isinstance(accountant, Accountant):
                raise InvalidParameterError("accountant must be a dpkit.accounting.Accountant.")
        elif epsilon is None:
            raise InvalidParameterError(
                "a session needs epsilon=, its total privacy budget (e.g. epsilon=1.0), or "
                "accountant= to share an existing budget."
            )
        else:
            check_epsilon(epsilon)
            check_delta(delta)
        self._engine = engine
        self._kinds: dict[str, ColumnKind] = engine.column_kinds()
        self._schema = self._load_schema(schema)
        self._level = check_level(level)
        if privacy_unit is not None:
            self._check_column(privacy_unit, "privacy_unit")
        if (
            not isinstance(max_contributions, int | np.integer)
            or isinstance(max_contributions, bool)
            or max_contributions < 1
        ):
            raise InvalidParameterError(
                "max_contributions must be an integer >= 1 (the most rows one person may add "
                "to a query)."
            )
        if max_contributions != 1 and privacy_unit is None:
            raise InvalidParameterError(
                "max_contributions needs privacy_unit=<person id column>; with one row per "
                "person (the default) it is 1."
            )
        self._k = int(max_contributions)
        self._max_groups = _check_max_groups(max_groups, privacy_unit)
        self._rng = self._make_rng(rng)
        self._privacy_unit = privacy_unit
        if dataset is not None and (not isinstance(dataset, str) or not dataset):
            raise InvalidParameterError("dataset must be a non-empty name.")
        self._dataset = dataset
        self._token = secrets.token_hex(16)
        self._lock = threading.RLock()
        self._context = TableContext(
            kinds=dict(self._kinds),
            types=engine.column_types(),
            schema=self._schema,
            max_contributions=self._k,
            privacy_unit=privacy_unit,
            level=self._level,
            max_groups=self._max_groups,
        )
        if not engine.has_rows():
            raise DataError(
                "the table has no rows, so there is nothing to query. (The table's emptiness "
                "is treated as public metadata; emptiness after a filter is not, and shows "
                "only through noisy answers.)"
            )
        if accountant is None:
            assert epsilon is not None  # checked above
            accountant = _new_accountant(Budget(epsilon, delta), ledger, dataset, composition)
        self._accountant = accountant
        self._context = replace(self._context, noise=for_payer(self._noise, accountant))

    # -- constructors ---------------------------------------------------------------------
    #
    # Column types are public metadata the data owner declares. Every constructor takes
    # ``types`` (column name -> DuckDB type name, e.g. {"age": "DOUBLE", "day": "DATE"}),
    # must be given one for every column, and reads the source through one per-value
    # conversion to those types (dpkit.tables.sources._as_declared): a value that does not
    # fit is missing (SQL NULL, then the null policy), never an error at query time. A
    # source's own types (a sniffer, a frame's dtypes, a file's schema) are used only with
    # ``infer_types=True``, which warns with a PrivacyWarning naming the columns.

    @classmethod
    def from_csv(
        cls,
        path: str | PathLike[str],
        *,
        types: Mapping[str, str] | None = None,
        infer_types: bool = False,
        materialize: bool = False,
        read_options: Mapping[str, Any] | None = None,
        encoding: str = "utf-8",
        **options: Unpack[SessionOptions],
    ) -> Session:
        """A session over a CSV file, scanned by DuckDB.

        ``types`` declares every column's type (DuckDB type names); each cell
        is read as text and converted on its own, so a malformed cell in a
        typed column is a missing value. ``infer_types=True`` types undeclared
        columns with DuckDB's sniffer instead, which reads a sample of the
        rows (warned). ``read_options`` go to ``duckdb.read_csv`` (e.g.
        ``{"delim": ";"}``). ``materialize=True`` loads the file into DuckDB
        once (faster repeated queries, uses memory); otherwise every query
        scans the file. ``options`` are the other :class:`Session` arguments;
        ``dataset`` defaults to the file's resolved path.

        The first line is the header row naming every column; every row must
        have as many fields as it (checked in one full scan when the file is
        opened: a ragged file is refused, never read with made-up column
        names). ``encoding`` (a Python codec name, e.g. ``"latin-1"``) other
        than UTF-8 converts the file into memory once.
        """
        from dpkit.tables.engines.duckdb_engine import DuckDBEngine, connect

        declared = _check_types(types, infer_types)
        p = Path(path)
        if not p.is_file():
            raise InvalidParameterError(f"CSV file {str(p)!r} does not exist.")
        con = connect()
        header, read = read_csv_text(con, p, read_options, encoding)

        def sniffed() -> dict[str, str]:
            rel = _guard_read(lambda: con.read_csv(str(p), **read), "CSV file")
            return {c: str(t) for c, t in zip(rel.columns, rel.types)}

        rel = _as_declared(
            header,
            declared,
            infer_types,
            "CSV file",
            trusted="DuckDB's sniffer typed them from a sample of the rows",
            inferred=sniffed,
        )
        options.setdefault("dataset", str(p.resolve()))
        return cls(
            DuckDBEngine(con, _as_view(con, rel, materialize=materialize)),
            **options,
        )

    @classmethod
    def from_parquet(
        cls,
        path: str | PathLike[str],
        *,
        types: Mapping[str, str] | None = None,
        infer_types: bool = False,
        **options: Unpack[SessionOptions],
    ) -> Session:
        """A session over a Parquet file (or glob), scanned by DuckDB.

        The file's own column types are its writer's (often inferred from the
        rows by pandas or Spark), so they are used only with
        ``infer_types=True`` (warned); otherwise ``types`` declares every
        column and each value is converted to it (``TRY_CAST``).
        """
        from dpkit.tables.engines.duckdb_engine import DuckDBEngine, connect

        declared = _check_types(types, infer_types)
        con = connect()
        raw = _guard_read(lambda: con.read_parquet(str(path)), "Parquet file")
        rel = _as_declared(
            raw,
            declared,
            infer_types,
            "Parquet file",
            trusted="the file's schema, as its writer set (or inferred) it",
        )
        if Path(path).is_file():
            options.setdefault("dataset", str(Path(path).resolve()))
        return cls(
            DuckDBEngine(con, _as_view(con, rel)),
            **options,
        )

    @classmethod
    def from_pandas(
        cls,
        df: pd.DataFrame,
        *,
        types: Mapping[str, str] | None = None,
        infer_types: bool = False,
        **options: Unpack[SessionOptions],
    ) -> Session:
        """A session over a pandas DataFrame, queried in place by DuckDB.

        A frame's dtypes are not a declaration (pandas infers them from the
        values it was built from): ``types`` declares every column, and each
        value is converted to it. ``object`` columns are first read as text
        value by value (never typed by DuckDB from a sample of their values).
        ``infer_types=True`` takes undeclared columns' types from the dtypes
        (``object`` columns as text), with a warning.
        """
        from dpkit.tables.engines.duckdb_engine import DuckDBEngine, connect

        if not isinstance(df, pd.DataFrame):
            raise InvalidParameterError(
                f"from_pandas needs a pandas DataFrame, got {type(df).__name__}."
            )
        declared = _check_types(types, infer_types)
        con = connect()
        frame = _pandas_without_inference(df)
        raw = _guard_read(lambda: con.from_df(frame), "DataFrame")
        rel = _as_declared(
            raw,
            declared,
            infer_types,
            "DataFrame",
            trusted="the frame's dtypes, which pandas infers from the values it was built from",
        )
        return cls(
            DuckDBEngine(con, _as_view(con, rel)),
            **options,
        )

    @classmethod
    def from_polars(
        cls,
        df: Any,
        *,
        types: Mapping[str, str] | None = None,
        infer_types: bool = False,
        **options: Unpack[SessionOptions],
    ) -> Session:
        """A session over a polars DataFrame or LazyFrame (through Arrow).

        Types as in :meth:`from_arrow`. A ``LazyFrame`` is collected once, here
        (after the ``types`` check), and then read like a DataFrame: each value
        converted to its declared type. A failing plan raises one
        :class:`dpkit.errors.DataError` whose message quotes nothing of the data.
        """
        lazy = hasattr(df, "collect") and not hasattr(df, "to_arrow")
        if not (lazy or hasattr(df, "to_arrow")):
            raise InvalidParameterError(
                f"from_polars needs a polars DataFrame or LazyFrame, got {type(df).__name__}."
            )
        _check_types(types, infer_types)
        if lazy:
            df = _collect_lazy(df)
        return cls._from_arrow(
            df.to_arrow(),
            types,
            infer_types,
            "polars DataFrame",
            **options,
        )

    @classmethod
    def from_arrow(
        cls,
        table: Any,
        *,
        types: Mapping[str, str] | None = None,
        infer_types: bool = False,
        **options: Unpack[SessionOptions],
    ) -> Session:
        """A session over a ``pyarrow.Table`` (or record batch reader), scanned by DuckDB.

        An Arrow schema is its producer's (often inferred from the values), so
        it is used only with ``infer_types=True`` (warned); otherwise ``types``
        declares every column and each value is converted to it.
        """
        _check_types(types, infer_types)
        return cls._from_arrow(
            table,
            types,
            infer_types,
            "Arrow table",
            **options,
        )

    @classmethod
    def _from_arrow(
        cls,
        table: Any,
        types: Mapping[str, str] | None,
        infer_types: bool,
        what: str,
        **options: Unpack[SessionOptions],
    ) -> Session:
        from dpkit.tables.engines.duckdb_engine import DuckDBEngine, connect

        declared = _check_types(types, infer_types)
        con = connect()
        raw = _guard_read(lambda: con.from_arrow(table), what)
        rel = _as_declared(
            raw,
            declared,
            infer_types,
            what,
            trusted="its Arrow schema, as its producer set (or inferred) it",
            stacklevel=5,  # the caller of from_arrow/from_polars
        )
        return cls(DuckDBEngine(con, _as_view(con, rel)), **options)

    @classmethod
    def from_duckdb(
        cls,
        source: Any,
        *,
        connection: Any = None,
        types: Mapping[str, str] | None = None,
        infer_types: bool = False,
        **options: Unpack[SessionOptions],
    ) -> Session:
        """A session over a DuckDB relation, a table/view name, or a SQL query.

        A string is a SQL query when DuckDB's parser reads it as one ``SELECT``
        statement (``"SELECT age, sex FROM people WHERE year = 2020"``), and a
        table or view name otherwise; either is run on ``connection``, or on
        DuckDB's default connection (the one ``duckdb.sql`` uses) when none is
        given. Any other statement (``CREATE``, ``INSERT``, several statements)
        is refused before it runs.

        ``types`` declares every column; the relation is read through a
        per-value conversion to them (``TRY_CAST``). The table's own types
        are used only with ``infer_types=True`` (warned: a view's or a
        relation's types can follow its rows).
        """
        import duckdb

        from dpkit.tables.engines.duckdb_engine import DuckDBEngine

        declared = _check_types(types, infer_types)
        if isinstance(source, duckdb.DuckDBPyRelation):
            raw = source
        elif isinstance(source, str):
            if connection is None:
                connection = duckdb.default_connection()
            if _is_select(source):
                raw = _guard_read(lambda: connection.sql(source), "DuckDB query")
            else:
                raw = _guard_read(lambda: connection.table(source), f"DuckDB table {source!r}")
        else:
            raise InvalidParameterError(
                "from_duckdb needs a duckdb relation, a table or view name, or a SQL "
                f"SELECT query (a str), got {type(source).__name__}."
            )
        rel = _as_declared(
            raw,
            declared,
            infer_types,
            "DuckDB table",
            trusted="the table's or relation's own types",
        )
        return cls(
            DuckDBEngine(connection, rel),
            **options,
        )

    @classmethod
    def from_sql(
        cls,
        database: str | PathLike[str],
        table: str,
        *,
        kind: str = "sqlite",
        extension_directory: str | PathLike[str] | None = None,
        types: Mapping[str, str] | None = None,
        infer_types: bool = False,
        **options: Unpack[SessionOptions],
    ) -> Session:
        """A session over a table in a SQLite file or a PostgreSQL database.

        ``types`` declares every column; each value is converted to it
        (``TRY_CAST``), so a value of another kind (SQLite stores any value in
        any column) is missing, never an error at query time. SQLite values
        are read as text first, by their own storage class, with or without
        DuckDB's extension. ``infer_types=True`` takes undeclared columns'
        types from the table's declaration instead (SQLite: the declared
        type's affinity; PostgreSQL: the column types), with a warning.

        DuckDB reads it through its ``sqlite``/``postgres`` scanner extension
        (attached read-only), which must already be on the machine: dpkit never
        downloads anything at run time (no ``INSTALL``, no autoinstall). The
        extension is looked for in DuckDB's own extension directory (where
        ``duckdb.install_extension`` puts it), then in the directory of the
        ``duckdb_ext`` package when it is importable (the PyPI packages
        ``duckdb-ext-sqlite``/``duckdb-ext-postgres`` ship the binaries for
        one DuckDB version each, which must be the installed one).

        ``extension_directory`` names a directory holding the extension
        instead (laid out as DuckDB's: ``v<version>/<platform>/<name>_scanner
        .duckdb_extension``, e.g. a copy of ``~/.duckdb/extensions`` from a
        connected machine); only that directory is then tried, and an error
        says so if the extension cannot be loaded from it.

        Without the extension (and no ``extension_directory``), a SQLite table
        is read with Python's ``sqlite3`` into DuckDB (in memory); PostgreSQL
        raises an error listing the offline ways to provide the extension.

        ``database`` is a file path (SQLite) or a libpq connection string
        (PostgreSQL, e.g. ``"dbname=shop host=localhost"``, or
        ``host=/path/to/socket/dir`` for a Unix socket).
        """
        from dpkit.tables.engines.duckdb_engine import DuckDBEngine, connect

        declared = _check_types(types, infer_types)
        if kind not in ("sqlite", "postgres"):
            raise InvalidParameterError(f"kind must be 'sqlite' or 'postgres', got {kind!r}.")
        if not isinstance(table, str) or not table:
            raise InvalidParameterError("table must be a table name.")
        if kind == "sqlite":
            database = check_sqlite_path(database)
            options.setdefault("dataset", str(database))
        con = connect()
        if _load_scanner(con, kind, extension_directory):
            raw = _attach_and_read(con, database, table, kind)
        elif kind == "sqlite":
            raw = _sqlite_fallback(con, Path(database), table)
        else:
            version, platform = _duckdb_build(con)
            raise InvalidParameterError(
                f"DuckDB's postgres extension is not installed (for DuckDB {version} here), "
                "and dpkit does not download at run time. Offline options: pip install "
                f"duckdb-ext-postgres (its version must match DuckDB {version}); or pass "
                "extension_directory= a directory holding "
                f"v{version}/{platform}/postgres_scanner.duckdb_extension; or install it once "
                'on a connected machine with python -c "import duckdb; '
                "duckdb.install_extension('postgres')\" and copy ~/.duckdb/extensions over."
            )
        inferred: Callable[[], Mapping[str, str]] | None = None
        if kind == "sqlite":
            path = Path(database)
            what = "SQLite table"
            trusted = (
                "the table's declared column types, by SQLite's affinity rules "
                "(SQLite stores any value in any column)"
            )
            inferred = lambda: _sqlite_types(path, table)  # noqa: E731
        else:
            what, trusted = "PostgreSQL table", "the table's column types"
        rel = _as_declared(raw, declared, infer_types, what, trusted=trusted, inferred=inferred)
        return cls(DuckDBEngine(con, _as_view(con, rel)), **options)

    @classmethod
    def from_spark(
        cls,
        df: Any,
        *,
        types: Mapping[str, str] | None = None,
        infer_types: bool = False,
        **options: Unpack[SessionOptions],
    ) -> Session:
        """A session over a PySpark DataFrame; every aggregation runs in Spark.

        ``types`` declares every column with DuckDB type names (mapped to
        Spark's: ``BIGINT`` is ``bigint``, ``VARCHAR`` ``string``,
        ``TIMESTAMP`` ``timestamp_ntz``, ...); each value is converted with
        ``try_cast`` (NULL when it does not fit, in ANSI mode too). The
        DataFrame's own schema is used only with ``infer_types=True`` (warned).
        """
        from dpkit.tables.engines.spark_engine import SparkEngine

        declared = _check_types(types, infer_types)
        if not (hasattr(df, "groupBy") and hasattr(df, "dtypes")):
            raise InvalidParameterError(
                f"from_spark needs a PySpark DataFrame, got {type(df).__name__}."
            )
        frame = _spark_as_declared(df, declared, infer_types)
        return cls(
            SparkEngine(frame),
            **options,
        )

    # -- public state -----------------------------------------------------------------

    @property
    def remaining(self) -> Any:
        """The budget left (a :class:`dpkit.Budget`), as the accountant's rule certifies it.

        In the units an analyst thinks in: :meth:`afford` says how many more
        queries of a given kind and accuracy that is, e.g.
        ``session.afford(Query("mean", "age", bounds=(0, 100), epsilon=0.01))``.
        """
        return self._accountant.remaining

    def afford(
        self,
        spec: QuerySpec,
        *,
        limit: int = 1_000_000,
        accountant: Any = None,
        noise: str | None = None,
    ) -> int:
        """How many more times ``spec`` can be answered now, one after another (at most ``limit``).

        The query is validated and costed exactly as :meth:`prepare` and
        :meth:`answer` do (same errors, before anything else), then the
        session's accountant counts how many charges of that cost and privacy
        event its composition rule still admits after every charge in its
        ledger (:meth:`dpkit.accounting.Accountant.affordable`); 0 if not one.
        Nothing is charged and no data is read: the count depends only on
        public inputs (the spec, the schema, the noise setting, the budget and
        the charges already made), so it reveals nothing about the rows.
        Advisory: other sessions on the same ledger may spend in between.
        ``accountant``/``noise``: as for :meth:`answer` (another payer, another noise).
        """
        payer, context = self._payer(accountant, noise)
        planned = self._prepare(spec, context)
        return int(payer.affordable(planned.charge, planned.event, limit=limit))

    @property
    def spent(self) -> Any:
        """The budget spent so far, including by other sessions on the same ledger."""
        return self._accountant.spent

    @property
    def accountant(self) -> Any:
        """The :class:`~dpkit.accounting.Accountant` that pays for this session's queries."""
        return self._accountant

    @property
    def schema(self) -> Schema:
        return self._schema

    @property
    def columns(self) -> dict[str, str]:
        """Column names and storage types (public metadata)."""
        return self._engine.column_types()

    @property
    def column_kinds(self) -> dict[str, ColumnKind]:
        """Column names and kinds: numeric, text, boolean, temporal or other (public)."""
        return dict(self._kinds)

    @property
    def engine(self) -> Engine:
        return self._engine

    @property
    def guarded_engine(self) -> Any:
        """The engine with every call holding this session's lock: one engine pass at a time.

        What a release that reads through the engine outside :meth:`answer`
        (a synthetic table, a boosted model fitted on the session) must use,
        so that passes of concurrent callers on one session never interleave.
        """
        return GuardedEngine(self._engine, self._lock, None)

    @property
    def privacy_unit(self) -> str | None:
        """The column identifying people (public), or None: one row per person."""
        return self._privacy_unit

    # -- queries ----------------------------------------------------------------------
    # count, sum, mean, ... histogram2d: one method per registered kind, from QueryMethods
    # (dpkit.tables.query_methods); each builds a QuerySpec and calls answer().

    # -- the four steps ------------------------------------------------------------------

    #: How much work and answer one query may take (:mod:`dpkit.tables.work`); see limit_work().
    _limits: WorkLimits = LIBRARY_LIMITS

    @property
    def limits(self) -> WorkLimits:
        """The work and answer-size limits every query is checked against before its charge."""
        return self._limits

    def limit_work(
        self,
        *,
        max_work: float | None = LIBRARY_LIMITS.max_work,
        max_answer_bytes: int | None = LIBRARY_LIMITS.max_answer_bytes,
        rows: int | None = None,
    ) -> Session:
        """Set the most work (units of about 1 µs) and answer bytes one query may take.

        ``rows`` is the row count you declare the table has at most (public; it
        sizes the engine pass and bounds private-key groups). Queries beyond a
        limit are refused before anything is charged or read, with a message that
        names the parameter to reduce (:class:`~dpkit.tables.work.QueryTooLargeError`).
        The default is generous (about three hours, 1 GiB) but finite; the query
        service sets its own from ``[service]`` settings. Returns the session.
        """
        self._limits = WorkLimits(max_work, max_answer_bytes, rows)
        return self

    def prepare(
        self, spec: QuerySpec, *, accountant: Any = None, noise: str | None = None
    ) -> PlannedQuery:
        """Validate, cost and size one spec against this session's schema (no data read, no charge).

        A query whose estimated work or answer size (from its public parameters,
        :func:`dpkit.tables.work.estimate`) is beyond :attr:`limits` is refused here.
        ``accountant``/``noise``: cost it as :meth:`answer` would for that payer
        and noise (a Gaussian step's charge depends on the payer's rule and δ).
        """
        return self._prepare(spec, self._payer(accountant, noise)[1])

    def _payer(self, accountant: Any, noise: str | None) -> tuple[Any, TableContext]:
        """The accountant that pays (default: the session's) and the context it implies."""
        from dpkit.accounting import Accountant

        payer = self._accountant if accountant is None else accountant
        if not isinstance(payer, Accountant):
            raise InvalidParameterError("accountant must be a dpkit.accounting.Accountant.")
        kind = self._noise if noise is None else check_noise(noise)
        if payer is self._accountant and kind == self._noise:
            return payer, self._context
        return payer, replace(self._context, noise=for_payer(kind, payer))

    def _prepare(self, spec: QuerySpec, context: TableContext) -> PlannedQuery:
        if not isinstance(spec, QuerySpec):
            raise InvalidParameterError("expected a query spec (dpkit.tables.Query / QuerySpec).")
        self._limits.check(presize(spec))  # the sizes it states, before building anything
        query = validate(spec, context)
        self._limits.check(estimate(query, rows=self._limits.rows))
        cost = costing.cost(query)
        return PlannedQuery(
            query,
            costing.label(query),
            float(cost.epsilon_exact),
            float(cost.delta_exact),
            cost,
            costing.event(query),
        )

    def answer(
        self,
        spec: QuerySpec,
        *,
        accountant: Any = None,
        cancellation: Cancellation | None = None,
        noise: str | None = None,
    ) -> Result:
        """Validate, cost, charge and execute one query spec; the release with the budget left.

        ``accountant`` pays instead of the session's own (an
        :class:`~dpkit.accounting.Accountant`): the query service keeps one
        session per table and charges each analyst's queries to that analyst's
        grant. The order — validate, cost, charge, execute — is the same.

        ``noise`` (``"laplace"``, ``"gaussian"``, ``"auto"``) replaces the
        session's for this query (the service sets each grant's); with the
        payer's composition rule and δ it decides each step's noise
        (:mod:`dpkit.tables.noise`), before the charge.

        ``cancellation`` (a :class:`~dpkit.tables.work.Cancellation`) lets the
        caller stop the query when its time is up: the engine call running is
        interrupted and no further one starts; the query then fails with the one
        generic :class:`~dpkit.errors.ReleaseFailedError` and its charge stands.
        The session's lock is held only while an engine call runs, so whatever a
        stopped query still computes never delays the next one.
        """
        payer, context = self._payer(accountant, noise)  # its rule and δ decide the noise
        planned = self._prepare(spec, context)  # reads only public, frozen context

        def release() -> Result:
            # One engine pass at a time (the lock is taken per engine call, so the noise and
            # post-processing of one query overlap the next one's pass); the charge (and its
            # wait for the ledger) happens outside the lock, so it overlaps executions too.
            engine = GuardedEngine(self._engine, self._lock, cancellation)
            return execute(planned.query, engine, self._rng)

        result = charge_and_run(
            payer,
            planned.charge,
            planned.label,
            release,
            event=planned.event,
        )
        # what this charge left, and the session's neighbouring relation (public)
        relation = neighbouring(self._privacy_unit, self._k, self._max_groups)
        return replace(result, privacy=result.privacy.paid(payer.remaining_seen, relation))

    def synthesize(
        self,
        method: str = "mst",
        *,
        rows: int,
        epsilon: float | None = None,
        delta: float | None = None,
        rho: float | None = None,
        columns: Sequence[str] | None = None,
        bins: int = 16,
        workload: Sequence[Sequence[str]] | None = None,
        rng: object = None,
        progress: Callable[[str, int, int], None] | None = None,
        accountant: Any = None,
    ) -> Any:
        """A differentially private synthetic table of ``rows`` rows, paid from this session's budget.

        ``method="mst"`` (:mod:`dpkit.synth.mst`, McKenna et al. 2021): ρ-zCDP
        under add/remove one row, ρ given directly or as the largest ρ whose
        (ε, δ) conversion fits ``epsilon`` at ``delta`` (default: the budget's
        δ). ``columns`` (default: all) must each have a declared domain
        (categories) or bounds (numbers, cut into ``bins`` equal-width bins
        unless the schema declares ``edges``); see :mod:`dpkit.synth.domain`.
        ``method="aim"`` (:mod:`dpkit.synth.aim`, McKenna et al. 2022): the
        same guarantee, marginals chosen round by round for ``workload`` (public
        column tuples of one or two columns; default every pair); MST refuses
        ``workload``. Returns a :class:`dpkit.synth.SynthesisResult` (``table``,
        ``report``, ``privacy``). ``progress(step, done, total)``, if given, is
        called as each step starts (``done=0``) and advances: step names and
        counts from public parameters only (:data:`dpkit.synth.mst.Progress`).
        The guarantees and their proofs are in
        :func:`dpkit.synth.session.synthesize_mst` and ``synthesize_aim``. Needs the ``synth`` extra
        (``pip install dpkit[synth]``: ``mbi`` and JAX).

        ``accountant`` pays instead of the session's own, as for :meth:`answer`
        (the query service charges a dataset's publication ledger).
        """
        from dpkit.tables.synthesis import SynthesisInputs, synthesizer

        payer, _ = self._payer(accountant, None)
        run = synthesizer(method)
        inputs = SynthesisInputs(
            engine=self.guarded_engine,
            schema=self._schema,
            kinds=dict(self._kinds),
            types=dict(self._context.types),
            accountant=payer,
            privacy_unit=self._privacy_unit,
            max_contributions=self._k,
            rng=self._rng if rng is None else self._make_rng(rng),
        )
        return run(
            inputs,
            rows=rows,
            epsilon=epsilon,
            delta=delta,
            rho=rho,
            columns=columns,
            bins=bins,
            workload=workload,
            progress=progress,
        )

    def plan(self, queries: Sequence[QuerySpec | Parallel]) -> Plan:
        """Validate and cost a batch of queries without touching the data (a dry run).

        Sequential composition across items; a :class:`Parallel` item costs
        the max of its members when they are provably disjoint (see
        :mod:`dpkit.tables.plans`), else their sum. The plan is bound to this
        session: :meth:`run` on another session refuses it.
        """
        items: list[tuple[PlannedQuery, ...]] = []
        parallel: list[bool] = []
        for item in queries:
            if isinstance(item, QuerySpec):
                items.append((self.prepare(item),))
                parallel.append(False)
            elif isinstance(item, Parallel):
                if len(item.queries) < 2:
                    raise InvalidParameterError("Parallel needs at least two queries.")
                members = tuple(self.prepare(q) for q in item.queries)
                items.append(members)
                parallel.append(provably_disjoint([m.query for m in members]))
            else:
                raise InvalidParameterError("plan() takes a list of Query and Parallel items.")
        if not items:
            raise InvalidParameterError("plan() needs at least one query.")
        every = [p.query for group in items for p in group]
        self._limits.check(estimate_all(every, rows=self._limits.rows), "this plan")
        cost, _ = total_cost(items, parallel)
        return Plan(
            session=self._token,
            dataset=self._dataset,
            items=tuple(items),
            parallel=tuple(parallel),
            epsilon=float(cost.epsilon_exact),
            delta=float(cost.delta_exact),
            cost=cost,
        )

    def run(self, plan: Plan | Sequence[QuerySpec | Parallel]) -> list[Result]:
        """Charge a plan's total cost once (refused before any read), then run every query.

        The charge is never read from the plan: its specs are validated and
        costed again here (:meth:`plan`), and the fresh queries are the ones
        run. A plan whose recorded costs differ from that (edited after it was
        costed, e.g. with ``dataclasses.replace`` or ``object.__setattr__``) is
        refused before the charge, so what a plan shows is what is charged.
        """
        if not isinstance(plan, Plan):
            plan = self.plan(plan)
        if plan.session != self._token:
            raise InvalidParameterError(
                "this plan was prepared by another session (it was checked against that "
                "session's table and schema); prepare it again with this session's plan()."
            )
        fresh = self.plan(plan.specs())
        if not same_costs(plan, fresh):
            raise InvalidParameterError(
                "this plan's recorded costs differ from what its queries cost (it was changed "
                "after plan() costed it); prepare it again with this session's plan()."
            )
        plan = fresh
        queries: list[ValidatedQuery] = [p.query for group in plan.items for p in group]

        def run_all() -> list[Result]:
            return [execute(q, self._engine, self._rng) for q in queries]

        _, event = total_cost(plan.items, plan.parallel)  # fresh: recomputed from the specs
        with self._lock:
            results = charge_and_run(
                self._accountant,
                plan.cost,
                f"plan: {'; '.join(plan.labels)}",
                run_all,
                event=event,
            )
            remaining = self._accountant.remaining
        relation = neighbouring(self._privacy_unit, self._k, self._max_groups)
        return [replace(r, privacy=r.privacy.paid(remaining, relation)) for r in results]

    # -- internals ------------------------------------------------------------------------

    def _load_schema(
        self, schema: Schema | Mapping[str, Any] | str | PathLike[str] | None
    ) -> Schema:
        if schema is None:
            out = Schema()
        elif isinstance(schema, Schema):
            out = schema
        elif isinstance(schema, Mapping):
            out = Schema.from_dict(schema)
        elif isinstance(schema, str | PathLike):
            out = Schema.load(schema)
        else:
            raise InvalidParameterError(
                "schema must be a Schema, a mapping or a path to a schema file."
            )
        for name in out.columns:
            self._check_column(name, "the schema")
        return out

    def checked_filter(self, where: Any) -> tuple[Condition, ...]:
        """The conditions of a ``where=`` filter, checked against the declared schema.

        Public metadata only (nothing is read or charged): what a release that
        reads the table outside :meth:`answer` (a boosted model fitted on the
        session) uses to filter its rows as queries do.
        """
        return check_where(self._context, where)

    def _check_column(self, name: object, where: str = "the query") -> str:
        if not isinstance(name, str) or name not in self._kinds:
            raise InvalidParameterError(
                f"unknown column {name!r} in {where}; the table's columns are {sorted(self._kinds)}."
            )
        return name

    @staticmethod
    def _make_rng(rng: object) -> Any:
        """``None`` (secure), or one seeded source for the whole session (one PrivacyWarning)."""
        if rng is None:
            return None
        from dpkit.mechanisms import as_source

        return as_source(rng)


def _new_accountant(
    budget: Budget, ledger: str | PathLike[str] | None, dataset: str | None, composition: str
) -> Any:
    """A session's own accountant; its ledger records (and checks) the dataset's identity."""
    from dpkit.accounting import Accountant

    return Accountant(budget, ledger=ledger, dataset=dataset, composition=composition)  # type: ignore[arg-type]


def _check_rule(name: str) -> str:
    """A composition rule's name for ``accountant=``; pld/tightest are warned (not adaptive-valid)."""
    from dpkit.accounting.composition import COMPOSITION_RULES

    if name not in COMPOSITION_RULES:
        raise InvalidParameterError(
            f"accountant must be an Accountant or the name of a composition rule "
            f"({', '.join(map(repr, COMPOSITION_RULES))}); got {name!r}."
        )
    if name in ("pld", "tightest"):
        warnings.warn(
            f"accountant={name!r} is valid only for a sequence of queries fixed before the first "
            "answer (a script): its theorems do not cover queries chosen after seeing earlier "
            "answers. For an interactive session use accountant='rdp' (a privacy filter).",
            PrivacyWarning,
            stacklevel=4,
        )
    return name


#: The largest ``max_groups`` accepted (a bound, not a count: any realistic one is far below).
_MAX_GROUPS = 2**31


def _check_max_groups(max_groups: object, privacy_unit: str | None) -> int | None:
    """``max_groups`` as an int in [1, 2**31], or ``None``; it needs a privacy unit."""
    if max_groups is None:
        return None
    if (
        not isinstance(max_groups, int | np.integer)
        or isinstance(max_groups, bool)
        or not 1 <= max_groups <= _MAX_GROUPS
    ):
        raise InvalidParameterError(
            "max_groups must be None or an integer from 1 to 2**31 (the most groups one person "
            "may add rows to in a grouped query)."
        )
    if privacy_unit is None:
        raise InvalidParameterError(
            "max_groups needs privacy_unit=<person id column>: it bounds the groups of each "
            "person, and without a privacy unit each row is its own person (one group)."
        )
    return int(max_groups)
