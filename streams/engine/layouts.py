"""The layout of a step's graph kept across steps: what :func:`stepgraph.build` derives from the step's
identity columns, so that the steps of a job (the same spans in the same roles, step after step) are not
laid out again each time.

A step's spans are put in node order first (each rank's program spans by midpoint, then the asynchronous
transfers by rank, direction, microbatch, peer and start). A layout is reused for a step whose identity
columns in that order equal the layout's (rank, microbatch, peer, collective sequence number counted from
the group's first in the step, op, group, role: op class, blocking and transfer direction; dp, pp, tp:
everything but times), and whose times pair the transfers' ends as the layout's did (each end of a
transfer in order of midpoint, ties by input row, as the stable sort does): then the same nodes, barriers
and partners follow. A step whose times reorder its spans or pair its transfers otherwise is laid out
anew (several layouts of one identity may be kept). Jitter that keeps the orders keeps the layout.

The edges that times decide (an asynchronous send's launch after the span that had ended by then, the
span that consumes a receive) are found again on every step. When all edges equal those of the graph last
built on the layout, so do its CSR form, node kinds, signature and schedule, which are reused; else that
step's graph is built from its own edges (and kept as the layout's latest).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from audit import native
from streams.engine.codes import Floats, Ints

if TYPE_CHECKING:
    from streams.engine.draft import Packed, Plan
    from streams.engine.stepgraph import Schedule

native_layouts = hasattr(native.core, "same_in_order")  # (the same comparison from native/src/layouts.rs)
native_sorts = hasattr(native.core, "sorted_rows")
KEEP = 16  # layouts kept (a job has a few structures; several jobs share a worker)
KEEP_NODES = 1 << 20  # and span nodes over all kept layouts (~200 bytes each, ~35 more planned), beyond the latest
# a layout keeps its plan (what a step's draft reads that the layout decides) up to this many nodes: a larger
# one makes it again for each step, a few ms beside the step's own work, and the memory of a job of many
# thousand ranks stays its steps' (16k ranks: ~30 MB less)
PLAN_NODES = 1 << 18

Mask = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class Order:
    """Consecutive nodes of a sorted sequence that must stay in order (``a`` before ``b``)."""

    a: Ints
    b: Ints

    @classmethod
    def of(cls, nodes: Ints, same: Mask) -> Order:
        """``nodes`` as sorted; ``same``: per node but the last, whether the next one was sorted by time
        against it (the same end of the same transfer) rather than placed by identity columns."""
        return cls(frozen(nodes[:-1][same]), frozen(nodes[1:][same]))

    def kept(self, order: Ints, values: Floats) -> bool:
        """Whether ``values`` (per row; ``order``: the rows of the nodes) sort these nodes the same way, a
        tie by row as a stable sort breaks it (NaN: never)."""
        a, b = order[self.a], order[self.b]
        va, vb = values[a], values[b]
        return bool(((va < vb) | ((va == vb) & (a < b))).all())


@dataclass
class Edges:
    """A graph built on a layout: its edges, and what they decide (read-only arrays, shared by the step
    graphs that reuse them)."""

    src: Ints
    dst: Ints
    kind: Ints
    indptr: Ints
    indices: Ints
    with_predecessor: Ints  # span nodes with a predecessor (their floor is -inf)
    signature: bytes
    schedule: Schedule

    def same(self, src: Ints, dst: Ints) -> bool:
        return np.array_equal(self.src, src) and np.array_equal(self.dst, dst)


@dataclass
class Layout:
    """The identity-decided part of a step's graph (see the module's note), by node: spans come first, in
    node order (each rank's program spans by midpoint, then the asynchronous transfers)."""

    identity: tuple[Ints, ...]  # identity columns, per span node (those of the graph's: views of ``per_node``)
    by_midpoint: Order  # the span nodes whose order paired the transfers' ends
    paired: Ints  # span nodes with a transfer partner
    partner: Ints  # per paired node: its partner's node
    members: Ints  # chain positions of barrier members
    barrier_of: Ints  # per member: its barrier
    per_node: dict[str, Ints]  # node columns (but ``span``, the rows, which are each step's own)
    edges: Edges | None = None
    plan: Plan | Packed | None = None  # what a step's draft reads that the layout decides (made once)

    @property
    def spans(self) -> int:
        return len(self.identity[0])

    def partners(self, order: Ints, start: Floats, end: Floats) -> Ints | None:
        """Per span row (``order``: the rows in node order), the row of its transfer's other end, or -1: the
        layout's pairs, when the step's times keep the order that paired them (else None)."""
        if not self.by_midpoint.kept(order, (start + end) / 2):
            return None
        out = np.full(len(start), -1, "int32" if len(start) < 2**31 else "int64")  # (rows: read by index)
        out[order[self.paired]] = order[self.partner]
        return out


_kept: list[Layout] = []  # most recently used last


def find(columns: Sequence[Ints], order: Ints, start: Floats, end: Floats) -> tuple[Layout, Ints] | None:
    """A kept layout of these identity columns (per row; ``order``: the rows in node order) whose pairing
    the step's times keep, and the partner rows it gives (:meth:`Layout.partners`), if any."""
    row: list[Ints] = []
    for i in range(len(_kept) - 1, -1, -1):
        layout = _kept[i]
        if (
            len(layout.identity) == len(columns)
            and layout.spans == len(order)
            and _same(columns, order, layout.identity, row)
        ):
            partner = layout.partners(order, start, end)
            if partner is not None:
                _kept.append(_kept.pop(i))
                return layout, partner
    return None


def _same(columns: Sequence[Ints], order: Ints, kept: Sequence[Ints], row: list[Ints]) -> bool:
    """Whether ``columns`` (per row) in node order (``order``: the rows) equal the ``kept`` ones: by the
    native core when it can read them, else each column put in node order in turn (``row``: the one buffer
    they are put in, made once; a step's identity in node order is not made to be compared)."""
    if native_layouts:
        assert native.core is not None
        same = native.core.same_in_order(list(columns), order, list(kept))
        if same is not None:
            return bool(same)
    if not row:
        row.append(np.empty(len(order), np.int64))
    return all(np.array_equal(np.take(c, order, out=row[0]), k) for c, k in zip(columns, kept, strict=True))


def lexsorted(rows: Ints, keys: Sequence[Ints], time: Floats) -> Ints:
    """``rows`` (ascending) sorted by the integer columns ``keys`` (per row, the first first), then by ``time``
    (per row), ties in row order (``np.lexsort``'s order): by the native core when it is built."""
    if native_sorts:
        assert native.core is not None
        out = np.empty(len(rows), np.int64)
        native.core.sorted_rows(rows, list(keys), time, out)
        return out
    return rows[np.lexsort((time[rows], *(k[rows] for k in reversed(keys))))]


def keep(layout: Layout) -> None:
    """Keep ``layout`` as the most recently used (the least recently used beyond ``KEEP`` layouts or
    ``KEEP_NODES`` nodes are dropped)."""
    kept, nodes = [layout], layout.spans
    for other in reversed(_kept):
        nodes += other.spans
        if other is not layout and len(kept) < KEEP and nodes <= KEEP_NODES:
            kept.append(other)
    _kept[:] = kept[::-1]


def frozen(a: Ints) -> Ints:
    """``a``, read-only (shared between step graphs)."""
    a.setflags(write=False)
    return a
