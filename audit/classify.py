"""The record type and id of raw audit-topic bytes: the one definition that the store writes and that
``driftlog verify`` checks again, as SQL that DuckDB runs vectorised (bench/bench_duckdb_ceiling.py and
the sink benchmarks measured it ahead of decoding the same fields with msgspec in Python). The sink
classifies while it prepares a batch, beside the commit of the previous one, not inside the writing
transaction (:class:`Classifier`): DuckDB's insert is the sink's slowest stage.

Where the native core is built (audit/native.py) the sink first asks its fast path, which answers only for
values that are certainly well-formed records (strict JSON, ``v`` the integer 1, string ``type`` and ``id``,
each field once) and leaves every other value to this SQL. ``verify`` always checks with the SQL, so it
checks the fast path's answers too.

A value is a well-formed audit record when it is UTF-8 JSON with ``v`` 1, ``type`` one of
:data:`~audit.records.RECORD_TYPES`, an ``id`` and an object ``body`` (as DuckDB's ``json_transform``
reads them); then its own type and id are used. Anything else is kept as type ``invalid`` with the first
32 hex digits of the SHA-256 of its bytes as id.
"""

from __future__ import annotations

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from audit import native
from audit.records import RECORD_TYPES

INVALID = "invalid"
_DEFER = 255  # the fast path's type code for "ask the SQL"
_TYPE_NAMES = pa.array([*RECORD_TYPES, *[""] * (256 - len(RECORD_TYPES))], pa.string())  # by type code


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
    """Classifies batches of raw values: the native fast path where built (unless ``fast_path`` is off),
    and the SQL in a private in-memory DuckDB (one thread, no file or network access) for every value it
    leaves, so that the caller's thread does the work, not a writer's."""

    def __init__(self, fast_path: bool = True) -> None:
        self.fast_path = fast_path
        self.con = duckdb.connect(config={"enable_external_access": False, "threads": 1})
        self.query = f"SELECT record_type, record_id FROM ({classify_sql('raw_values')})"

    def classify(self, values: pa.Array) -> tuple[pa.Array, pa.Array]:
        """(record_type, record_id) of each value, in order."""
        if native.core is None or not self.fast_path or not len(values):
            return self._sql(values)
        n = len(values)
        codes, offsets, data = native.core.classify_values(native.binaries(values), n, list(RECORD_TYPES))
        code = pa.Array.from_buffers(pa.uint8(), n, [None, pa.py_buffer(codes)])
        types = _TYPE_NAMES.take(code)
        ids = pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
        deferred = pc.equal(code, _DEFER)
        if pc.any(deferred).as_py():
            sql_types, sql_ids = self._sql(values.filter(deferred))
            types = pc.replace_with_mask(types, deferred, sql_types)
            ids = pc.replace_with_mask(ids, deferred, sql_ids)
        return types, ids

    def _sql(self, values: pa.Array) -> tuple[pa.Array, pa.Array]:
        self.con.register("raw_values", pa.Table.from_arrays([values], names=["value"]))
        try:
            out = self.con.sql(self.query).to_arrow_table()
        finally:
            self.con.unregister("raw_values")
        return out.column(0).combine_chunks(), out.column(1).combine_chunks()

    def close(self) -> None:
        self.con.close()
