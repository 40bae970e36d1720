"""The audit store contract (the only write path) and its in-memory twin for tests."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import groupby
from operator import itemgetter
from typing import Any, NamedTuple, Protocol


class RawRecord(NamedTuple):
    """One record consumed from the audit topic, as Kafka delivered it."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes


class Run(NamedTuple):
    """Consecutive records of one partition as columns, the way a Kafka fetch delivers them (the sink's
    hot path builds no object per record)."""

    topic: str
    partition: int
    offsets: Sequence[int]
    timestamps: Sequence[int]
    keys: Sequence[bytes | None]
    values: Sequence[bytes]

    def records(self) -> list[RawRecord]:
        return [
            RawRecord(self.topic, self.partition, *r)
            for r in zip(self.offsets, self.timestamps, self.keys, self.values, strict=True)
        ]


def runs(records: Iterable[RawRecord]) -> list[Run]:
    """Records as runs of consecutive records of the same partition."""
    out = []
    for (topic, partition), group in groupby(records, key=itemgetter(0, 1)):
        rs = list(group)  # (not zip(*rs): unpacking thousands of arguments is slow)
        out.append(Run(topic, partition, [r.offset for r in rs], [r.timestamp_ms for r in rs],
                       [r.key for r in rs], [r.value for r in rs]))  # fmt: skip
    return out


class AuditStore(Protocol):
    def next_offsets(self) -> dict[tuple[str, int], int]:
        """Per (topic, partition): the next offset to consume (everything before it is stored)."""
        ...

    def write(self, batch: Sequence[RawRecord]) -> None:
        """Store the records and advance the offsets atomically: all of it or none of it."""
        ...

    def prepare(self, batch: Sequence[Run]) -> Any:
        """The CPU half of :meth:`write` (None when nothing in ``batch`` is new)."""
        ...

    def commit(self, prepared: Sequence[Any]) -> None:
        """The storage half of :meth:`write`: prepared batches, in the order they were prepared, in one
        transaction."""
        ...

    def heads(self) -> dict[tuple[str, int], tuple[int, bytes]]:
        """Per (topic, partition): (next offset, hash-chain head) as committed."""
        ...

    def add_checkpoint(self, seq: int, line: dict[str, str]) -> None:
        """Record a signed checkpoint line."""
        ...

    def last_records(self) -> dict[tuple[str, int], RawRecord]:
        """Per partition, the last record stored (at its next offset - 1): what the topic must still hold there."""
        ...

    def close(self) -> None: ...


@dataclass
class MemoryStore:
    """Keeps records in a list; same contract as the DuckDB store."""

    records: list[RawRecord] = field(default_factory=list)
    offsets: dict[tuple[str, int], int] = field(default_factory=dict)
    chain: dict[tuple[str, int], bytes] = field(default_factory=dict)
    checkpoints: list[dict[str, str]] = field(default_factory=list)

    def next_offsets(self) -> dict[tuple[str, int], int]:
        return dict(self.offsets)

    def write(self, batch: Sequence[RawRecord]) -> None:
        self.commit([self.prepare(runs(batch))])

    def prepare(self, batch: Sequence[Run]) -> list[RawRecord]:
        return [r for run in batch for r in run.records()]

    def commit(self, prepared: Sequence[list[RawRecord]]) -> None:
        from audit.chain import genesis, link

        for r in (r for batch in prepared for r in batch):
            tp = (r.topic, r.partition)
            if r.offset < self.offsets.get(tp, -1):
                continue  # a re-delivery of a stored record
            self.records.append(r)
            self.chain[tp] = link(self.chain.get(tp) or genesis(*tp), r)
            self.offsets[tp] = r.offset + 1

    def heads(self) -> dict[tuple[str, int], tuple[int, bytes]]:
        return {tp: (self.offsets[tp], h) for tp, h in self.chain.items()}

    def last_records(self) -> dict[tuple[str, int], RawRecord]:
        last: dict[tuple[str, int], RawRecord] = {}
        for r in self.records:
            last[(r.topic, r.partition)] = r
        return last

    def add_checkpoint(self, seq: int, line: dict[str, str]) -> None:
        self.checkpoints.append(line)

    def close(self) -> None:
        pass
