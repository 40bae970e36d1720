"""Running one read-only query under limits: rows, bytes and time (the query is interrupted).

Shared by the sink's SQL endpoint (audit/sql_service.py, on a published snapshot) and by ``driftlog
query --db`` (on a file opened read-only); both check the query with audit/sql_guard.py first.
"""

from __future__ import annotations

import threading
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

import duckdb
import pyarrow as pa

from audit.diagnose import duckdb_message
from audit.sql_guard import check_read_only
from streams.errors import QueryError

BATCH_ROWS = 8192
ERROR_KEY = b"driftlog-error"  # custom metadata of the last batch of an Arrow result cut by a limit
Params = dict[str, Any] | list[Any] | None


@dataclass(frozen=True)
class Limits:
    max_rows: int = 100_000
    timeout_s: float = 10.0
    max_bytes: int = 64 * 1024 * 1024

    def narrowed(self, max_rows: int | None) -> Limits:
        """These limits with a client's own (smaller) row limit."""
        rows = self.max_rows if max_rows is None else max(0, min(int(max_rows), self.max_rows))
        return Limits(rows, self.timeout_s, self.max_bytes)


def too_many_rows(limits: Limits) -> QueryError:
    return QueryError(f"the query returned more than {limits.max_rows} rows; add a LIMIT or aggregate")


def too_many_bytes(limits: Limits) -> QueryError:
    return QueryError(
        f"the result is larger than {limits.max_bytes:,} bytes (DRIFTLOG_QUERY_MAX_BYTES); select fewer columns or rows"
    )


def timed_out(limits: Limits) -> QueryError:
    return QueryError(f"the query ran longer than {limits.timeout_s:g}s and was stopped")


def batches(cursor: duckdb.DuckDBPyConnection, sql: str, params: Params, limits: Limits) -> Generator[pa.RecordBatch]:
    """The result in Arrow batches; raises :class:`QueryError` when the query is refused, fails, runs longer
    than ``timeout_s`` (also while the caller consumes it) or returns more than ``max_rows`` rows. The
    first item is an empty batch carrying the schema. ``cursor`` is closed at the end."""
    timer = threading.Timer(limits.timeout_s, cursor.interrupt)
    try:
        check_read_only(cursor, sql)
        timer.start()
        relation = cursor.sql(sql, params=params or None)
        if relation is None:
            raise QueryError("the statement returned no result")
        reader = relation.to_arrow_reader(BATCH_ROWS)
        yield pa.RecordBatch.from_pylist([], schema=reader.schema)
        rows = 0
        for batch in reader:
            rows += batch.num_rows
            if rows > limits.max_rows:
                raise too_many_rows(limits)
            if not timer.is_alive():
                raise timed_out(limits)
            yield batch
    except duckdb.InterruptException as exc:
        raise timed_out(limits) from exc
    except (pa.ArrowException, OSError) as exc:  # an interrupt that lands while the Arrow reader fetches a batch
        if timer.is_alive():
            raise QueryError(str(exc)) from exc
        raise timed_out(limits) from exc
    except duckdb.Error as exc:
        raise QueryError(duckdb_message(exc)) from exc
    finally:
        timer.cancel()
        cursor.close()


def run_read_only(con: duckdb.DuckDBPyConnection, sql: str, params: Params, limits: Limits) -> pa.Table:
    """The whole result as one table (on a fresh cursor of ``con``), within ``limits``."""
    it = batches(con.cursor(), sql, params, limits)
    first = next(it)
    collected, size = [], 0
    for batch in it:
        size += batch.nbytes
        if size > limits.max_bytes:
            raise too_many_bytes(limits)
        collected.append(batch)
    return pa.Table.from_batches(collected, schema=first.schema)
