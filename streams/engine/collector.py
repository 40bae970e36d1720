"""Python's cyclic garbage collector held off while a large structure is built.

A job's operator graph (networkx) is a dict per node and per edge: at 16k ranks ~100k relations arrive in one
topology batch. Built with the collector running, each 25 % growth of the long-lived objects sets off a full
collection, which walks every object of the process: three of them while a 16k-rank job's graph was built
(0.1 s each), one left after it. Held off while the graph is built, the new objects are walked once or twice
afterwards instead. Nothing is collected later than it would be by reference counting: only cycles wait, for
the end of the ``paused`` block."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused() -> Iterator[None]:
    """No cyclic collection inside the block; the collector is as it was after it (so blocks nest)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
