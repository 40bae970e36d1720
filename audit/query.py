"""Read-only SQL over the audit store: no writes, no file or network access, configuration locked."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb

from streams.errors import QueryError

READ_ONLY_CONFIG: dict[str, str | bool | int | float | list[str]] = {
    "enable_external_access": False,
    "lock_configuration": True,
}


@dataclass(frozen=True)
class Result:
    columns: list[str]
    rows: list[tuple[Any, ...]]

    def records(self) -> list[dict[str, Any]]:
        return [dict(zip(self.columns, row, strict=True)) for row in self.rows]


def run_query(db_path: Path, sql: str, params: list[Any] | None = None, max_rows: int = 100_000) -> Result:
    """Run one query against a closed (not currently written) DuckDB file, read-only."""
    if not db_path.exists():
        raise QueryError(f"no audit store at {db_path}: run the sink first, or pass --db")
    try:
        con = duckdb.connect(str(db_path), read_only=True, config=READ_ONLY_CONFIG)
    except duckdb.IOException as exc:
        raise QueryError(
            f"{db_path} is held by a writer (the sink?); DuckDB allows no reader beside it: {exc}"
        ) from exc
    try:
        cursor = con.execute(sql, params or [])
        columns = [d[0] for d in cursor.description or []]
        rows = cursor.fetchmany(max_rows + 1)
    except duckdb.Error as exc:
        raise QueryError(str(exc).splitlines()[0]) from exc
    finally:
        con.close()
    if len(rows) > max_rows:
        raise QueryError(f"the query returned more than {max_rows} rows; add a LIMIT or aggregate")
    return Result(columns, rows)
