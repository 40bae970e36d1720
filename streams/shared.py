"""Samples of no job, shared between the live worker's tasks (Kafka Streams' global-table pattern).

A task reads one telemetry partition, but fabric topology and power or service metrics that name no job
concern every job and the control plane, wherever those are kept. So the task that admits such samples
*forwards* them, in the transaction that also carries its snapshot, to the shared topic
(``DRIFTLOG_SHARED_TOPIC``, partition = the task's), and every other task reads every partition of the
shared topic in full, as it reads the decisions: each engine then sees every job-less sample once, the
records do not depend on which partition a sample was produced to, and a restarted task re-sends exactly
what its aborted transaction held (the consumers read ``read_committed``).

Each transaction also ends with a *mark*: how far in event time the task's own input has come, and whether
it is caught up. A task reading a shared partition lets the mark's time hold its watermark (the forwarding
task's input may still bring job-less samples up to there) and counts the partition caught up only when the
mark says the forwarding task is: so a task never releases an epoch before the job-less samples of it have
been forwarded, however far behind the other task is (:mod:`streams.engine.timeline`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import orjson

from audit.records import SourcePosition
from streams.contract.envelope import SampleBatch
from streams.contract.schema import TELEMETRY_SCHEMA

SHARED_KINDS = ("topology", "metric")  # (op spans and step summaries of no job are refused by the engine)
MARK_SCHEMA = "driftlog.shared-mark/1"
_MARK_PREFIX = orjson.dumps({"schema": MARK_SCHEMA})[:-1]


def jobless(batches: list[SampleBatch]) -> list[SampleBatch]:
    """The samples of no job in ``batches`` (topology and metrics), as batches of the same kinds."""
    out = []
    for batch in batches:
        job = batch.columns.get("job")
        if batch.kind not in SHARED_KINDS or job is None or not len(batch):
            continue
        rows = job == ""
        if rows.all():
            out.append(batch)
        elif rows.any():
            out.append(batch.select(rows))
    return out


def forwarded(batches: list[SampleBatch], source: SourcePosition) -> bytes:
    """A telemetry envelope of ``batches`` (read from ``source``), as the shared topic carries them."""
    return envelope(batches, f"shared:{source.topic}/{source.partition}", source.offset)


def envelope(batches: list[SampleBatch], source: str, seq: int) -> bytes:
    """A columnar telemetry envelope of decoded ``batches`` (decoding it gives the same columns back)."""
    columns = [{"kind": b.kind, "n": len(b), "data": {k: v.tolist() for k, v in b.columns.items()}} for b in batches]
    return orjson.dumps({"schema": TELEMETRY_SCHEMA, "source": source, "seq": seq, "columns": columns})


@dataclass(frozen=True)
class Mark:
    """How far the forwarding task's own input has come (event time, s) and whether it is caught up."""

    time: float
    caught_up: bool

    def encode(self) -> bytes:
        time = self.time if np.isfinite(self.time) else None
        return orjson.dumps({"schema": MARK_SCHEMA, "time": time, "caught_up": self.caught_up})

    @staticmethod
    def decode(raw: bytes) -> Mark | None:
        """The mark ``raw`` holds, or None when it is forwarded samples."""
        if not raw.startswith(_MARK_PREFIX):
            return None
        doc = orjson.loads(raw)
        time = doc.get("time")
        return Mark(float("-inf") if time is None else float(time), bool(doc.get("caught_up")))
