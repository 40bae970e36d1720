"""The audit store contract (the only write path) and its in-memory twin for tests."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol


class RawRecord(NamedTuple):
    """One record consumed from the audit topic, as Kafka delivered it."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes


class AuditStore(Protocol):
    def next_offsets(self) -> dict[tuple[str, int], int]:
        """Per (topic, partition): the next offset to consume (everything before it is stored)."""
        ...

    def write(self, batch: Sequence[RawRecord]) -> None:
        """Store the records and advance the offsets atomically: all of it or none of it."""
        ...

    def close(self) -> None: ...


@dataclass
class MemoryStore:
    """Keeps records in a list; same contract as the DuckDB store."""

    records: list[RawRecord] = field(default_factory=list)
    offsets: dict[tuple[str, int], int] = field(default_factory=dict)

    def next_offsets(self) -> dict[tuple[str, int], int]:
        return dict(self.offsets)

    def write(self, batch: Sequence[RawRecord]) -> None:
        self.records.extend(batch)
        for r in batch:
            self.offsets[(r.topic, r.partition)] = max(self.offsets.get((r.topic, r.partition), 0), r.offset + 1)

    def close(self) -> None:
        pass
