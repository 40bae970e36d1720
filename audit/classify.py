"""The record type and id of raw audit-topic bytes: the one definition that the store writes and that
``driftlog verify`` checks again, as SQL that DuckDB runs (vectorised, in its own threads, beside the
Python thread that hashes: bench/bench_duckdb_ceiling.py and the sink benchmarks measured it ahead of
decoding the same fields with msgspec in Python).

A value is a well-formed audit record when it is UTF-8 JSON with ``v`` 1, ``type`` one of
:data:`~audit.records.RECORD_TYPES`, an ``id`` and an object ``body`` (as DuckDB's ``json_transform``
reads them); then its own type and id are used. Anything else is kept as type ``invalid`` with the first
32 hex digits of the SHA-256 of its bytes as id.
"""

from __future__ import annotations

from audit.records import RECORD_TYPES

INVALID = "invalid"


def classify_sql(source: str) -> str:
    """A SELECT of ``source``'s columns (which must include ``value`` and must not include
    ``record_type``/``record_id``) plus ``record_type`` and ``record_id``: one JSON parse per row."""
    return f"""
    SELECT * EXCLUDE (c, ok), CASE WHEN ok THEN c.type ELSE '{INVALID}' END AS record_type,
           CASE WHEN ok THEN c.id ELSE left(sha256(value), 32) END AS record_id
    FROM (SELECT *, coalesce(c.v = 1 AND c.type IN {RECORD_TYPES!r} AND c.id IS NOT NULL
                             AND json_type(c.body) = 'OBJECT', false) AS ok
          FROM (SELECT *, try(json_transform(decode(value),
                              '{{"v": "INTEGER", "type": "VARCHAR", "id": "VARCHAR", "body": "JSON"}}')) AS c
                FROM {source}))
    """
