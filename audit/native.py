"""driftlog's native core (``native/``, Rust: the ``driftlog_native`` extension) when it is built, and the
Arrow buffers it reads.

``make`` builds it where Rust's cargo is installed. Without it, or with ``DRIFTLOG_NATIVE=0`` in the
environment, every caller uses its definition instead: the Python hash chain (audit/chain.py) and the SQL
classification (audit/classify.py), with the same results, more slowly.
"""

from __future__ import annotations

import os
from types import ModuleType
from typing import Any

import pyarrow as pa


def _load() -> ModuleType | None:
    if os.environ.get("DRIFTLOG_NATIVE", "1") == "0":  # the definitions on purpose (tests, comparisons)
        return None
    try:
        import driftlog_native
    except ImportError:  # not built (no cargo)
        return None
    return driftlog_native


core = _load()


def int64s(array: pa.Array) -> tuple[Any, int]:
    """An int64 array without nulls as (data buffer, array offset)."""
    return _bytes(array.buffers()[1]), array.offset


def binaries(array: pa.Array) -> tuple[Any, Any, Any, int]:
    """A binary (or binary-castable) array as (offsets, data, validity or None, array offset)."""
    if array.type != pa.binary():
        array = array.cast(pa.binary())
    validity, offsets, data = array.buffers()
    return _bytes(offsets), _bytes(data), _bytes(validity) if array.null_count else None, array.offset


def _bytes(buffer: pa.Buffer | None) -> memoryview:
    """A buffer's bytes as unsigned chars (pyarrow exports signed ones), without a copy."""
    return memoryview(b"") if buffer is None else memoryview(buffer).cast("B")
