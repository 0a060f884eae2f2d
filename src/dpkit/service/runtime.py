"""The service without HTTP: datasets, grants and one query path, each charge durable first.

:class:`Runtime` owns one :class:`~dpkit.Session` per dataset (the table and
its declared schema), its synthetic twin, and the :class:`~dpkit.service.store.Store`
(analysts, grants, the per-grant ledger, answers, audit log). A query from an
analyst goes through the session's own four steps — validate against the
public schema, cost, charge, execute — with the analyst's grant as the payer
(:meth:`dpkit.Session.answer` with ``accountant=`` and the grant's ``noise=``). So:

* a query that does not fit the schema or the grant is refused before
  anything is charged or read;
* the charge is one committed database transaction (SQLite ``BEGIN
  IMMEDIATE`` or a PostgreSQL row lock on the grant) *before* the release is
  computed; the answer is stored after, and only then sent. A crash between
  the two loses no charge and costs the analyst that charge (the answer was
  never sent); a retry with the same ``Idempotency-Key`` is never charged
  twice and never computes a second answer for one charge;
* a retry of an answered request (same key) returns the stored answer:
  post-processing, free, marked ``replayed``. A new request for the same
  query is a new release and is charged again (see docs/service.md for why);
* a failure after the charge is one generic error for every dataset, and the
  charge stands.

Neighbouring relation: the dataset's (add or remove one row, or one person's
rows with a privacy unit); each analyst's answers on a dataset are
(ε, δ)-DP with (ε, δ) their grant, by sequential composition of the charges
the ledger records. Analysts who pool their answers compose: the data owner's
total exposure on a dataset is the sum of its grants (``/api/v1/admin``
shows them; the attack model discusses it) and of its publications: a
dataset's DP synthetic table, made once at start-up and paid from its
publication ledger (:mod:`dpkit.service.synthetic`), then served to every
analyst for free (post-processing).
"""

from __future__ import annotations

import contextvars
import hashlib
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from dpkit.accounting import Accountant, Budget
from dpkit.errors import DPKitError, InvalidParameterError, PrivacyWarning, ReleaseFailedError
from dpkit.service.config import (
    ConfigError,
    DatasetConfig,
    ServiceConfig,
    dataset_cap,
    publication_cap,
)
from dpkit.service.encoding import budget_json, jsonable, release_json, unjson
from dpkit.service.store import REQUEST_KEY, Analyst, DuplicateRequestError, Publication, Store
from dpkit.service.synthetic import publish, served
from dpkit.service.twin import synthetic_twin
from dpkit.tables import Session
from dpkit.tables.kinds import expected_error
from dpkit.tables.sources import UndeclaredTypesError
from dpkit.tables.specs import QuerySpec
from dpkit.tables.work import Cancellation

__all__ = ["Busy", "NotFound", "Pending", "Runtime", "open_dataset"]

# The placeholder budget of each dataset's session: every real query pays from a grant.
_NOBODY = Budget(1e-9)
_GRANT_TTL = 1.0  # seconds a grant read from the store is reused
_KEY_TTL = 1.0  # seconds a successful key check is reused
#: The most ``answers_left`` a dry run counts (it says "at least this many" beyond).
MAX_ANSWERS_LEFT = 100_000
# Twin answers pay from a throwaway budget: the twin holds no personal data.
_UNMETERED = Budget(1e9, 0.5)


class Pending(DPKitError):
    """A retried request whose charged answer is not stored (yet)."""


class Busy(DPKitError):
    """Every worker is busy and the waiting line is full: retry later (nothing was run)."""


class NotFound(InvalidParameterError):
    """No such dataset for this analyst (the same answer whether others may use it or not)."""


@dataclass(frozen=True)
class Answer:
    """What the HTTP layer sends: the JSON body and whether the budget paid for it."""

    body: dict[str, Any]
    charged: bool


def open_dataset(dc: DatasetConfig, *, seed: int | None = None, level: float = 0.95) -> Session:
    """A session over one configured dataset (nothing is read but its header and column types)."""
    options: dict[str, Any] = {
        "accountant": Accountant(_NOBODY),
        "schema": dc.schema,
        "dataset": dc.name,
        "level": level,
        "rng": seed,
    }
    if dc.privacy_unit is not None:
        options.update(privacy_unit=dc.privacy_unit, max_contributions=dc.max_contributions)
    # Column types come from the config's declaration only (``types``, every column): each
    # constructor reads its source through a per-value conversion to them, so the published
    # schema and the twin are functions of the config, never of the rows.
    options["types"] = dict(dc.types)
    if dc.format == "csv":
        return Session.from_csv(dc.source, materialize=dc.materialize, **options)
    if dc.format == "parquet":
        return Session.from_parquet(dc.source, **options)
    if dc.format == "duckdb":
        import duckdb

        con = duckdb.connect(dc.source, read_only=True)
        return Session.from_duckdb(str(dc.table), connection=con, **options)
    if dc.format in ("sqlite", "postgres"):
        return Session.from_sql(dc.source, str(dc.table), kind=dc.format, **options)
    if dc.format == "spark":
        from pyspark.sql import SparkSession

        spark = SparkSession.builder.master("local[2]").appName("dpkit-service").getOrCreate()
        reader = spark.read.option("header", True)  # every CSV cell is text until try_cast
        frame = reader.csv(dc.source) if dc.source.endswith(".csv") else reader.parquet(dc.source)
        return Session.from_spark(frame, **options)
    raise ConfigError(f"unknown dataset format {dc.format!r}.")  # config checks it first


class Runtime:
    """The datasets, the store and the query path of one service process."""

    def __init__(self, config: ServiceConfig, *, store: Store | None = None) -> None:
        self.config = config
        self.store = store or Store(config.store)
        self.store.create()
        if config.seed is not None:
            warnings.warn(
                "the service runs with a fixed noise seed: its answers are reproducible and "
                "NOT private. Use seed only in tests.",
                PrivacyWarning,
                stacklevel=2,
            )
        _load_release_code()
        self.sessions: dict[str, Session] = {}
        self.twins: dict[str, Session] = {}
        for name, dc in config.datasets.items():
            self.sessions[name] = self._open(dc)
        # Each declared synthetic table: reused from the store, or made now (charged once,
        # ever, to the dataset's publication ledger; never to an analyst).
        self.publications: dict[str, Publication] = {}
        for name, dc in config.datasets.items():
            if dc.synthetic is not None:
                self.publications[name] = publish(self.sessions[name], self.store, dc, dc.synthetic)
        for name, dc in config.datasets.items():
            self.twins[name] = self._twin(dc, self.sessions[name])
        for name, dc in config.datasets.items():
            # The same public limits for a dataset and its twin: a query the twin answers
            # is one the dataset answers, and the refusal is the same for both.
            for session in (self.sessions[name], self.twins[name]):
                session.limit_work(
                    max_work=config.limits.max_work_seconds * 1e6,
                    max_answer_bytes=config.limits.max_answer_bytes,
                    rows=dc.rows,
                )
        # All blocking work (queries, store calls) runs on these threads, at most
        # ``workers`` at a time with ``max_waiting`` more queued; beyond that, Busy at once.
        workers = config.limits.workers
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="dpkit")
        self._admitted = threading.BoundedSemaphore(workers + config.limits.max_waiting)
        self._sync_config()
        # (analyst, dataset) -> (grant, its accountant, its noise, when read)
        self._accountants: dict[tuple[str, str], tuple[Budget, Accountant, str, float]] = {}
        self._keys: dict[bytes, tuple[Analyst, float]] = {}
        self._lock = threading.Lock()

    # -- workers ---------------------------------------------------------------------

    def submit(self, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Future[Any]:
        """Run ``func`` on the bounded worker pool (with the caller's context variables).

        Raises :class:`Busy` at once, running nothing, when ``workers`` calls run
        and ``max_waiting`` more wait: the number of threads and queued requests
        is bounded whatever the clients send.
        """
        if not self._admitted.acquire(blocking=False):
            raise Busy(
                "the service is busy (every worker is running a query and the waiting line is "
                "full); retry in a few seconds."
            )
        try:
            future = self._executor.submit(contextvars.copy_context().run, func, *args, **kwargs)
        except BaseException:
            self._admitted.release()
            raise
        future.add_done_callback(lambda _: self._admitted.release())
        return future

    def close(self) -> None:
        """Stop taking work; running calls finish on their own (their results are dropped)."""
        self._executor.shutdown(wait=False, cancel_futures=True)

    # -- start-up --------------------------------------------------------------------

    def _open(self, dc: DatasetConfig) -> Session:
        where = f"dataset {dc.name!r}" + (f" (line {dc.line})" if dc.line else "")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", PrivacyWarning)  # the seed warning is given once
                return open_dataset(dc, seed=self.config.seed, level=self.config.level)
        except ConfigError:
            raise
        except UndeclaredTypesError as err:  # the config's words, not the library's
            example = ", ".join(f'{c} = "..."' for c in err.columns[:3])
            raise ConfigError(
                f"{where}: columns {err.columns} have no declared type; declare every column "
                f"in [datasets.{dc.name}] types = {{ {example} }} with DuckDB type names "
                "(column types are public metadata: the service never takes them from the data)."
            ) from None
        except Exception as err:  # start-up only: the data owner's own config, not an analyst
            raise ConfigError(f"{where}: cannot open it: {err}") from None

    def _twin(self, dc: DatasetConfig, real: Session) -> Session:
        # A published DP synthetic table, when there is one, stands in for the columns it
        # has (post-processing of its release); the others come from the public schema.
        published = self.publications.get(dc.name)
        result = None if published is None else published.result
        frame = synthetic_twin(
            real.engine.column_types(),
            real.schema,
            rows=self.config.twin_rows if result is None else len(result["data"]),
            seed=0,
            privacy_unit=dc.privacy_unit,
        )
        if result is not None:
            for i, column in enumerate(result["columns"]):
                frame[column] = [unjson(values[i]) for values in result["data"]]
        options: dict[str, Any] = {}
        if dc.privacy_unit is not None:
            options.update(privacy_unit=dc.privacy_unit, max_contributions=dc.max_contributions)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PrivacyWarning)
            return Session.from_pandas(
                frame,
                types=dict(dc.types),
                accountant=Accountant(_NOBODY),
                schema=real.schema,
                dataset=f"{dc.name} (synthetic twin)",
                level=self.config.level,
                rng=self.config.seed,
                **options,
            )

    def _sync_config(self) -> None:
        """Analysts and grants of the file become rows of the store (grants only grow)."""
        for name, key_hash in self.config.analysts.items():
            self.store.ensure_analyst(name, key_hash)
        for g in self.config.grants:
            terms = self.store.grant_terms(g.analyst, g.dataset)
            if terms is not None and terms.composition != g.accountant:
                rule = terms.composition
                raise ConfigError(
                    f"{self.config.path or 'the configuration'}: the [[grants]] of "
                    f"{g.analyst!r} on {g.dataset!r} says accountant = {g.accountant!r}, but this "
                    f"grant was created with accountant = {rule!r} and keeps it (its charges "
                    f"were admitted by that rule). Set accountant = {rule!r} for it."
                )
            # The noise may change from one start to the next (the file's is set): it is
            # public, and each charge already in the ledger states the noise it paid for.
            self.store.add_grant(
                g.analyst,
                g.dataset,
                g.epsilon,
                g.delta,
                actor="config",
                at_least=True,
                cap=dataset_cap(self.config.datasets[g.dataset]),
                composition=g.accountant,
                noise=g.noise,
            )

    # -- keys ------------------------------------------------------------------------

    def authenticate(self, key: str) -> Analyst | None:
        """The active analyst holding ``key`` (a store read at most once a second per key).

        A rotated or revoked key stops working at once in this process (the admin
        routes call :meth:`forget_keys`) and within ``_KEY_TTL`` seconds in the others.
        """
        digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()
        now = time.monotonic()
        with self._lock:
            cached = self._keys.get(digest)
        if cached is not None and now - cached[1] < _KEY_TTL:
            return cached[0]
        who = self.store.authenticate(key)
        if who is not None:
            with self._lock:
                if len(self._keys) > 10_000:
                    self._keys.clear()
                self._keys[digest] = (who, now)
        return who

    def forget_keys(self) -> None:
        with self._lock:
            self._keys.clear()

    # -- budgets ---------------------------------------------------------------------

    def accountant(self, analyst: str, dataset: str) -> Accountant:
        """The accountant of an analyst's grant on a dataset (404 without a grant)."""
        return self.payer(analyst, dataset)[0]

    def payer(self, analyst: str, dataset: str) -> tuple[Accountant, str]:
        """The accountant of an analyst's grant on a dataset and the grant's noise (404 without).

        Both are public: the grant's rule, budget and ledger, and the noise the
        data owner set for it (``laplace``, ``gaussian`` or ``auto``), which
        the session turns into each step's noise before the charge
        (:mod:`dpkit.tables.noise`).
        """
        if dataset not in self.sessions:
            raise NotFound(_not_found(dataset))
        key = (analyst, dataset)
        now = time.monotonic()
        with self._lock:
            cached = self._accountants.get(key)
        # Grants only grow (and are never withdrawn), so a grant read up to a second ago is
        # safe to pay against: at worst a query is refused that a fresh read would admit.
        if cached is not None and now - cached[3] < _GRANT_TTL:
            return cached[1], cached[2]
        terms = self.store.grant_terms(analyst, dataset)
        if terms is None:
            raise NotFound(_not_found(dataset))
        grant, rule, noise = terms
        with self._lock:
            if cached is not None and cached[0] == grant:
                self._accountants[key] = (grant, cached[1], noise, now)
                return cached[1], noise
            # A grant that grew gets a new accountant over the same ledger rows; its
            # composition rule is the grant's, fixed when the grant was created.
            acct = Accountant(
                grant,
                ledger=self.store.ledger(analyst, dataset),
                dataset=dataset,
                composition=rule,  # type: ignore[arg-type]
            )
            self._accountants[key] = (grant, acct, noise, now)
            return acct, noise

    def add_grant(
        self,
        analyst: str,
        dataset: str,
        epsilon: float,
        delta: float,
        actor: str,
        composition: str | None = None,
        noise: str | None = None,
    ) -> Budget:
        """Add to a grant (admin); this process sees the new total (and noise) at once.

        ``composition``: the grant's accountant rule when it is created (basic,
        zcdp or rdp; default basic); naming another rule for an existing grant
        is a :class:`~dpkit.service.store.ConflictError`. ``noise``: the noise
        of the grant's queries (laplace by default; gaussian needs zcdp or
        rdp); naming it for an existing grant sets it.
        """
        cap = (
            dataset_cap(self.config.datasets[dataset]) if dataset in self.config.datasets else None
        )
        total = self.store.add_grant(
            analyst,
            dataset,
            epsilon,
            delta,
            actor=actor,
            cap=cap,
            composition=composition,
            noise=noise,
        )
        with self._lock:
            self._accountants.pop((analyst, dataset), None)
        return total

    def exposure(self) -> list[dict[str, Any]]:
        """Per dataset: the sum of all grants (what pooled analysts could learn) and its cap,
        and what its publications (synthetic tables) spent of their cap."""
        out = []
        for name, dc in self.config.datasets.items():
            cap = dataset_cap(dc)
            published = publication_cap(dc)
            out.append(
                {
                    "name": name,
                    "granted": budget_json(self.store.granted(name)),
                    "cap": None if cap is None else budget_json(cap),
                    "publications": None
                    if published is None
                    else {
                        "spent": budget_json(self._publication_payer(name, published).spent),
                        "cap": budget_json(published),
                        "accountant": "zcdp",
                    },
                }
            )
        return out

    def _publication_payer(self, dataset: str, cap: Budget) -> Accountant:
        ledger = self.store.publication_ledger(dataset)  # for reading
        return Accountant(cap, ledger=ledger, composition="zcdp")

    def budget(self, analyst: str, dataset: str) -> dict[str, Any]:
        acct, noise = self.payer(analyst, dataset)
        return {
            **budget_json(acct.budget),
            "spent": budget_json(acct.spent),
            "remaining": budget_json(acct.remaining),
            "accountant": acct.composition,
            "noise": noise,
        }

    def datasets_for(self, analyst: str) -> list[str]:
        return [d for d in self.store.grants(analyst) if d in self.sessions]

    def describe(self, analyst: str, dataset: str) -> dict[str, Any]:
        """A dataset's public metadata and the analyst's budget on it."""
        budget = self.budget(analyst, dataset)  # NotFound first
        session = self.sessions[dataset]
        dc = self.config.datasets[dataset]
        types = session.engine.column_types()
        columns = {}
        for column, type_name in types.items():
            col = session.schema.columns.get(column)
            columns[column] = {
                "type": type_name,
                "bounds": None if col is None else jsonable(col.bounds),
                "domain": None if col is None else jsonable(col.domain),
                "nulls": "drop" if col is None else col.nulls,
            }
        return {
            "name": dataset,
            "description": dc.description,
            "columns": columns,
            "privacy_unit": dc.privacy_unit,
            "max_contributions": dc.max_contributions,
            "budget": budget,
            # the published DP synthetic table, if any (GET .../synthetic; public config)
            "synthetic": None
            if dc.synthetic is None
            else {
                "name": dc.synthetic.name,
                "method": dc.synthetic.method,
                "rows": dc.synthetic.rows,
            },
        }

    # -- queries ---------------------------------------------------------------------

    def dry_run(self, analyst: str, dataset: str, query: Mapping[str, Any]) -> dict[str, Any]:
        """A query's cost and whether the grant can pay it now: no data read, nothing charged.

        ``answers_left``: how many more copies of this query, asked one after
        another, the grant's accountant admits now (at most
        :data:`MAX_ANSWERS_LEFT`; :meth:`~dpkit.accounting.Accountant.affordable`).
        It reads the grant's public ledger and the query's public cost and
        event only, never the data, so it is the same on neighbouring datasets.
        The query is costed with the grant's noise and rule, as its answer
        would be charged (a Gaussian step's charge is its zCDP cost).
        """
        acct, noise = self.payer(analyst, dataset)
        planned = self.sessions[dataset].prepare(
            QuerySpec.from_dict(query), accountant=acct, noise=noise
        )
        # what the charge will be, with its event (Session.afford counts the same way)
        left = acct.affordable(planned.charge, planned.event, limit=MAX_ANSWERS_LEFT)
        return {
            "dataset": dataset,
            "label": planned.label,
            "epsilon": float(planned.epsilon),
            "delta": float(planned.delta),
            "affordable": left > 0,
            "answers_left": left,
            "accountant": acct.composition,
            "noise": noise,
            "remaining": budget_json(acct.remaining),
            # the release's error bar: public parameters only, so it may be said before spending
            "expected_error": expected_error(planned.query).to_dict(),
        }

    def twin_rows(self, analyst: str, dataset: str, rows: int) -> list[dict[str, Any]]:
        self.accountant(analyst, dataset)  # the same 404 as every other endpoint
        frame = synthetic_twin(
            self.sessions[dataset].engine.column_types(),
            self.sessions[dataset].schema,
            rows=rows,
            seed=0,
            privacy_unit=self.config.datasets[dataset].privacy_unit,
        )
        return [
            {str(k): jsonable(v) for k, v in record.items()}
            for record in frame.astype(object).where(frame.notna(), None).to_dict("records")
        ]

    def synthetic(self, analyst: str, dataset: str, offset: int, limit: int) -> dict[str, Any]:
        """Rows of the dataset's published synthetic table with its guarantee and report.

        Free: no grant is charged or read but to check that the analyst holds
        one (the same 404 as every other endpoint). The table is one DP release
        already paid by the dataset's publication ledger; serving it is
        post-processing.
        """
        self.accountant(analyst, dataset)  # the same 404 as every other endpoint
        stored = self.publications.get(dataset)
        dc = self.config.datasets[dataset]
        if stored is not None and stored.status == "charged" and dc.synthetic is not None:
            # made by another process after this one started? (a store read, public state)
            stored = self.store.publication(dataset, dc.synthetic.name) or stored
            self.publications[dataset] = stored
        name = "" if dc.synthetic is None else dc.synthetic.name
        return served(dataset, name, stored, offset, limit)

    def query(
        self,
        analyst: str,
        dataset: str,
        query: Mapping[str, Any],
        *,
        twin: bool = False,
        request_key: str | None = None,
        cancellation: Cancellation | None = None,
    ) -> Answer:
        """Answer one query for an analyst; see the module docstring for the order of steps.

        The query's work and answer size are checked against the configured limits
        from its public parameters before the charge (the session's ``prepare``),
        for twin queries too. ``cancellation`` stops it when its time is up: its
        engine call is interrupted, the charge stands and the request is recorded
        as ``timeout`` (a retry with the same key gets the generic failure).
        """
        acct, noise = self.payer(analyst, dataset)
        spec = QuerySpec.from_dict(query)
        if twin:
            result = self.twins[dataset].answer(
                spec, accountant=_unmetered(acct), cancellation=cancellation, noise=noise
            )
            body = self._body(dataset, result, acct.remaining, twin=True, request_key=None)
            return Answer(body, charged=False)
        key = request_key or uuid.uuid4().hex
        token = REQUEST_KEY.set(key)
        try:
            # validate, cost, charge (committed; refused first if this key was charged
            # already), execute — the session's four steps, paid from the grant
            result = self.sessions[dataset].answer(
                spec, accountant=acct, cancellation=cancellation, noise=noise
            )
        except DuplicateRequestError:
            return self._replay(analyst, dataset, spec, key, acct)
        except ReleaseFailedError:
            if cancellation is not None and cancellation.cancelled:
                # stopped at its time limit: the 504 was sent; the history says so
                self.record_failure(analyst, dataset, query, key, "timeout")
            raise
        finally:
            REQUEST_KEY.reset(token)
        charged = True
        # the session read what is left after this charge
        body = self._body(dataset, result, result.remaining, twin=False, request_key=key)
        body["charged"] = charged
        self.store.save_answer(
            analyst,
            key,
            dataset=dataset,
            query=spec.to_dict(),
            status="answered",
            response=body,
            epsilon=result.epsilon,
            delta=result.delta,
        )
        return Answer(body, charged=charged)

    def _replay(
        self, analyst: str, dataset: str, spec: QuerySpec, key: str, acct: Accountant
    ) -> Answer:
        """A request whose key was charged already: its stored answer, free; never a new one."""
        stored = self.store.find_answer(analyst, key)
        if stored is None:
            # Charged, no answer stored: still running, or the process died between charge
            # and answer (then the answer was never sent and the charge stands). Computing
            # it again could release twice for one charge.
            raise Pending(
                "this request was charged and its answer is not stored yet: it is still "
                "running, or the service stopped while answering it (then the answer was never "
                "sent and the charge stands). Retry with the same Idempotency-Key shortly."
            )
        if stored.get("query") != spec.to_dict() or stored.get("dataset") != dataset:
            raise InvalidParameterError(_key_reused())
        if stored["status"] != "answered" or stored["response"] is None:
            raise ReleaseFailedError(_FAILED)
        body = dict(stored["response"])
        body.update(replayed=True, charged=False, remaining=budget_json(acct.remaining))
        return Answer(body, charged=False)

    def record_failure(
        self, analyst: str, dataset: str, query: Mapping[str, Any], request_key: str, status: str
    ) -> None:
        """Note a charged query that failed or timed out in the analyst's history."""
        try:
            spec = QuerySpec.from_dict(query).to_dict()
        except InvalidParameterError:
            spec = {}
        self.store.save_answer(
            analyst,
            request_key,
            dataset=dataset,
            query=spec,
            status=status,
            response=None,
            epsilon=0.0,
            delta=0.0,
        )

    def _body(
        self, dataset: str, result: Any, remaining: Budget, *, twin: bool, request_key: str | None
    ) -> dict[str, Any]:
        return {
            "query_id": request_key,
            "dataset": dataset,
            "twin": twin,
            "charged": not twin,
            "replayed": False,
            "release": release_json(result),
            "remaining": budget_json(remaining),
        }


_FAILED = (
    "the release failed after its budget was charged; the charge stands. This message is the "
    "same whatever the data."
)


def _unmetered(grant: Accountant) -> Accountant:
    """A throwaway payer for a twin answer, with the grant's rule (and δ: its Gaussian steps'
    charges are stated at it), so the twin answers with the noise the grant's answers get."""
    if grant.composition == "basic":
        return Accountant(_UNMETERED)
    budget = Budget(_UNMETERED.epsilon_exact, grant.budget.delta_exact)
    return Accountant(budget, composition=grant.composition)  # type: ignore[arg-type]


def _not_found(dataset: str) -> str:  # the name is not echoed: same body for every name
    return (
        "no dataset of that name is available to this key; GET /api/v1/datasets lists the "
        "datasets you hold a grant on."
    )


def _key_reused() -> str:
    return (
        "this Idempotency-Key was used for another query; a key names one request: send a "
        "new key for a new query."
    )


def _load_release_code() -> None:
    """Import every publisher and mechanism module once, at start-up.

    ``import dpkit`` is lazy; a server must not pay for numba, SciPy and the
    publishers' compilation inside the first queries' time limits (a time-out
    would then depend on which query came first, not on the query).
    """
    import dpkit.mechanisms
    from dpkit.histograms.methods import PUBLISHERS_1D, PUBLISHERS_2D

    for entry in (*PUBLISHERS_1D.values(), *PUBLISHERS_2D.values()):
        entry.publish  # noqa: B018 - imports the publisher's module
    dpkit.mechanisms.Laplace  # noqa: B018 - loads the mechanisms' lazy exports
