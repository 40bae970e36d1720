"""What a CPU (gloo) PyTorch trace says about communication, where NCCL's ``Collective name`` arguments and
``record_param_comms`` ops are absent: the c10d dispatcher ops (``c10d::allreduce_``, ``c10d::send``,
``c10d::recv_``, ...), the ``gloo:<op>`` annotations that last until the transfer completed, and the rank's
place in the job from the process groups' descriptions (``pg_config[].pg_desc``).

- p2p: gloo annotates the wait on the training thread, starting inside the c10d op; the op's span is
  extended to the annotation's end. A receive waits for its data (``blocking``); a lone send does not. A
  send whose annotation overlaps a receive's is half of a ``batch_isend_irecv`` pair: with the next c10d
  receive on its thread from the same peer it is read as *one* batched ``sendrecv`` span, from the send's
  start to the later of the two waits' ends (both ends of a batched exchange wait for each other; as two
  blocking spans in sequence their order would differ on the two ranks and make a cycle).
- collectives: gloo runs them on its ``pt_gloo_runloop`` threads; the k-th c10d collective (in time order)
  is matched to the next gloo collective annotation that started after it, and extended to its end.
- the peer of a send/recv is ``Concrete Inputs[2]`` (recorded with ``record_shapes``), a rank of the op's
  group (global for the default group); autograd's ``Sequence number`` is not the collective's sequence.
"""

from __future__ import annotations

import bisect
import contextlib
import re
from dataclasses import dataclass
from typing import Any

C10D_PREFIX = "c10d::"
C10D_OPS = {
    "allreduce_": "allreduce", "allreduce_coalesced_": "allreduce", "_allgather_base_": "allgather",
    "allgather_": "allgather", "allgather_coalesced_": "allgather", "allgather_into_tensor_coalesced_": "allgather",
    "reduce_scatter_": "reducescatter", "_reduce_scatter_base_": "reducescatter",
    "reduce_scatter_tensor_coalesced_": "reducescatter", "broadcast_": "broadcast", "reduce_": "reduce",
    "gather_": "gather", "scatter_": "scatter", "alltoall_": "alltoall", "alltoall_base_": "alltoall",
    "barrier": "barrier", "send": "send", "recv_": "recv", "recv_any_source_": "recv",
}  # fmt: skip
P2P_OPS = {"send": "Dst Rank", "recv": "Src Rank", "sendrecv": "Dst Rank"}  # the argument the peer is given as
PEER_INPUT = 2  # Concrete Inputs: tensors, group, peer, tag
DP_REDUCING = ("allreduce", "reducescatter")  # what a data-parallel group runs on gradients
GLOO_PREFIX = "gloo:"
PAIR_NEIGHBOURS = 2  # annotations either side of a send's where its batched receive may be
GLOO_P2P = {"send": "gloo:send", "recv": "gloo:recv"}
RUNLOOP = "pt_gloo_runloop"
DP_DESC = re.compile(r"^DATA_PARALLEL_GROUP")
PP_DESC = re.compile(r"^PIPELINE_MODEL_PARALLEL_GROUP")
BLOCKING = "driftlog:blocking"  # meta key: the span's duration includes the wait for its peer


def collective(name: Any) -> str | None:
    """The collective of a ``c10d::`` op (``allreduce``, ``send``, ...), or None."""
    if type(name) is not str or not name.startswith(C10D_PREFIX):
        return None
    return C10D_OPS.get(name[len(C10D_PREFIX) :])


@dataclass(frozen=True)
class Layout:
    """The rank's place in the job, from the descriptions of its process groups."""

    dp_group: str = ""  # pg_name of its data-parallel group
    coords: tuple[tuple[str, int], ...] = ()  # ("pp", i), ("dp", j): op columns

    @classmethod
    def of(cls, pg_config: Any, rank: int) -> Layout:
        mine = [
            pg for pg in (pg_config if isinstance(pg_config, list) else [])
            if type(pg) is dict and isinstance(pg.get("ranks"), list) and rank in pg["ranks"]
            and not str(pg.get("pg_desc", "")).upper().endswith("_GLOO")  # not a gloo twin of a NCCL group
        ]  # fmt: skip
        dp = _first(mine, DP_DESC)
        pp = _first(mine, PP_DESC)
        coords = [(key, pg["ranks"].index(rank)) for key, pg in (("pp", pp), ("dp", dp)) if pg is not None]
        return cls(str(dp["pg_name"]) if dp is not None and "pg_name" in dp else "", tuple(coords))


def _first(groups: list[dict[str, Any]], desc: re.Pattern[str]) -> dict[str, Any] | None:
    """The group whose description is exactly the pattern's name, else the first that starts with it."""
    found = [g for g in groups if desc.match(str(g.get("pg_desc", "")))]
    exact = [g for g in found if str(g.get("pg_desc")) == desc.pattern.lstrip("^")]
    return next(iter(exact or found), None)


@dataclass(frozen=True)
class Wait:
    """What gloo annotated for one c10d op."""

    end: float  # µs: the end of the wait
    blocking: bool  # whether the span waits for its peer
    batched_with: dict[str, Any] | None = None  # a send's receive in one batch_isend_irecv


def waits(ops: list[dict[str, Any]], gloo: list[dict[str, Any]], runloop: set[Any]) -> dict[int, Wait]:
    """``id(c10d op)`` -> the wait gloo annotated for it (a batched send: with its receive)."""
    out: dict[int, Wait] = {}
    on_thread: dict[tuple[Any, Any], list[dict[str, Any]]] = {}
    async_ops: list[dict[str, Any]] = []
    for a in sorted(gloo, key=lambda a: a["ts"]):
        if a.get("tid") in runloop:
            if a["name"] not in GLOO_P2P.values():
                async_ops.append(a)
        else:
            on_thread.setdefault((a.get("pid"), a.get("tid")), []).append(a)
    used: set[int] = set()
    k = 0
    in_order = sorted((e for e in ops if collective(e.get("name")) is not None), key=lambda e: e["ts"])
    batched_send: dict[tuple[Any, Any], dict[str, Any]] = {}  # thread -> its send waiting for its receive
    for e in in_order:
        kind = collective(e["name"])
        if kind in GLOO_P2P:
            thread = (e.get("pid"), e.get("tid"))
            own = on_thread.get(thread, [])
            wait = _inside(own, e, GLOO_P2P[kind], used)
            send = batched_send.pop(thread, None)
            if wait is None:
                continue
            out[id(e)] = Wait(wait["ts"] + wait["dur"], kind == "recv" or _pairs_with_a_recv(own, wait))
            if kind == "send" and out[id(e)].blocking:
                batched_send[thread] = e
            elif kind == "recv" and send is not None and peer(send) == peer(e) is not None:
                out[id(send)] = Wait(max(out[id(send)].end, out[id(e)].end), True, e)
            continue
        while k < len(async_ops) and async_ops[k]["ts"] < e["ts"]:
            k += 1  # an annotation of a collective launched before the trace (or not traced)
        if k < len(async_ops):
            out[id(e)] = Wait(async_ops[k]["ts"] + async_ops[k]["dur"], False)
            k += 1
    return out


def peer(op: dict[str, Any]) -> int | None:
    """The peer a c10d send/recv names (``Concrete Inputs``, with ``record_shapes``), or None."""
    args = op.get("args")
    inputs = args.get("Concrete Inputs") if type(args) is dict else None
    if isinstance(inputs, list) and len(inputs) > PEER_INPUT:
        with contextlib.suppress(TypeError, ValueError):
            return int(inputs[PEER_INPUT])
    return None


def _inside(annotations: list[dict[str, Any]], op: dict[str, Any], name: str, used: set[int]) -> dict[str, Any] | None:
    """The first unused annotation ``name`` that starts during ``op``."""
    i = bisect.bisect_left(annotations, op["ts"], key=lambda a: a["ts"])
    for a in annotations[i:]:
        if a["ts"] > op["ts"] + op["dur"]:
            return None
        if a["name"] == name and id(a) not in used:
            used.add(id(a))
            return a
    return None


def _pairs_with_a_recv(annotations: list[dict[str, Any]], send: dict[str, Any]) -> bool:
    """Whether a ``gloo:recv`` on the thread overlaps the send's wait (a batched isend/irecv pair). The
    receive of a pair is posted right before or after the send: its neighbours in time are enough to look at."""
    i = bisect.bisect_left(annotations, send["ts"], key=lambda a: a["ts"])
    return any(
        b["name"] == GLOO_P2P["recv"] and b["ts"] < send["ts"] + send["dur"] and send["ts"] < b["ts"] + b["dur"]
        for b in annotations[max(0, i - PAIR_NEIGHBOURS) : i + PAIR_NEIGHBOURS + 1]
    )


def meta(args: dict[str, Any], kind: str, layout: Layout) -> dict[str, Any]:
    """The communication arguments of a c10d op, in the names the NCCL path reads."""
    out: dict[str, Any] = {"Collective name": kind}
    if kind in P2P_OPS:
        given = peer({"args": args})
        if given is not None:
            out[P2P_OPS[kind]] = given
    elif kind in DP_REDUCING and layout.dp_group:
        out["Process Group Name"] = layout.dp_group
    return out
