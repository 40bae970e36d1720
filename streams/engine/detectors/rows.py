"""Per-series state as numpy rows that grow: a series added to many does not copy every row.

A detector's arrays are views of a buffer with room for more rows; a new series takes a row of the room, and
only a full buffer is copied (into one an eighth larger). Rows of the room are zeros never written, which
stay virtual memory until a series takes them. With a copy at every call (``np.vstack``), the few series a
job adds at its close (the last roll-ups) held each array twice at the close's peak (~30 MB an array at 16k
ranks).
"""

from __future__ import annotations

from typing import TypeVar

import numpy as np
import numpy.typing as npt

T = TypeVar("T", bound=np.generic)
ROOM = 8  # a new buffer has room for 1/ROOM more rows


def with_rows(a: npt.NDArray[T], count: int, fill: npt.ArrayLike = 0) -> npt.NDArray[T]:
    """``a`` with ``count`` more rows of ``fill`` (a value, or one per row) after its own: a longer view of
    its buffer when it has room (``a`` is then no longer to be written), else a copy into a larger one."""
    n = a.shape[0]
    buffer = a.base
    if not (isinstance(buffer, np.ndarray) and _prefix(a, buffer) and buffer.shape[0] >= n + count):
        buffer = np.zeros((n + count + (n + count) // ROOM, *a.shape[1:]), a.dtype)
        buffer[:n] = a
    out: npt.NDArray[T] = buffer[: n + count]
    out[n:] = fill
    return out


def _prefix(a: npt.NDArray[T], buffer: npt.NDArray[T]) -> bool:
    """Whether ``a`` is the first rows of ``buffer`` (as :func:`with_rows` made it)."""
    return (
        buffer.base is None
        and buffer.dtype == a.dtype
        and buffer.shape[1:] == a.shape[1:]
        and buffer.ctypes.data == a.ctypes.data
        and a.flags.c_contiguous
    )
