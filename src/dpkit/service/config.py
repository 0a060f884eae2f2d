"""The service's configuration file: datasets, analysts, grants and limits, checked at start-up.

A TOML file (``dpkit serve --config service.toml``); a complete, commented
example is ``examples/service.toml``. Paths are relative to the file. Every
error stops start-up with :class:`ConfigError`, whose message names the line
of the file and what to fix::

    [service]
    store = "service.db"                 # SQLite file, or a SQLAlchemy URL (postgresql+psycopg://...)
    admin_key_hash = "Ab3dE5gH:9f86..."  # from `dpkit admin hash-key`

    [datasets.patients]
    source = "patients.csv"
    types = { age = "DOUBLE", district = "VARCHAR" }
    schema = "patients.schema.toml"      # or inline: [datasets.patients.columns.age] bounds = [0, 120]

    [analysts.alice]                     # keys can also be issued later by the admin API

    [[grants]]
    analyst = "alice"
    dataset = "patients"
    epsilon = 1.0
    delta = 1e-6
    accountant = "rdp"                   # basic (default) | zcdp | rdp: how charges add up
    noise = "auto"                       # laplace (default) | gaussian | auto (zcdp/rdp grants)

Nothing in the file is read from data: column types, bounds and domains are
what the data owner declares public (see :mod:`dpkit.tables.schema`).
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dpkit.accounting import Budget
from dpkit.errors import DPKitError, InvalidParameterError
from dpkit.tables.noise import GAUSSIAN_RULES, NOISES
from dpkit.tables.schema import Schema

__all__ = [
    "FORMATS",
    "ConfigError",
    "DatasetConfig",
    "GrantConfig",
    "Limits",
    "ServiceConfig",
    "SyntheticConfig",
    "dataset_cap",
    "load_config",
    "parse_config",
    "publication_cap",
]

FORMATS = ("csv", "parquet", "duckdb", "sqlite", "postgres", "spark")
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_SERVICE_KEYS = {
    "store",
    "admin_key_hash",
    "host",
    "port",
    "requests_per_minute",
    "max_request_bytes",
    "query_timeout_seconds",
    "min_response_seconds",
    "max_work_seconds",
    "max_answer_bytes",
    "workers",
    "max_waiting",
    "twin_rows",
    "level",
    "seed",
}
_DATASET_KEYS = {
    "description",
    "source",
    "format",
    "table",
    "types",
    "schema",
    "columns",
    "privacy_unit",
    "max_contributions",
    "materialize",
    "max_epsilon",
    "max_delta",
    "rows",
    "synthetic",
    "publication_epsilon",
    "publication_delta",
}
_SYNTHETIC_KEYS = {
    "name",
    "method",
    "rows",
    "epsilon",
    "delta",
    "rho",
    "columns",
    "bins",
    "workload",
}
#: The most rows of a synthetic table the service publishes (it is stored and served whole).
MAX_SYNTHETIC_ROWS = 100_000


class ConfigError(DPKitError):
    """The service's configuration file is wrong; the message says where and how to fix it."""


@dataclass(frozen=True)
class Limits:
    """Per-request limits. ``min_response_seconds`` pads every query's response time to a floor
    (a timing side channel defence, see docs/service-attack-model.md)."""

    requests_per_minute: int = 600
    max_request_bytes: int = 64 * 1024
    query_timeout_seconds: float = 60.0
    min_response_seconds: float = 0.0
    #: the most work one query may take, in estimated seconds of one core (from its public
    #: parameters, before the charge; :mod:`dpkit.tables.work`)
    max_work_seconds: float = 20.0
    #: the largest answer one query may have (estimated from its public parameters)
    max_answer_bytes: int = 8 * 2**20
    #: threads that run queries and store calls (all blocking work); more waiting than
    #: ``max_waiting`` requests get 503 at once
    workers: int = 4
    max_waiting: int = 256


@dataclass(frozen=True)
class SyntheticConfig:
    """The DP synthetic table a dataset publishes (``[datasets.NAME.synthetic]``), all public.

    Made once with :meth:`dpkit.Session.synthesize` (``method``, ``rows``,
    ``epsilon`` and ``delta`` or ``rho``, ``columns``, ``bins``, ``workload``),
    charged to the dataset's publication ledger, stored under ``name`` and
    served to analysts for free. Other parameters under the same ``name`` are
    refused at start-up: a new table needs a new ``name`` (and is charged again).
    """

    name: str = "synthetic"
    method: str = "mst"
    rows: int = 1000
    epsilon: float | None = None
    delta: float = 1e-9
    rho: float | None = None
    columns: tuple[str, ...] | None = None
    bins: int = 16
    workload: tuple[tuple[str, ...], ...] | None = None
    line: int | None = None

    def params(self) -> dict[str, Any]:
        """The parameters a stored table was made with (compared at each start)."""
        return {
            "method": self.method,
            "rows": self.rows,
            "epsilon": self.epsilon,
            "delta": self.delta,
            "rho": self.rho,
            "columns": None if self.columns is None else list(self.columns),
            "bins": self.bins,
            "workload": None if self.workload is None else [list(w) for w in self.workload],
        }


@dataclass(frozen=True)
class DatasetConfig:
    """One table the service answers queries on, with its public metadata."""

    name: str
    source: str
    format: str
    types: Mapping[str, str] = field(default_factory=dict)
    schema: Schema = field(default_factory=Schema)
    table: str | None = None
    description: str = ""
    privacy_unit: str | None = None
    max_contributions: int = 1
    materialize: bool = True
    line: int | None = None  # where the dataset is declared, for start-up errors
    max_epsilon: float | None = None  # cap on the sum of all grants on this dataset
    max_delta: float | None = None
    rows: int | None = None  # the most rows the owner declares (public; sizes query work)
    synthetic: SyntheticConfig | None = None  # the DP synthetic table it publishes, if any
    publication_epsilon: float | None = None  # the cap of its publication ledger
    publication_delta: float | None = None


def publication_cap(dc: DatasetConfig) -> Budget | None:
    """The cap of a dataset's publication ledger (what its synthetic tables may spend), or None."""
    if dc.publication_epsilon is None:
        return None
    return Budget(dc.publication_epsilon, dc.publication_delta or 0.0)


def dataset_cap(dc: DatasetConfig) -> Budget | None:
    """The cap on the sum of all grants on a dataset, or None (no cap)."""
    if dc.max_epsilon is None:
        return None
    return Budget(dc.max_epsilon, dc.max_delta or 0.0)


@dataclass(frozen=True)
class GrantConfig:
    """A budget the data owner gives one analyst on one dataset (it only ever grows).

    ``accountant``: how the grant's charges add up, ``"basic"`` (default),
    ``"zcdp"`` or ``"rdp"`` — the rules valid when each query is chosen after
    seeing the earlier answers; fixed when the grant is first created.
    ``noise``: the noise of the grant's queries, ``"laplace"`` (default),
    ``"gaussian"`` or ``"auto"`` (:mod:`dpkit.tables.noise`; ``"gaussian"``
    needs ``zcdp`` or ``rdp``); a restart may change it.
    """

    analyst: str
    dataset: str
    epsilon: float
    delta: float = 0.0
    accountant: str = "basic"
    noise: str = "laplace"


@dataclass(frozen=True)
class ServiceConfig:
    """The whole service: where the state lives, who may do what, and on which tables."""

    store: str
    datasets: Mapping[str, DatasetConfig]
    analysts: Mapping[str, str | None] = field(default_factory=dict)  # name -> key hash
    grants: tuple[GrantConfig, ...] = ()
    admin_key_hash: str | None = None
    host: str = "127.0.0.1"
    port: int = 8000
    limits: Limits = field(default_factory=Limits)
    twin_rows: int = 1000
    level: float = 0.95
    seed: int | None = None  # tests only: fixes the noise (never for real answers)
    path: Path | None = None


def load_config(path: str | Path) -> ServiceConfig:
    """Read and check a service configuration file."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"there is no configuration file at {str(p)!r}.")
    return parse_config(p.read_text(encoding="utf-8"), base=p.parent, name=str(p))


def parse_config(text: str, *, base: Path, name: str = "the configuration") -> ServiceConfig:
    """Parse the TOML ``text``; relative paths are taken from ``base``."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{name} is not valid TOML: {err}.") from None
    where = _Locator(text, name)
    unknown = sorted(set(data) - {"service", "datasets", "analysts", "grants"})
    if unknown:
        raise where.error(
            unknown[0],
            None,
            f"unknown section {unknown[0]!r}; the sections are [service], [datasets.NAME], "
            "[analysts.NAME] and [[grants]]",
        )
    service = _table(data.get("service", {}), "service", where)
    bad = sorted(set(service) - _SERVICE_KEYS)
    if bad:
        raise where.error(
            "service", bad[0], f"unknown setting {bad[0]!r}; use one of {sorted(_SERVICE_KEYS)}"
        )
    datasets = {
        n: _dataset(n, _table(d, f"datasets.{n}", where), base, where)
        for n, d in _table(data.get("datasets", {}), "datasets", where).items()
    }
    if not datasets:
        raise where.error(None, None, "no datasets: add a [datasets.NAME] table")
    analysts: dict[str, str | None] = {}
    for n, a in _table(data.get("analysts", {}), "analysts", where).items():
        section = f"analysts.{n}"
        _check_name(n, section, where, "an analyst")
        a = _table(a, section, where)
        extra = sorted(set(a) - {"key_hash"})
        if extra:
            raise where.error(section, extra[0], "an analyst takes only key_hash")
        key_hash = a.get("key_hash")
        if key_hash is not None and not _is_key_hash(key_hash):
            raise where.error(
                section,
                "key_hash",
                "key_hash must be what `dpkit admin hash-key` prints (KEYID:SHA256HEX)",
            )
        analysts[n] = key_hash
    grants = _grants(data.get("grants", []), datasets, analysts, where)
    admin = service.get("admin_key_hash")
    if admin is not None and not _is_key_hash(admin):
        raise where.error(
            "service",
            "admin_key_hash",
            "admin_key_hash must be what `dpkit admin hash-key` prints (KEYID:SHA256HEX)",
        )
    limits = Limits(
        requests_per_minute=_int(service, "requests_per_minute", 600, 1, where),
        max_request_bytes=_int(service, "max_request_bytes", 64 * 1024, 1024, where),
        query_timeout_seconds=_number(service, "query_timeout_seconds", 60.0, where, low=0.1),
        min_response_seconds=_number(service, "min_response_seconds", 0.0, where, low=0.0),
        max_work_seconds=_number(service, "max_work_seconds", 20.0, where, low=0.001),
        max_answer_bytes=_int(service, "max_answer_bytes", 8 * 2**20, 4096, where),
        workers=_int(service, "workers", 4, 1, where),
        max_waiting=_int(service, "max_waiting", 256, 0, where),
    )
    seed = service.get("seed")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
        raise where.error("service", "seed", "seed must be an integer (and only for tests)")
    level = _number(service, "level", 0.95, where, low=0.5)
    if level >= 1:
        raise where.error("service", "level", "level must be below 1 (e.g. 0.95)")
    return ServiceConfig(
        store=_store(service.get("store", "service.db"), base, where),
        datasets=datasets,
        analysts=analysts,
        grants=grants,
        admin_key_hash=admin,
        host=_text(service, "host", "127.0.0.1", where),
        port=_int(service, "port", 8000, 0, where),
        limits=limits,
        twin_rows=_int(service, "twin_rows", 1000, 10, where),
        level=level,
        seed=seed,
        path=base,
    )


# ------------------------------------------------------------------------------- sections


def _dataset(name: str, d: Mapping[str, Any], base: Path, where: _Locator) -> DatasetConfig:
    section = f"datasets.{name}"
    _check_name(name, section, where, "a dataset")
    bad = sorted(set(d) - _DATASET_KEYS)
    if bad:
        raise where.error(
            section, bad[0], f"unknown setting {bad[0]!r}; use one of {sorted(_DATASET_KEYS)}"
        )
    if "source" not in d:
        raise where.error(section, None, "a dataset needs source = (a file path or URL)")
    source = _text(d, "source", "", where, section)
    fmt = d.get("format") or _format_of(source)
    if fmt not in FORMATS:
        raise where.error(
            section,
            "format" if "format" in d else "source",
            f"cannot tell the format; set format = one of {list(FORMATS)}",
        )
    if fmt in ("csv", "parquet", "duckdb", "sqlite") or (fmt == "spark" and "://" not in source):
        path = (base / source).resolve()
        if not path.exists() and not any(c in source for c in "*?["):
            raise where.error(section, "source", f"the file {str(path)!r} does not exist")
        source = str(path)
    table = d.get("table")
    if fmt in ("duckdb", "sqlite", "postgres") and not table:
        raise where.error(section, None, f"a {fmt} dataset needs table = (the table's name)")
    types = _table(d.get("types", {}), f"{section}.types", where)
    if not all(isinstance(v, str) for v in types.values()):
        raise where.error(section, "types", "types map column names to type names (text)")
    if "schema" in d and "columns" in d:
        raise where.error(section, "columns", "give schema = FILE or inline columns, not both")
    try:
        if "schema" in d:
            schema_path = base / _text(d, "schema", "", where, section)
            if not schema_path.is_file():
                raise where.error(
                    section, "schema", f"the schema file {str(schema_path)!r} does not exist"
                )
            schema = Schema.load(schema_path)
        else:
            schema = Schema.from_dict({"columns": d.get("columns", {})})
    except InvalidParameterError as err:
        raise where.error(section, "schema" if "schema" in d else "columns", str(err)) from None
    # Every column's type is declared (opening the source refuses undeclared ones too).
    unknown = sorted(set(schema.columns) - set(types))
    if unknown:
        raise where.error(
            section,
            "types",
            f"the schema describes column {unknown[0]!r}, which types does not declare; "
            "declare every column's type (types are public metadata)",
        )
    max_contributions = _int(d, "max_contributions", 1, 1, where, section)
    max_epsilon = (
        _number(d, "max_epsilon", None, where, section, low=0.0, strict=True)
        if "max_epsilon" in d
        else None
    )
    max_delta = _number(d, "max_delta", 0.0, where, section, low=0.0) if "max_delta" in d else None
    if max_delta is not None and max_epsilon is None:
        raise where.error(section, "max_delta", "max_delta goes with max_epsilon (the cap on ε)")
    synthetic = _synthetic(d, section, where)
    pub_epsilon, pub_delta = _publication(d, synthetic, section, where)
    return DatasetConfig(
        name=name,
        source=source,
        format=fmt,
        types=dict(types),
        schema=schema,
        table=table,
        description=_text(d, "description", "", where, section),
        privacy_unit=d.get("privacy_unit"),
        max_contributions=max_contributions,
        materialize=bool(d.get("materialize", True)),
        line=where.line(section, None),
        max_epsilon=max_epsilon,
        max_delta=max_delta,
        rows=_int(d, "rows", 1, 1, where, section) if "rows" in d else None,
        synthetic=synthetic,
        publication_epsilon=pub_epsilon,
        publication_delta=pub_delta,
    )


def _synthetic(d: Mapping[str, Any], dataset: str, where: _Locator) -> SyntheticConfig | None:
    """``[datasets.NAME.synthetic]``, checked (its columns against the schema at start-up)."""
    if "synthetic" not in d:
        return None
    section = f"{dataset}.synthetic"
    s = _table(d["synthetic"], section, where)
    bad = sorted(set(s) - _SYNTHETIC_KEYS)
    if bad:
        raise where.error(
            section, bad[0], f"unknown setting {bad[0]!r}; use one of {sorted(_SYNTHETIC_KEYS)}"
        )
    if d.get("privacy_unit") is not None:
        raise where.error(
            section,
            None,
            "a synthetic table is not made for a dataset with a privacy_unit yet (a person's "
            "several rows would move each marginal by more than 1); remove one of the two",
        )
    name = _text(s, "name", "synthetic", where, section)
    _check_name(name, section, where, "a synthetic table")
    method = s.get("method", "mst")
    if method not in ("mst", "aim"):
        raise where.error(section, "method", 'method must be "mst" (the default) or "aim"')
    if ("epsilon" in s) == ("rho" in s):
        raise where.error(
            section, None, "give exactly one of epsilon (with delta) or rho (zCDP) for the table"
        )
    if "delta" not in s:
        raise where.error(
            section, None, "give delta (e.g. 1e-9): the table's guarantee is stated as (ε, δ)"
        )
    delta = _number(s, "delta", None, where, section, low=0.0, strict=True)
    if delta >= 1:
        raise where.error(section, "delta", "delta must be below 1 (e.g. 1e-9)")
    rows = _int(s, "rows", 1000, 1, where, section)
    if rows > MAX_SYNTHETIC_ROWS:
        raise where.error(
            section,
            "rows",
            f"rows must be at most {MAX_SYNTHETIC_ROWS:,} (the table is served whole)",
        )
    columns = s.get("columns")
    if columns is not None and (
        not isinstance(columns, list) or not all(isinstance(c, str) for c in columns)
    ):
        raise where.error(section, "columns", "columns is a list of column names")
    workload = s.get("workload")
    if workload is not None:
        if method != "aim":
            raise where.error(section, "workload", 'a workload goes with method = "aim"')
        ok = isinstance(workload, list) and all(
            isinstance(w, list) and all(isinstance(c, str) for c in w) for w in workload
        )
        if not ok:
            raise where.error(
                section, "workload", 'workload is a list of column lists, e.g. [["age", "sex"]]'
            )
    epsilon, rho = (
        _number(s, key, None, where, section, low=0.0, strict=True) if key in s else None
        for key in ("epsilon", "rho")
    )
    return SyntheticConfig(
        name=name,
        method=str(method),
        rows=rows,
        epsilon=epsilon,
        delta=delta,
        rho=rho,
        columns=None if columns is None else tuple(columns),
        bins=_int(s, "bins", 16, 2, where, section),
        workload=None if workload is None else tuple(tuple(w) for w in workload),
        line=where.line(section, None),
    )


def _publication(
    d: Mapping[str, Any], synthetic: SyntheticConfig | None, section: str, where: _Locator
) -> tuple[float | None, float | None]:
    """The publication ledger's cap: needed, and only allowed, with a synthetic table."""
    if synthetic is None:
        extra = sorted({"publication_epsilon", "publication_delta"} & set(d))
        if extra:
            raise where.error(
                section,
                extra[0],
                f"{extra[0]} is the cap of [datasets.NAME.synthetic] tables; "
                "declare one, or remove it",
            )
        return None, None
    if "publication_epsilon" not in d or "publication_delta" not in d:
        raise where.error(
            section,
            None,
            "a dataset that publishes a synthetic table needs publication_epsilon and "
            "publication_delta: the data owner's budget for publications of this dataset (its "
            "synthetic tables are charged to it, once each)",
        )
    eps = _number(d, "publication_epsilon", None, where, section, low=0.0, strict=True)
    delta = _number(d, "publication_delta", None, where, section, low=0.0, strict=True)
    if delta >= 1:
        raise where.error(section, "publication_delta", "publication_delta must be below 1")
    return eps, delta


def _grants(
    raw: Any,
    datasets: Mapping[str, DatasetConfig],
    analysts: Mapping[str, str | None],
    where: _Locator,
) -> tuple[GrantConfig, ...]:
    if not isinstance(raw, list):
        raise where.error("grants", None, "write grants as [[grants]] tables")
    out = []
    seen = set()
    for i, g in enumerate(raw):
        section = f"grants#{i}"
        if not isinstance(g, Mapping):
            raise where.error(section, None, "each [[grants]] is a table")
        extra = sorted(set(g) - {"analyst", "dataset", "epsilon", "delta", "accountant", "noise"})
        if extra:
            raise where.error(
                section,
                extra[0],
                "a grant takes analyst, dataset, epsilon, delta, accountant and noise",
            )
        analyst, dataset = g.get("analyst"), g.get("dataset")
        if analyst not in analysts:
            raise where.error(
                section,
                "analyst",
                "this grant names an analyst with no [analysts.NAME] table; add one",
            )
        if dataset not in datasets:
            raise where.error(
                section,
                "dataset",
                f"this grant names an unknown dataset; the datasets are {sorted(datasets)}",
            )
        if (analyst, dataset) in seen:
            raise where.error(section, None, "a second grant for the same analyst and dataset")
        seen.add((analyst, dataset))
        eps = _number(g, "epsilon", None, where, section=section, low=0.0, strict=True)
        delta = _number(g, "delta", 0.0, where, section=section, low=0.0)
        if delta >= 1:
            raise where.error(section, "delta", "delta must be below 1 (e.g. 1e-6)")
        rule = _grant_accountant(g, delta, section, where)
        noise = _grant_noise(g, rule, section, where)
        out.append(GrantConfig(str(analyst), str(dataset), eps, delta, rule, noise))
        dc = datasets[str(dataset)]
        if dc.max_epsilon is not None:
            total_eps = sum(x.epsilon for x in out if x.dataset == dc.name)
            total_delta = sum(x.delta for x in out if x.dataset == dc.name)
            if total_eps > dc.max_epsilon or total_delta > (dc.max_delta or 0.0):
                raise where.error(
                    section,
                    None,
                    f"the grants on {dc.name!r} add up to more than its cap (max_epsilon = "
                    f"{dc.max_epsilon:g}, max_delta = {dc.max_delta or 0.0:g}); grant less or "
                    "raise the cap",
                )
    return tuple(out)


#: A grant's ``accountant``: the rules valid for adaptively chosen queries (the service is
#: interactive); ``pld`` and ``tightest`` are for scripts whose queries are fixed in advance.
GRANT_ACCOUNTANTS = ("basic", "zcdp", "rdp")


def _grant_accountant(g: Mapping[str, Any], delta: float, section: str, where: _Locator) -> str:
    """A grant's ``accountant``, checked (before the service starts)."""
    grant = f"the grant of {g.get('analyst')!r} on {g.get('dataset')!r}: "
    rule = g.get("accountant", "basic")
    if rule in ("pld", "tightest"):
        raise where.error(
            section,
            "accountant",
            f'{grant}accountant = "{rule}" is valid only for queries whose noise is fixed before the '
            "first answer (a script); an analyst chooses each query after seeing the earlier "
            'answers, so a grant takes "basic", "zcdp" or "rdp". Use accountant = "rdp", the '
            "tightest rule that stays valid for adaptively chosen queries",
        )
    if rule not in GRANT_ACCOUNTANTS:
        raise where.error(
            section,
            "accountant",
            f'{grant}accountant must be "basic" (the default), "zcdp" or "rdp"',
        )
    if rule != "basic" and delta <= 0:
        raise where.error(
            section,
            "delta",
            f'{grant}accountant = "{rule}" needs a grant with delta > 0 (zCDP and Renyi DP convert to '
            "(epsilon, delta)-DP only for delta > 0), e.g. delta = 1e-6",
        )
    return str(rule)


def _grant_noise(g: Mapping[str, Any], rule: str, section: str, where: _Locator) -> str:
    """A grant's ``noise``, checked with its ``accountant`` (before the service starts)."""
    grant = f"the grant of {g.get('analyst')!r} on {g.get('dataset')!r}: "
    noise = g.get("noise", "laplace")
    if noise not in NOISES:
        raise where.error(
            section,
            "noise",
            f'{grant}noise must be "laplace" (the default), "gaussian" or "auto"',
        )
    if noise == "gaussian" and rule not in GAUSSIAN_RULES:
        raise where.error(
            section,
            "noise",
            f'{grant}noise = "gaussian" needs accountant = "zcdp" or "rdp" (they compose '
            f'Gaussian noise tightly), not accountant = "{rule}", which would charge every '
            'Gaussian answer its full (epsilon, delta). Add accountant = "rdp" (and a delta > 0) '
            'to the grant, or use noise = "laplace" or "auto"',
        )
    return str(noise)


# ------------------------------------------------------------------------------- values


def _table(value: Any, section: str, where: _Locator) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise where.error(section, None, f"[{section}] must be a table")
    return dict(value)


def _check_name(name: str, section: str, where: _Locator, what: str) -> None:
    if not _NAME.fullmatch(name):
        raise where.error(
            section, None, f"{what}'s name may use 1-64 letters, digits, '_', '.' or '-'"
        )


def _is_key_hash(value: object) -> bool:
    return (
        isinstance(value, str) and re.fullmatch(r"[A-Za-z0-9_-]{8}:[0-9a-f]{64}", value) is not None
    )


def _format_of(source: str) -> str:
    lower = source.lower()
    for suffix, fmt in ((".csv", "csv"), (".parquet", "parquet"), (".duckdb", "duckdb")):
        if lower.endswith(suffix) or (fmt == "parquet" and lower.endswith(".pq")):
            return fmt
    if lower.endswith((".db", ".sqlite", ".sqlite3")):
        return "sqlite"
    if lower.startswith(("postgresql:", "postgres:")) or "dbname=" in lower:
        return "postgres"
    return ""


def _store(value: Any, base: Path, where: _Locator) -> str:
    if not isinstance(value, str) or not value:
        raise where.error("service", "store", "store is a SQLite file path or a SQLAlchemy URL")
    if "://" in value:
        return value
    path = (base / value).resolve()
    if not path.parent.is_dir():
        raise where.error("service", "store", f"the directory {str(path.parent)!r} does not exist")
    return f"sqlite:///{path}"


def _text(
    d: Mapping[str, Any], key: str, default: str, where: _Locator, section: str = "service"
) -> str:
    value = d.get(key, default)
    if not isinstance(value, str):
        raise where.error(section, key, f"{key} must be text")
    return value


def _int(
    d: Mapping[str, Any],
    key: str,
    default: int,
    low: int,
    where: _Locator,
    section: str = "service",
) -> int:
    value = d.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise where.error(section, key, f"{key} must be an integer >= {low}")
    return value


def _number(
    d: Mapping[str, Any],
    key: str,
    default: float | None,
    where: _Locator,
    section: str = "service",
    *,
    low: float,
    strict: bool = False,
) -> float:
    value = d.get(key, default)
    if value is None:
        raise where.error(section, None, f"{key} is missing")
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < low or (strict and value <= low):
        sign = ">" if strict else ">="
        raise where.error(section, key, f"{key} must be a finite number {sign} {low}")
    return float(value)


class _Locator:
    """Finds the line of a section or key in the TOML text, so errors can point at it."""

    def __init__(self, text: str, name: str) -> None:
        self.lines = text.splitlines()
        self.name = name

    def line(self, section: str | None, key: str | None) -> int | None:
        if section is None:
            return None
        target, index = section, 0
        if "#" in section:  # the i-th [[grants]] table
            target, _, i = section.partition("#")
            index = int(i)
        header = re.compile(r"\s*\[\[?\s*" + re.escape(target) + r"(\.[^\]]*)?\s*\]\]?\s*(#.*)?$")
        seen, start = -1, None
        for n, line in enumerate(self.lines):
            if header.match(line):
                seen += 1
                if seen == index:
                    start = n
                    break
        if start is None:
            return None
        if key is None:
            return start + 1
        key_line = re.compile(r"\s*" + re.escape(key) + r"\s*[=.]")
        for n in range(start + 1, len(self.lines)):
            if re.match(r"\s*\[", self.lines[n]) and not self.lines[n].lstrip().startswith(
                "[" + target
            ):
                break
            if key_line.match(self.lines[n]):
                return n + 1
        return start + 1

    def error(self, section: str | None, key: str | None, message: str) -> ConfigError:
        line = self.line(section, key)
        at = f"{self.name}, line {line}" if line else self.name
        return ConfigError(f"{at}: {message}.")
