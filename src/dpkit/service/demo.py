"""``dpkit serve --demo``: the service over the generated patients table, ready to query.

:func:`build_demo` writes, into one directory, the patients table of
``dpkit demo`` as CSV, its public schema, a service configuration and the
keys of an admin and two analysts (alice may spend ε = 1 on the table, bob
ε = 0.5). The keys file exists for the demo only: a real service shows each
key once and stores only its hash. Running it again on the same directory
keeps the store (spent budget stays spent) and the keys.
"""

from __future__ import annotations

import json
from pathlib import Path

from dpkit.demo import DISTRICTS, patients
from dpkit.service.config import ServiceConfig, load_config
from dpkit.service.store import hash_key, make_key

__all__ = ["SCHEMA", "build_demo"]

_CONFIG = """\
# The demo service: generated patients table, one admin, two analysts.
[service]
store = "service.db"
admin_key_hash = "{admin}"
requests_per_minute = 600
min_response_seconds = {floor}
{seed}
[datasets.patients]
description = "Synthetic patients (dpkit demo): age, weight, a sensitive condition, district."
source = "patients.csv"
types = {{ age = "DOUBLE", weight = "DOUBLE", condition = "BOOLEAN", district = "VARCHAR" }}
schema = "patients.schema.toml"

[analysts.alice]
key_hash = "{alice}"

[analysts.bob]
key_hash = "{bob}"

[[grants]]
analyst = "alice"
dataset = "patients"
epsilon = 1.0
delta = 1e-6

[[grants]]
analyst = "bob"
dataset = "patients"
epsilon = 0.5
"""

#: The demo table's public schema (TOML; ``{districts}`` is filled in).
SCHEMA = """\
[columns.age]
bounds = [0, 120]

[columns.weight]
bounds = [30, 200]

[columns.district]
domain = [{districts}]
"""


def build_demo(
    directory: str | Path,
    *,
    seed: int = 7,
    rows: int = 5000,
    noise_seed: int | None = None,
    min_response_seconds: float = 0.0,
) -> tuple[ServiceConfig, dict[str, str]]:
    """Write (or reuse) the demo service in ``directory``; its config and keys.

    ``noise_seed`` fixes the service's noise: tests only, never for real answers.
    """
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    keys_file = d / "keys.json"
    if keys_file.is_file():
        keys = json.loads(keys_file.read_text())
    else:
        keys = {who: make_key() for who in ("admin", "alice", "bob")}
        keys_file.write_text(json.dumps(keys, indent=2))
        keys_file.chmod(0o600)
    table = d / "patients.csv"
    if not table.is_file():
        patients(n=rows, seed=seed).to_csv(table, index=False)
    districts = ", ".join(json.dumps(x) for x in DISTRICTS)
    (d / "patients.schema.toml").write_text(SCHEMA.format(districts=districts))
    (d / "service.toml").write_text(
        _CONFIG.format(
            admin=hash_key(keys["admin"]),
            alice=hash_key(keys["alice"]),
            bob=hash_key(keys["bob"]),
            floor=float(min_response_seconds),
            seed="" if noise_seed is None else f"seed = {int(noise_seed)}\n",
        )
    )
    return load_config(d / "service.toml"), keys
