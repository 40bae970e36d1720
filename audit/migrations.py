"""Ordered, transactional schema migrations from ``sql/migrations/NNNN_name.sql``, recorded in a table."""

from __future__ import annotations

import re
from pathlib import Path

import duckdb

from streams.errors import StoreError

_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


def sql_dir() -> Path:
    """``sql/`` of a source checkout, or the copy packed into the wheel as ``audit/sql``."""
    for candidate in (Path(__file__).resolve().parents[1] / "sql", Path(__file__).resolve().parent / "sql"):
        if (candidate / "migrations").is_dir():
            return candidate
    raise StoreError("the sql/ directory (schema migrations and named queries) is missing from this install")


def available() -> list[tuple[int, str, Path]]:
    found = []
    for path in sorted((sql_dir() / "migrations").glob("*.sql")):
        m = _NAME.match(path.name)
        if not m:
            raise StoreError(f"migration file {path.name} is not named NNNN_name.sql")
        found.append((int(m.group(1)), m.group(2), path))
    versions = [v for v, _, _ in found]
    if len(set(versions)) != len(versions):
        raise StoreError(f"two migrations share a version number in {sql_dir() / 'migrations'}")
    return found


def migrate(con: duckdb.DuckDBPyConnection) -> list[int]:
    """Apply every migration not yet recorded, each in its own transaction. Returns the versions applied."""
    con.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations ("
        " version INTEGER PRIMARY KEY, name VARCHAR NOT NULL, applied_at TIMESTAMPTZ DEFAULT current_timestamp)"
    )
    done = {row[0] for row in con.execute("SELECT version FROM schema_migrations").fetchall()}
    applied = []
    for version, name, path in available():
        if version in done:
            continue
        con.execute("BEGIN")
        try:
            con.execute(path.read_text())
            con.execute("INSERT INTO schema_migrations (version, name) VALUES (?, ?)", [version, name])
            con.execute("COMMIT")
        except duckdb.Error as exc:
            con.execute("ROLLBACK")
            raise StoreError(f"migration {path.name} failed and was rolled back: {exc}") from exc
        applied.append(version)
    return applied
