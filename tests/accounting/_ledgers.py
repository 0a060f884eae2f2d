"""Ledgers as older dpkit versions wrote them (shared by the ledger tests)."""

#: The schema of a ledger written by dpkit before events were recorded (schema version 1), verbatim.
V1_SCHEMA = """
PRAGMA application_id = 1685089132;
PRAGMA user_version = 1;
CREATE TABLE meta (key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL);
CREATE TABLE charges (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    label TEXT NOT NULL,
    epsilon TEXT NOT NULL,
    delta TEXT NOT NULL,
    rho TEXT,
    scope_path TEXT NOT NULL,
    created_at REAL NOT NULL
);
CREATE TRIGGER charges_no_update BEFORE UPDATE ON charges
BEGIN SELECT RAISE(ABORT, 'a dpkit ledger is append-only'); END;
CREATE TRIGGER charges_no_delete BEFORE DELETE ON charges
BEGIN SELECT RAISE(ABORT, 'a dpkit ledger is append-only'); END;
"""
