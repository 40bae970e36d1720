"""Message sizes: what the contract admits must reach the dead-letter topic, whatever the broker's default.

The contract admits telemetry messages up to ``MAX_MESSAGE_BYTES`` (4 MiB); a rejected one is forwarded
whole, with headers, to the dead-letter topic. Kafka's defaults (``message.max.bytes`` on the broker,
``max.request.size`` in producers) are ~1 MB, so:

- driftlog creates its topics with ``max.message.bytes`` = :data:`TOPIC_MAX_BYTES` (a topic setting, which
  wins over the broker's default; the local launcher's broker uses the same);
- producers that forward input use :data:`PRODUCER_MAX_REQUEST_BYTES` (``max_request_size`` in aiokafka,
  ``producer_max_request_size`` in Faust);
- producers of telemetry compress with :data:`TELEMETRY_COMPRESSION`: lz4 sends a simulated job's messages in
  1/6 of their bytes (zstd 1/9, snappy 1/5, on `bench/suite.py`'s workload). The consumer still decompresses
  and copies every value, but its broker stores and serves a sixth, and on the bench's 5.8 M samples the
  worker's consumer thread took 0.6 instead of 1.1 CPU s and the broker 0.06 instead of 0.14 cores (one run
  each). aiokafka compresses lz4 at its high-compression level (no setting): ~220 MB/s on this machine's
  cores, decompression ~3.5 GB/s. A topic whose producers compress with any codec Kafka has is read alike;
- :func:`fit_dead_letter` is the last resort for a cluster that still refuses (a topic created by someone
  else with a lower limit): the dead letter is delivered with the first bytes of the original and headers
  giving its full size and SHA-256, instead of being lost.
"""

from __future__ import annotations

import hashlib

from streams.contract.envelope import MAX_MESSAGE_BYTES

TOPIC_MAX_BYTES = 8 * 1024 * 1024
HEADROOM = 256 * 1024  # headers (reasons, positions) and the record batch's own overhead
PRODUCER_MAX_REQUEST_BYTES = MAX_MESSAGE_BYTES + HEADROOM
TOPIC_CONFIG = {"max.message.bytes": str(TOPIC_MAX_BYTES)}
TELEMETRY_COMPRESSION = "lz4"  # aiokafka's compression_type for producers of telemetry

Headers = list[tuple[str, bytes]]


def fit_dead_letter(original: bytes, headers: Headers, limit: int) -> tuple[bytes, Headers]:
    """``original`` and ``headers`` as they are when they fit in ``limit`` bytes; else a prefix of the original
    that fits, with ``driftlog.truncated`` (the original size) and ``driftlog.sha256`` headers added."""
    header_bytes = sum(len(k) + len(v) for k, v in headers)
    if len(original) + header_bytes + 1024 <= limit:
        return original, headers
    extra = [
        ("driftlog.truncated", str(len(original)).encode()),
        ("driftlog.sha256", hashlib.sha256(original).hexdigest().encode()),
    ]
    room = max(0, limit - header_bytes - sum(len(k) + len(v) for k, v in extra) - 4096)
    return original[:room], [*headers, *extra]
