"""The simulator's messages fit Kafka's defaults (:mod:`streams.contract.sizing`): a topology or metrics
message of columnar batches is split by rows when it would not fit."""

from __future__ import annotations

from typing import Any

from streams.contract.sizing import MAX_MESSAGE_BYTES, column_rows, part_source, split_by_size
from streams.sim.base import envelope


def sized_envelopes(source: str, seq: int, batches: list[dict[str, Any]],
                    limit: int = MAX_MESSAGE_BYTES) -> list[bytes]:  # fmt: skip
    """A telemetry message of columnar ``batches``, or, when it would not fit ``limit``, several: the rows of
    all batches in order, split evenly (parts after the first are their own sources, ``<source>/part<i>``)."""
    total = sum(int(b["n"]) for b in batches)

    def encode(part: int, parts: int, lo: int, hi: int) -> bytes:
        if parts == 1:
            return envelope(source, seq, batches)
        return envelope(part_source(source, part), seq, column_rows(batches, lo, hi))

    return split_by_size(total, encode, limit)
