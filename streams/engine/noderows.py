"""A step's spans in node order, and what decides it (:func:`stepgraph.build`): per span its transfer direction,
whether it blocks its rank, its role and its collective sequence number counted from its group's first; the
rows of its program spans by rank and midpoint, then its asynchronous transfers by rank, direction,
microbatch, peer and start.

Each step's columns come through here before its kept layout is looked up, so it is one native pass
(native/src/layouts.rs, ``step_rows``) when the columns are as that reads them, else :func:`definition`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from audit import native
from streams.engine import layouts, transfers
from streams.engine.codes import Floats, Ints
from streams.engine.transfers import FROM

native_rows = hasattr(native.core, "step_rows")

Mask = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class Rows:
    """Per span: ``direction`` (int8: TO, FROM, BOTH or NONE), ``blocks``, ``role`` (op class, blocking and
    direction, as :func:`stepgraph._edges` reads it) and ``per_group``; ``order``: the rows in node order, the
    first ``n_chain`` of them program spans."""

    direction: Ints  # (int8: typed as the other columns)
    blocks: Mask
    role: Ints
    per_group: Ints
    order: Ints
    n_chain: int


def rows(
    start: Floats, end: Floats, ints: tuple[Ints, ...], inferred: Ints, declared: Ints | None, flag: Mask | None
) -> Rows:
    """A step's :class:`Rows` from its times (relative), ``ints`` (rank, microbatch, peer, seq, op code, group
    code and op class: 1 comm, 2 sync, 3 compute, 0 other), the direction per op code and the declared
    directions and blocking flags (:mod:`transfers`)."""
    if native_rows and _aligned(start, end, inferred, declared, flag, *ints):
        assert native.core is not None
        n = len(start)
        out = (np.empty(n, "int8"), np.empty(n, bool), np.empty(n, np.int64), np.empty(n, np.int64))
        order = np.empty(n, np.int64)
        n_chain = native.core.step_rows(
            start, end, list(ints), inferred, declared, None if flag is None else flag.view(np.uint8),
            (out[0], out[1].view(np.uint8), out[2], out[3], order),
        )  # fmt: skip
        if n_chain is not None:
            return Rows(*out, order, int(n_chain))
    return definition(start, end, ints, inferred, declared, flag)


def _aligned(*columns: npt.NDArray[Any] | None) -> bool:
    """Whether the native pass can read every column (its buffers refuse misaligned memory, which a column cut
    from a packed record could be); else the definition answers."""
    return all(c is None or c.flags.aligned for c in columns)


def definition(
    start: Floats, end: Floats, ints: tuple[Ints, ...], inferred: Ints, declared: Ints | None, flag: Mask | None
) -> Rows:
    """:func:`rows` as defined."""
    rank, mb, peer, seq, op, grp, op_class = ints
    comm, sync, compute = op_class == 1, op_class == 2, op_class == 3
    direction = transfers.directed(op, inferred, declared, comm, ~member(grp, seq, op_class) & (peer >= 0))
    direction = direction.astype("int8")
    blocks = transfers.blocked(direction, flag)
    asynchronous = (direction >= 0) & ~blocks
    ci = np.flatnonzero(~asynchronous)
    ci = layouts.lexsorted(ci, (rank,), start + end)  # by midpoint: robust to rounding at span boundaries
    pi = np.flatnonzero(asynchronous)
    pi = layouts.lexsorted(pi, (rank, (direction == FROM).astype(np.int64), mb, peer), start)
    role = comm + 2 * sync + 4 * compute + 8 * blocks + 16 * (direction + 1)  # see stepgraph._edges
    return Rows(direction, blocks, role, per_group(seq, grp), np.concatenate([ci, pi]), len(ci))


def member(grp: Ints, seq: Ints, op_class: Ints) -> Mask:
    """Per span: a member of a collective (a group, a sequence number, of class comm or sync)."""
    out: Mask = (grp > 0) & (seq >= 0) & ((op_class == 1) | (op_class == 2))
    return out


def per_group(seq: Ints, grp: Ints) -> Ints:
    """Collective sequence numbers counted from each group's first in the step (which instances are the
    same collective, as in the step before, whose numbers were lower); negative ones as they are."""
    numbered = seq >= 0
    if not numbered.any():
        return seq
    first = np.full(int(grp.max()) + 1, int(seq.max()), np.int64)
    np.minimum.at(first, grp[numbered], seq[numbered])
    return np.where(numbered, seq - first[grp], seq)
