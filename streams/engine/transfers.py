"""Point-to-point transfers of one step: which spans are transfers, in which direction, which of them
block their rank, and which two spans are the two ends of one transfer.

The contract's op field ``p2p`` declares the direction (``send``, ``recv`` or ``sendrecv``: a batched
isend/irecv that both sends to and receives from ``peer``); ``''`` (and producers that predate the field)
means "infer it from ``op``": ``send``/``isend`` send and ``recv``/``irecv`` receive when the span is of
class comm. A span is a transfer only with ``peer >= 0`` and when it is not a collective member.
``blocking`` says the rank waits inside the span until the transfer completes; ``sendrecv`` always blocks.

Pairing: a span pairs with its peer's mirrored span (a send with the peer's recv, a sendrecv with the
peer's sendrecv) of the same microbatch and the same *occurrence*: its place, by midpoint (as the rank's
program is ordered, robust to jitter at span boundaries), among the spans of
the same (rank, peer, direction, microbatch). Microbatch may be -1 (unknown): then the order of occurrence
within the step alone pairs them. Pairing uses no time threshold, so jitter cannot change it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from streams.engine.codes import Codebook, Ints, classes, radix_key

SEND_OPS = ("send", "isend")
RECV_OPS = ("recv", "irecv")
NONE, TO, FROM, BOTH = -1, 0, 1, 2  # direction of a transfer seen from its rank: sends, receives, both
INFER = -2  # a declared direction of '': the op's
DECLARED = {"send": TO, "recv": FROM, "sendrecv": BOTH}

Mask = npt.NDArray[np.bool_]


def inferred(ops: Codebook) -> Ints:
    """Per op code: the direction its name implies for a span of class comm (a lookup, not a search per span).
    Made once per codebook size (a codebook's names only grow: the same size, the same names) and kept with
    the codebook's own key, read only (every step of a job asks)."""
    kept = _INFERRED.get(id(ops))
    if kept is not None and kept[0] is ops and len(kept[1]) == len(ops.names):
        return kept[1]
    out = np.full(len(ops.names), NONE, np.int64)
    out[ops.of(SEND_OPS)] = TO
    out[ops.of(RECV_OPS)] = FROM
    out.flags.writeable = False
    if len(_INFERRED) >= _MAX_INFERRED:
        _INFERRED.clear()
    _INFERRED[id(ops)] = (ops, out)
    return out


_INFERRED: dict[int, tuple[Codebook, Ints]] = {}  # id(codebook) -> (it, its directions) (it held: no id reused)
_MAX_INFERRED = 64  # (a few jobs' codebooks; more are made again)


def declared(c: Mapping[str, npt.NDArray[Any]]) -> Ints | None:
    """Per span: the direction its ``p2p`` declares (NONE for a name it does not know), or INFER for ``''``
    (the default: from op); None when no span declares one."""
    names = c.get("p2p")
    if names is None:
        return None
    code = classes(np.asarray(names, dtype=object), _DECLARING)
    if (code == 1).all():
        return None
    out: Ints = _DIRECTION[code]  # (each name looked up once in the native core, not in a Python loop)
    return out


_DECLARING = ("", *DECLARED)  # a p2p name's class: 1 + its index here, 0 for a name it does not know
_DIRECTION = np.array([NONE, INFER, *DECLARED.values()], np.int64)  # per class: the direction declared


def directed(op: Ints, inferred: Ints, declared: Ints | None, comm: Mask, eligible: Mask) -> Ints:
    """Per span: TO, FROM, BOTH, or NONE for a span that is not a transfer; from the op codes, the direction
    per op code (:func:`inferred`), the declared ones (:func:`declared`) and which spans may be transfers
    (``eligible``: with a peer)."""
    out = np.where(comm, inferred[op], NONE)
    if declared is not None:
        out = np.where(declared != INFER, declared, out)
    return np.where(eligible, out, NONE).astype(np.int64)


def blocked(direction: npt.NDArray[np.integer[Any]], flag: Mask | None) -> Mask:
    """Per span: a transfer during which its rank waits (its declared ``blocking`` flag, or a ``sendrecv``;
    ``flag`` None: none declared)."""
    flag = np.zeros(len(direction), bool) if flag is None else flag
    out: Mask = (direction >= 0) & (flag | (direction == BOTH))
    return out


def partners(rank: Ints, peer: Ints, mb: Ints, midpoint: npt.NDArray[np.float64], direction: Ints) -> Ints:
    """Per span: the row of the other end of its transfer, or -1 (not a transfer, or its peer's end is not
    in the step). One span pairs with at most one other."""
    return partners_in_order(rank, peer, mb, midpoint, direction)[0]


def partners_in_order(
    rank: Ints, peer: Ints, mb: Ints, midpoint: npt.NDArray[np.float64], direction: Ints
) -> tuple[Ints, Ints, Mask]:
    """:func:`partners`, and the order by midpoint that decided them: the transfer rows as sorted, and per
    row but the last whether the next one is of the same end of the same transfer (the same pairing holds
    as long as each such pair keeps its order: the earlier row first on a tie)."""
    out = np.full(len(rank), -1, np.int64)
    t = np.flatnonzero((direction >= 0) & (rank != peer))  # a rank does not transfer to itself
    if len(t) < 2:
        return out, t, np.zeros(max(len(t) - 1, 0), bool)
    r, p, m, d = rank[t], peer[t], mb[t], direction[t]
    both = d == BOTH
    src = np.where(both, np.minimum(r, p), np.where(d == FROM, p, r))
    dst = np.where(both, np.maximum(r, p), np.where(d == FROM, r, p))
    side = np.where(both, (r > p).astype(np.int64), (d == FROM).astype(np.int64))  # which end: 0 or 1
    # one transfer's two ends share (kind, src, dst, microbatch); within it, each end's spans in order
    key = radix_key(both.astype(np.int64), src, dst, m)
    order = np.lexsort((midpoint[t], side, key))
    k, s = key[order], side[order]
    first = np.flatnonzero(np.r_[True, k[1:] != k[:-1]])
    group = np.repeat(np.arange(len(first)), np.diff(np.r_[first, len(t)]))
    ends0 = np.bincount(group, s == 0)[group].astype(np.int64)  # spans of end 0 in the element's group
    size = np.diff(np.r_[first, len(t)])[group]
    occurrence = np.arange(len(t)) - first[group] - np.where(s == 1, ends0, 0)
    pair = np.flatnonzero((s == 0) & (occurrence < size - ends0))
    a, b = t[order[pair]], t[order[first[group[pair]] + ends0[pair] + occurrence[pair]]]
    out[a], out[b] = b, a
    return out, t[order], (k[1:] == k[:-1]) & (s[1:] == s[:-1])
