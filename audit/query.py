"""Read-only SQL over the audit store, from any process.

When no writer holds the DuckDB file it is opened read-only here. While the sink runs (DuckDB then lets no
other process open the file) the query goes to the sink's ``POST /sql`` endpoint, which sees every
committed record. Both paths apply the same rules: one SELECT, no file or network access, row and time
limits.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import orjson
import pyarrow as pa

from audit.diagnose import open_failure
from streams.errors import QueryError

READ_ONLY_CONFIG: dict[str, str | bool | int | float | list[str]] = {
    "enable_external_access": False,
    "lock_configuration": True,
}
Params = dict[str, Any] | list[Any] | None


@dataclass(frozen=True)
class Result:
    columns: list[str]
    rows: list[tuple[Any, ...]]

    @classmethod
    def from_arrow(cls, table: pa.Table) -> Result:
        columns = [c.to_pylist() for c in table.columns]
        return cls(table.column_names, list(zip(*columns, strict=True)) if columns else [])

    def records(self) -> list[dict[str, Any]]:
        return [dict(zip(self.columns, row, strict=True)) for row in self.rows]


@dataclass(frozen=True)
class Endpoint:
    """Where a running sink serves SQL, and the token it wants (empty: none)."""

    url: str
    token: str = ""
    remote: bool = False  # asked for by name (--url): query it, never a local file


class WriterHoldsFile(QueryError):
    """The sink holds the DuckDB file: query it through its SQL endpoint instead."""


def fetch_arrow(
    db_path: Path,
    sql: str,
    params: Params = None,
    max_rows: int = 100_000,
    timeout_s: float = 30.0,
    endpoint: Endpoint | None = None,
) -> pa.Table:
    """Run one read-only query on the file, or through ``endpoint`` when a writer holds the file."""
    from audit.sql_service import Limits, run_read_only

    if endpoint is not None and endpoint.remote:
        return _over_http(endpoint, sql, params, max_rows)
    try:
        return _on_file(db_path, sql, params, Limits(max_rows, timeout_s), run_read_only)
    except WriterHoldsFile:
        if endpoint is None:
            raise
        return _over_http(endpoint, sql, params, max_rows)


def run_query(db_path: Path, sql: str, params: Params = None, **options: Any) -> Result:
    """:func:`fetch_arrow` as rows."""
    return Result.from_arrow(fetch_arrow(db_path, sql, params, **options))


def _on_file(db_path: Path, sql: str, params: Params, limits: Any, run: Any) -> pa.Table:
    if not db_path.exists():
        raise QueryError(f"no audit store at {db_path}: run the sink first, pass --db FILE, or --url of a sink")
    try:
        con = duckdb.connect(str(db_path), read_only=True, config=READ_ONLY_CONFIG)
    except duckdb.Error as exc:
        why = open_failure(db_path, exc, read_only=True)
        if "another process holds it" in why:
            raise WriterHoldsFile(f"{why}; and no SQL endpoint was given to ask instead (--url)") from exc
        raise QueryError(why) from exc
    try:
        return run(con, sql, params, limits)
    finally:
        con.close()


def _over_http(endpoint: Endpoint, sql: str, params: Params, max_rows: int) -> pa.Table:
    body = orjson.dumps({"sql": sql, "params": params, "max_rows": max_rows, "format": "arrow"})
    request = urllib.request.Request(endpoint.url, data=body, method="POST")
    request.add_header("Content-Type", "application/json")
    if endpoint.token:
        request.add_header("Authorization", f"Bearer {endpoint.token}")
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return pa.ipc.open_stream(response.read()).read_all()
    except urllib.error.HTTPError as exc:
        try:
            message = orjson.loads(exc.read())["error"]
        except (ValueError, KeyError, TypeError):
            message = f"HTTP {exc.code}"
        raise QueryError(message) from exc
    except (urllib.error.URLError, OSError) as exc:
        raise QueryError(f"the sink's SQL endpoint {endpoint.url} did not answer: {exc}") from exc
