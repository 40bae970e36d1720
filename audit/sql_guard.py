"""What a served query may contain, decided on DuckDB's own parse tree (``json_serialize_sql``).

This is the second line: queries run on a snapshot database that has no handle on the audit store
(audit/snapshot.py), or on a file opened read-only. On top of that a query must be exactly one SELECT
whose tree holds no data-changing node (``WITH d AS (DELETE ... RETURNING ...) SELECT`` parses as a
SELECT), no function with a side effect and no table function outside a short read-only list (no file,
URL or nested-SQL readers).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import duckdb
import orjson

from streams.errors import QueryError

READ_NODES = frozenset({"SELECT_NODE", "SET_OPERATION_NODE", "RECURSIVE_CTE_NODE", "CTE_NODE"})
TABLE_FUNCTIONS = frozenset({
    "range", "generate_series", "unnest", "json_each", "json_tree", "repeat", "repeat_row",
    "duckdb_columns", "duckdb_tables", "duckdb_views", "duckdb_functions", "duckdb_types", "duckdb_schemas",
    "duckdb_databases", "pragma_table_info", "pragma_version",
})  # fmt: skip
SIDE_EFFECTS = frozenset({
    "write_log", "setval", "nextval", "setseed", "sleep_ms", "checkpoint", "force_checkpoint",
    "truncate_duckdb_logs", "enable_logging", "disable_logging", "enable_profiling", "disable_profiling",
    "query", "query_table", "json_execute_serialized_sql", "getenv",
})  # fmt: skip


def check_read_only(con: duckdb.DuckDBPyConnection, sql: str) -> None:
    """Raise :class:`QueryError` unless ``sql`` is one SELECT that reads and only reads."""
    try:
        statements = con.extract_statements(sql)
    except duckdb.Error as exc:
        raise QueryError(str(exc).splitlines()[0]) from exc
    if len(statements) != 1:
        raise QueryError(f"send exactly one statement (got {len(statements)})")
    if statements[0].type != duckdb.StatementType.SELECT:
        raise QueryError(f"only SELECT queries are allowed here, not {statements[0].type.name}")
    row = con.execute("SELECT json_serialize_sql($sql)", {"sql": sql}).fetchall()[0]
    tree = orjson.loads(row[0]) if row else {"error": True}
    if tree.get("error"):
        raise QueryError(f"only plain SELECT queries are allowed here: {tree.get('error_message', 'unparsable')}")
    for node in _walk(tree):
        kind = node.get("type")
        if isinstance(kind, str) and kind.endswith("_NODE") and kind not in READ_NODES:
            raise QueryError(f"the query changes data ({kind.removesuffix('_QUERY_NODE')} inside a SELECT)")
        if kind == "TABLE_FUNCTION":
            name = str(node.get("function", {}).get("function_name", "")).lower()
            if name not in TABLE_FUNCTIONS:
                raise QueryError(f"table function {name}() is not allowed here (no file, URL or nested SQL)")
        if node.get("class") == "FUNCTION" and str(node.get("function_name", "")).lower() in SIDE_EFFECTS:
            raise QueryError(f"function {node['function_name']}() is not allowed here (a side effect or host access)")


def _walk(value: Any) -> Iterator[dict[str, Any]]:
    if isinstance(value, dict):
        yield value
        for child in value.values():
            yield from _walk(child)
    elif isinstance(value, list):
        for child in value:
            yield from _walk(child)
