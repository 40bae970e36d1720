"""The hash chain: one per (topic, partition) of the audit topic, over the raw Kafka record.

``link(prev, record) = SHA-256(prev ‖ partition ‖ offset ‖ timestamp ‖ len(topic) ‖ topic ‖ len(key) ‖ key
‖ len(value) ‖ value)`` with fixed-width big-endian integers (a missing key has length -1), and the chain
of a partition starts from ``genesis(topic, partition)``. Replaying the same topic gives the same chain;
deleting, changing or re-ordering a record breaks every link after it.

This module is the definition. The sink and ``verify`` hash whole Arrow columns with :func:`chain_arrow`,
which runs the same loop natively where the native core is built (audit/native.py) and falls back to
:func:`chain_run` without it.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence

import pyarrow as pa

from audit import native
from audit.store import RawRecord

LINK = 32  # bytes per link

_HEADER = struct.Struct(">iqqi")
_PREV_HEADER = struct.Struct(">32siqqi")
_LEN = struct.Struct(">i")
_NO_KEY = _LEN.pack(-1)
_sha256 = hashlib.sha256


def genesis(topic: str, partition: int) -> bytes:
    return hashlib.sha256(f"driftlog-chain/1|{topic}|{partition}".encode()).digest()


def link(prev: bytes, record: RawRecord) -> bytes:
    return link_parts(prev, record.topic.encode(), record.partition, record.offset, record.timestamp_ms,
                      record.key, record.value)  # fmt: skip


def link_parts(
    prev: bytes, topic: bytes, partition: int, offset: int, ts: int, key: bytes | None, value: bytes
) -> bytes:
    key_part = _NO_KEY if key is None else _LEN.pack(len(key)) + key
    return _sha256(
        b"".join((prev, _HEADER.pack(partition, offset, ts, len(topic)), topic, key_part, _LEN.pack(len(value)), value))
    ).digest()


def chain_run(
    prev: bytes,
    topic: bytes,
    partition: int,
    offsets: Sequence[int],
    timestamps: Sequence[int],
    keys: Sequence[bytes | None],
    values: Sequence[bytes],
) -> list[bytes]:
    """The links after ``prev`` of consecutive records of one partition (what :func:`link_parts` gives
    one by one, in one loop: this is the sink's and verify's hot path)."""
    sha, pack, length, join = _sha256, _PREV_HEADER.pack, _LEN.pack, b"".join
    head = len(topic)
    out: list[bytes] = []
    append = out.append
    for offset, ts, key, value in zip(offsets, timestamps, keys, values, strict=True):
        key_part = _NO_KEY if key is None else length(len(key)) + key
        prev = sha(join((pack(prev, partition, offset, ts, head), topic, key_part, length(len(value)), value))).digest()
        append(prev)
    return out


def chain_arrow(
    prev: bytes, topic: bytes, partition: int, offsets: pa.Array, timestamps: pa.Array, keys: pa.Array, values: pa.Array
) -> bytes:
    """:func:`chain_run` over Arrow columns of equal length (int64, int64, binary, binary; only keys may be
    null), the links concatenated (``LINK`` bytes each); natively when the extension is built."""
    n = len(offsets)
    if not len(timestamps) == len(keys) == len(values) == n:
        raise ValueError(f"columns of different lengths: {[len(c) for c in (offsets, timestamps, keys, values)]}")
    for name, column in (("offsets", offsets), ("timestamps", timestamps)):
        if column.type != pa.int64() or column.null_count:
            raise ValueError(f"{name}: expected int64 without nulls, got {column.type} with {column.null_count} nulls")
    if values.null_count:
        raise ValueError(f"{values.null_count} null values (an audit record's value is bytes)")
    if native.core is None or n == 0:
        return b"".join(chain_run(prev, topic, partition, offsets.to_pylist(), timestamps.to_pylist(),
                                  keys.to_pylist(), values.to_pylist()))  # fmt: skip
    columns = (native.int64s(offsets), native.int64s(timestamps), native.binaries(keys), native.binaries(values))
    return bytes(native.core.chain_links(prev, topic, partition, n, *columns))
