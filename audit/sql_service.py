"""SQL over HTTP, served by the sink process (the only process that may open the DuckDB file while it runs).

Read-only by construction: exactly one SELECT statement (DuckDB's own parser decides), on a cursor of a
connection opened with ``enable_external_access=false`` and a locked configuration (no files, no network,
no ``SET``), with a row limit and a time limit (the query is interrupted). It binds to loopback unless told
otherwise, and then a bearer token is required (the sink refuses to start without one).
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import threading
from dataclasses import dataclass
from typing import Any

import duckdb
import orjson
import pyarrow as pa
from aiohttp import web

from audit.diagnose import duckdb_message
from streams.errors import ConfigError, QueryError

ARROW_STREAM = "application/vnd.apache.arrow.stream"


@dataclass(frozen=True)
class Limits:
    max_rows: int = 100_000
    timeout_s: float = 10.0


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def require_token_off_loopback(host: str, token: str) -> None:
    if not is_loopback(host) and not token:
        raise ConfigError(
            f"DRIFTLOG_HTTP_HOST={host} serves SQL beyond loopback: set DRIFTLOG_SQL_TOKEN to require a bearer token"
        )


def check_read_only(con: duckdb.DuckDBPyConnection, sql: str) -> None:
    """Exactly one SELECT statement, as DuckDB parses it (no INSERT, COPY, ATTACH, SET, PRAGMA, CALL, ...)."""
    try:
        statements = con.extract_statements(sql)
    except duckdb.Error as exc:
        raise QueryError(duckdb_message(exc)) from exc
    if len(statements) != 1:
        raise QueryError(f"send exactly one statement (got {len(statements)})")
    if statements[0].type != duckdb.StatementType.SELECT:
        raise QueryError(f"only SELECT queries are allowed here, not {statements[0].type.name}")


def run_read_only(
    con: duckdb.DuckDBPyConnection, sql: str, params: dict[str, Any] | list[Any] | None, limits: Limits
) -> pa.Table:
    """Run on a fresh cursor (safe beside the writer's transactions), interrupted after ``timeout_s``."""
    cursor = con.cursor()
    try:
        check_read_only(cursor, sql)
    except QueryError:
        cursor.close()
        raise
    timer = threading.Timer(limits.timeout_s, cursor.interrupt)
    timer.start()
    try:
        relation = cursor.sql(sql, params=params or None)
        if relation is None:
            raise QueryError("the statement returned no result")
        reader = relation.to_arrow_reader(8192)
        batches, rows = [], 0
        for batch in reader:
            rows += batch.num_rows
            if rows > limits.max_rows:
                raise QueryError(f"the query returned more than {limits.max_rows} rows; add a LIMIT or aggregate")
            batches.append(batch)
        return pa.Table.from_batches(batches, schema=reader.schema)
    except duckdb.InterruptException as exc:
        raise QueryError(f"the query ran longer than {limits.timeout_s:g}s and was stopped") from exc
    except duckdb.Error as exc:
        raise QueryError(duckdb_message(exc)) from exc
    finally:
        timer.cancel()
        cursor.close()


def sql_routes(con: duckdb.DuckDBPyConnection, token: str, limits: Limits) -> list[web.RouteDef]:
    """``POST /sql`` with JSON ``{"sql", "params", "max_rows", "format": "json"|"arrow"}``."""

    async def handle(request: web.Request) -> web.Response:
        if token and not hmac.compare_digest(request.headers.get("Authorization", ""), f"Bearer {token}"):
            return web.json_response({"error": "missing or wrong bearer token"}, status=401)
        try:
            body = orjson.loads(await request.read())
            sql = body["sql"]
            if not isinstance(sql, str):
                raise TypeError("sql must be a string")
            wanted = Limits(min(int(body.get("max_rows", limits.max_rows)), limits.max_rows), limits.timeout_s)
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            return web.json_response({"error": f"expected JSON {{'sql': ...}}: {exc}"}, status=400)
        try:
            table = await asyncio.to_thread(run_read_only, con, sql, body.get("params"), wanted)
        except QueryError as exc:
            return web.json_response({"error": str(exc)}, status=400)
        if body.get("format") == "arrow":
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, table.schema) as writer:
                writer.write_table(table)
            return web.Response(body=sink.getvalue().to_pybytes(), content_type=ARROW_STREAM)
        payload = {"columns": table.column_names, "rows": [list(r.values()) for r in table.to_pylist()]}
        return web.Response(body=orjson.dumps(payload, default=str), content_type="application/json")

    return [web.post("/sql", handle)]
