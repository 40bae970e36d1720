"""How each derived table is filled from the audit records (one JSON parse per record, in DuckDB).

Every derived table is an append-only ``<name>_log`` with one row per audit record of its type (a worker
re-delivery adds a second row with the same id), and a view ``<name>`` that keeps the first row per id in
audit-log order. The write path and ``driftlog verify`` both use :meth:`Derived.select`, so what is
stored and what is checked cannot drift apart; ``tests/unit/test_duckdb_store.py`` checks these columns
against the migrations.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Column:
    name: str
    path: tuple[str, ...]  # where the value sits in the audit record JSON
    type: str  # DuckDB type


def _source() -> tuple[Column, ...]:
    return (
        Column("source_topic", ("source", "topic"), "VARCHAR"),
        Column("source_partition", ("source", "partition"), "INTEGER"),
        Column("source_offset", ("source", "offset"), "BIGINT"),
    )


@dataclass(frozen=True)
class Derived:
    name: str  # the view; rows are stored in <name>_log
    record_type: str
    columns: tuple[Column, ...]

    @property
    def table(self) -> str:
        return f"{self.name}_log"

    def _spec(self) -> str:
        spec: dict[str, Any] = {}
        for c in self.columns:
            node = spec
            for key in c.path[:-1]:
                node = node.setdefault(key, {})
            node[c.path[-1]] = c.type
        return json.dumps(spec).replace("'", "''")

    def select(self, source: str) -> str:
        """Rows of ``<name>_log`` derived from ``source`` (a relation with record_type, value, partition, offset)."""
        fields = ", ".join(f"s.{'.'.join(chr(34) + p + chr(34) for p in c.path)} AS {c.name}" for c in self.columns)
        return (
            f'SELECT {fields}, "partition" AS audit_partition, "offset" AS audit_offset'
            f' FROM (SELECT json_transform(decode(value), \'{self._spec()}\') AS s, "partition", "offset"'
            f" FROM {source} WHERE record_type = '{self.record_type}')"
        )


def _c(name: str, *path: str, type_: str = "VARCHAR") -> Column:
    return Column(name, ("body", *path), type_)


DERIVED = (
    Derived("findings", "finding", (
        Column("id", ("id",), "VARCHAR"), _c("kind", "kind"), _c("subjects", "subjects", type_="VARCHAR[]"),
        _c("start_time", "start", type_="DOUBLE"), _c("end_time", "end", type_="DOUBLE"),
        _c("severity", "severity", type_="DOUBLE"), _c("evidence", "evidence", type_="JSON"),
        _c("cost", "cost", type_="JSON"), *_source(),
    )),
    Derived("dead_letters", "dead_letter", (
        Column("id", ("id",), "VARCHAR"), _c("reason", "reason"), _c("detail", "detail"),
        _c("sample_count", "count", type_="INTEGER"), _c("sample_indices", "indices", type_="INTEGER[]"),
        _c("whole_message", "whole_message", type_="BOOLEAN"), _c("original_sha256", "original_sha256"),
        _c("original_bytes", "original_bytes", type_="BIGINT"), *_source(),
    )),
    Derived("decisions", "decision", (
        _c("id", "id"), _c("time", "time", type_="DOUBLE"), _c("controller", "controller"), _c("layer", "layer"),
        _c("action", "action"), _c("targets", "targets", type_="VARCHAR[]"),
        _c("parameters", "parameters", type_="JSON"),
        _c("reason", "reason"), _c("expected_metric", "expected_effect", "metric"),
        _c("expected_direction", "expected_effect", "direction"), _c("job", "job"), *_source(),
    )),
    Derived("attributions", "attribution", (
        Column("id", ("id",), "VARCHAR"), _c("finding_id", "finding_id"), _c("rank", "rank", type_="INTEGER"),
        _c("cause_kind", "cause_kind"), _c("cause", "cause"), _c("share", "share", type_="DOUBLE"),
        _c("slowdown", "slowdown", type_="DOUBLE"), _c("cost_accel_s", "cost_accel_s", type_="DOUBLE"),
        _c("evidence", "evidence", type_="JSON"), *_source(),
    )),
    Derived("graph_snapshots", "graph_snapshot", (
        Column("id", ("id",), "VARCHAR"), _c("job", "job"), _c("valid_from", "valid_from", type_="DOUBLE"),
        _c("digest", "digest"), _c("nodes", "nodes", type_="JSON"), _c("edges", "edges", type_="JSON"), *_source(),
    )),
    Derived("metrics_rollup", "metrics_rollup", (
        Column("id", ("id",), "VARCHAR"), _c("job", "job"), _c("entity", "entity"), _c("name", "name"),
        _c("window_start", "window_start", type_="DOUBLE"), _c("window_end", "window_end", type_="DOUBLE"),
        _c("n", "n", type_="BIGINT"), _c("mean", "mean", type_="DOUBLE"), _c("p50", "p50", type_="DOUBLE"),
        _c("p99", "p99", type_="DOUBLE"), _c("min", "min", type_="DOUBLE"), _c("max", "max", type_="DOUBLE"),
        _c("total", "total", type_="DOUBLE"), *_source(),
    )),
)  # fmt: skip
RECORD_TYPES = tuple(d.record_type for d in DERIVED)
