"""Audit records: the JSON documents the worker puts on the audit topic and the sink stores.

Every record names the input position it was derived from, so a replay of the same input reproduces
the same records (same ids, same bytes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, get_args

import orjson

RECORD_VERSION = 1
RecordType = Literal["finding", "dead_letter", "decision", "attribution", "graph_snapshot", "metrics_rollup"]
RECORD_TYPES: tuple[str, ...] = get_args(RecordType)


@dataclass(frozen=True)
class SourcePosition:
    topic: str
    partition: int
    offset: int

    def as_dict(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "offset": self.offset}


@dataclass(frozen=True)
class AuditRecord:
    type: RecordType
    id: str
    source: SourcePosition
    body: dict[str, Any]
    key: str

    def encode(self) -> bytes:
        return orjson.dumps(
            {
                "v": RECORD_VERSION,
                "type": self.type,
                "id": self.id,
                "source": self.source.as_dict(),
                "body": self.body,
            },
            option=orjson.OPT_SORT_KEYS,
        )
