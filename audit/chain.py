"""The hash chain: one per (topic, partition) of the audit topic, over the raw Kafka record.

``link(prev, record) = SHA-256(prev ‖ partition ‖ offset ‖ timestamp ‖ len(topic) ‖ topic ‖ len(key) ‖ key
‖ len(value) ‖ value)`` with fixed-width big-endian integers (a missing key has length -1), and the chain
of a partition starts from ``genesis(topic, partition)``. Replaying the same topic gives the same chain;
deleting, changing or re-ordering a record breaks every link after it.
"""

from __future__ import annotations

import hashlib
import struct

from audit.store import RawRecord

_HEADER = struct.Struct(">iqqi")
_LEN = struct.Struct(">i")


def genesis(topic: str, partition: int) -> bytes:
    return hashlib.sha256(f"driftlog-chain/1|{topic}|{partition}".encode()).digest()


def link(prev: bytes, record: RawRecord) -> bytes:
    topic = record.topic.encode()
    key = record.key
    h = hashlib.sha256(prev)
    h.update(_HEADER.pack(record.partition, record.offset, record.timestamp_ms, len(topic)))
    h.update(topic)
    if key is None:
        h.update(_LEN.pack(-1))
    else:
        h.update(_LEN.pack(len(key)))
        h.update(key)
    h.update(_LEN.pack(len(record.value)))
    h.update(record.value)
    return h.digest()
