"""The record type and id of raw audit-topic bytes: the one definition that the store writes and that
``driftlog verify`` checks again, as SQL that DuckDB runs vectorised (bench/bench_duckdb_ceiling.py and
the sink benchmarks measured it ahead of decoding the same fields with msgspec in Python). The sink runs
it while it prepares a batch, beside the commit of the previous one, not inside the writing transaction
(:class:`Classifier`): DuckDB's insert is the sink's slowest stage.

A value is a well-formed audit record when it is UTF-8 JSON with ``v`` 1, ``type`` one of
:data:`~audit.records.RECORD_TYPES`, an ``id`` and an object ``body`` (as DuckDB's ``json_transform``
reads them); then its own type and id are used. Anything else is kept as type ``invalid`` with the first
32 hex digits of the SHA-256 of its bytes as id.
"""

from __future__ import annotations

import duckdb
import pyarrow as pa

from audit.records import RECORD_TYPES

INVALID = "invalid"


def classify_sql(source: str) -> str:
    """A SELECT of ``source``'s columns (which must include ``value`` and must not include
    ``record_type``/``record_id``) plus ``record_type`` and ``record_id``: one JSON parse per row (a
    JSON object's text starts with ``{``, so the body is not parsed again)."""
    return f"""
    SELECT * EXCLUDE (c, ok), CASE WHEN ok THEN c.type ELSE '{INVALID}' END AS record_type,
           CASE WHEN ok THEN c.id ELSE left(sha256(value), 32) END AS record_id
    FROM (SELECT *, coalesce(c.v = 1 AND c.type IN {RECORD_TYPES!r} AND c.id IS NOT NULL
                             AND starts_with(c.body::VARCHAR, '{{'), false) AS ok
          FROM (SELECT *, try(json_transform(decode(value),
                              '{{"v": "INTEGER", "type": "VARCHAR", "id": "VARCHAR", "body": "JSON"}}')) AS c
                FROM {source}))
    """


class Classifier:
    """Classifies batches of raw values in a private in-memory DuckDB (one thread, no file or network
    access), so that the caller's thread does the work, not a writer's."""

    def __init__(self) -> None:
        self.con = duckdb.connect(config={"enable_external_access": False, "threads": 1})
        self.query = f"SELECT record_type, record_id FROM ({classify_sql('raw_values')})"

    def classify(self, values: pa.Array) -> tuple[pa.Array, pa.Array]:
        """(record_type, record_id) of each value, in order."""
        self.con.register("raw_values", pa.Table.from_arrays([values], names=["value"]))
        try:
            out = self.con.sql(self.query).to_arrow_table()
        finally:
            self.con.unregister("raw_values")
        return out.column(0).combine_chunks(), out.column(1).combine_chunks()

    def close(self) -> None:
        self.con.close()
