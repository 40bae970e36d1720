"""Read-only SQL over the audit store, from any process.

When no writer holds the DuckDB file it is opened read-only here. While the sink runs (DuckDB then lets no
other process open the file) the query goes to the sink's ``POST /sql`` endpoint, which answers from the
snapshot it last published (audit/snapshot.py: at most ``DRIFTLOG_SQL_SNAPSHOT_INTERVAL_S`` behind the
commits). Both paths apply the same rules (audit/sql_guard.py, audit/sql_run.py): one SELECT that only
reads, no file or network access, row, byte and time limits.
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
from audit.sql_run import ERROR_KEY, Limits, run_read_only
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
    limits: Limits | None = None,
    endpoint: Endpoint | None = None,
) -> pa.Table:
    """Run one read-only query on the file, or through ``endpoint`` when a writer holds the file."""
    limits = limits or Limits()
    if endpoint is not None and endpoint.remote:
        return fetch_over_http(endpoint, sql, params, limits)
    try:
        return _on_file(db_path, sql, params, limits)
    except WriterHoldsFile:
        if endpoint is None:
            raise
        return fetch_over_http(endpoint, sql, params, limits)


def run_query(db_path: Path, sql: str, params: Params = None, **options: Any) -> Result:
    """:func:`fetch_arrow` as rows."""
    return Result.from_arrow(fetch_arrow(db_path, sql, params, **options))


def _on_file(db_path: Path, sql: str, params: Params, limits: Limits) -> pa.Table:
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
        return run_read_only(con, sql, params, limits)
    finally:
        con.close()


def fetch_over_http(endpoint: Endpoint, sql: str, params: Params, limits: Limits) -> pa.Table:
    """One query through a running sink's SQL endpoint."""
    body = orjson.dumps({"sql": sql, "params": params, "max_rows": limits.max_rows, "format": "arrow"})
    request = urllib.request.Request(endpoint.url, data=body, method="POST")
    request.add_header("Content-Type", "application/json")
    if endpoint.token:
        request.add_header("Authorization", f"Bearer {endpoint.token}")
    try:
        with urllib.request.urlopen(request, timeout=limits.timeout_s + 30) as response:
            return read_stream(response)
    except urllib.error.HTTPError as exc:
        try:
            message = orjson.loads(exc.read())["error"]
        except (ValueError, KeyError, TypeError):
            message = f"the sink's SQL endpoint answered HTTP {exc.code}"
        raise QueryError(message) from exc
    except (urllib.error.URLError, OSError) as exc:
        raise QueryError(f"the sink's SQL endpoint {endpoint.url} did not answer: {exc}") from exc


def read_stream(source: Any) -> pa.Table:
    """An Arrow IPC stream from the SQL endpoint; a stream the server cut at a limit raises its error."""
    reader = pa.ipc.open_stream(source)
    collected: list[pa.RecordBatch] = []
    while True:
        try:
            batch, metadata = reader.read_next_batch_with_custom_metadata()
        except StopIteration:
            return pa.Table.from_batches(collected, schema=reader.schema)
        if metadata is not None and ERROR_KEY in metadata:
            raise QueryError(metadata[ERROR_KEY].decode())
        collected.append(batch)
