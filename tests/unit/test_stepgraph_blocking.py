"""Point-to-point transfers in the step graph: declared or inferred direction, pairing by order when the
microbatch is unknown, and blocking (batched) transfers whose span includes waiting for the peer."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.engine.stepgraph import BLOCKING, MEMBER, RECV, SEND, Codebook, StepGraph, build
from streams.engine.transfers import BOTH, FROM, INFER, NONE, TO, declared, directed, inferred, partners
from streams.formats.timestamps import as_exported

FIELDS = ("rank", "pp", "op", "op_class", "start", "duration", "microbatch", "peer", "p2p", "blocking")


def columns(*rows: tuple[Any, ...]) -> dict[str, Any]:
    c: dict[str, Any] = {f: [r[i] for r in rows] for i, f in enumerate(FIELDS)}
    c["dp"], c["tp"] = [0] * len(rows), [0] * len(rows)
    c["group"], c["seq"] = [""] * len(rows), [-1] * len(rows)
    return {k: np.array(v, dtype=object if isinstance(v[0], str) else None) for k, v in c.items()}


def graph(c: dict[str, Any]) -> StepGraph:
    return build(c, Codebook(), Codebook(), {})


def two_stages(c0: float, c1: float, transfer: float, after: float) -> dict[str, Any]:
    """Stage 0 (rank 0) and stage 1 (rank 1) compute, then exchange in one batched blocking span each, then
    compute again. The exchange starts when the later rank arrives and takes ``transfer``."""
    meet = max(c0, c1)
    return columns(
        (0, 0, "forward", "compute", 0.0, c0, 0, -1, "", False),
        (1, 1, "forward", "compute", 0.0, c1, 0, -1, "", False),
        (0, 0, "batch_p2p", "comm", c0, meet + transfer - c0, -1, 1, "sendrecv", True),
        (1, 1, "batch_p2p", "comm", c1, meet + transfer - c1, -1, 0, "sendrecv", True),
        (0, 0, "backward", "compute", meet + transfer, after, 0, -1, "", False),
        (1, 1, "backward", "compute", meet + transfer, after, 0, -1, "", False),
    )


def ops_of(g: StepGraph, c: dict[str, Any], name: str) -> npt.NDArray[np.bool_]:
    """Per node: whether it is a span of op ``name``."""
    return np.array([bool(s >= 0 and c["op"][s] == name) for s in g.span])


@settings(max_examples=50, deadline=None)
@given(c0=st.floats(0.01, 5.0), c1=st.floats(0.01, 5.0), transfer=st.floats(0.0, 1.0), after=st.floats(0.01, 2.0))
def test_a_batched_blocking_exchange_waits_for_the_peer_and_healing_the_peer_shortens_the_waiter(
    c0: float, c1: float, transfer: float, after: float
) -> None:
    c = two_stages(c0, c1, transfer, after)
    g = graph(c)
    exchange = ops_of(g, c, "batch_p2p")
    assert set(g.kind[exchange].tolist()) == {BLOCKING}
    assert g.intrinsic[exchange] == pytest.approx([transfer, transfer], abs=1e-9)  # own time, not the wait
    observed = max(c0, c1) + transfer + after
    healed = g.intrinsic.copy()
    healed[ops_of(g, c, "forward")] = min(c0, c1)  # heal the slower rank's compute
    ends = g.evaluate(np.stack([g.intrinsic, healed])).max(axis=1)
    assert ends == pytest.approx([observed, min(c0, c1) + transfer + after], rel=1e-9, abs=1e-9)


def test_a_blocking_span_whose_peer_is_untraced_counts_a_typical_transfer_and_waits_for_the_rest() -> None:
    c = columns(
        (0, 0, "forward", "compute", 0.0, 1.0, 0, -1, "", False),
        (1, 1, "forward", "compute", 0.0, 2.0, 0, -1, "", False),
        (0, 0, "batch_p2p", "comm", 1.0, 1.5, -1, 1, "sendrecv", True),  # traced pair: own time 0.5
        (1, 1, "batch_p2p", "comm", 2.0, 0.5, -1, 0, "sendrecv", True),
        (1, 1, "send_forward", "comm", 2.5, 3.0, 1, 9, "send", True),  # rank 9 is not traced
        (1, 1, "backward", "compute", 5.5, 1.0, 0, -1, "", False),
    )
    g = graph(c)
    lone = ops_of(g, c, "send_forward")
    assert g.intrinsic[lone] == pytest.approx([0.5])  # the typical transfer, not the 3 s span
    assert g.evaluate(g.intrinsic[None, :]).max() == pytest.approx(6.5)  # the wait is kept, as a wait
    healed = g.intrinsic.copy()
    healed[ops_of(g, c, "forward")] = 0.5  # nothing traced explains the wait: healing cannot remove it
    assert g.evaluate(healed[None, :]).max() == pytest.approx(6.5)


def test_a_blocking_recv_waits_for_an_asynchronous_send_to_start() -> None:
    c = columns(
        (0, 0, "forward", "compute", 0.0, 2.0, 0, -1, "", False),
        (0, 0, "isend", "comm", 2.0, 0.3, 0, 1, "", False),
        (1, 1, "recv", "comm", 0.5, 1.8, 0, 0, "", True),
        (1, 1, "forward", "compute", 2.3, 1.0, 0, -1, "", False),
    )
    g = graph(c)
    recv = ops_of(g, c, "recv")
    assert g.kind[recv].tolist() == [BLOCKING]
    assert g.intrinsic[recv] == pytest.approx([0.3])  # from the send's start to the recv's end
    assert g.evaluate(g.intrinsic[None, :]).max() == pytest.approx(3.3)


def test_without_microbatches_transfers_pair_by_order_of_occurrence() -> None:
    c = columns(
        (0, 0, "send", "comm", 1.0, 0.2, -1, 1, "", False),
        (0, 0, "send", "comm", 3.0, 0.2, -1, 1, "", False),
        (1, 1, "recv", "comm", 0.5, 0.7, -1, 0, "", False),
        (1, 1, "recv", "comm", 2.0, 1.2, -1, 0, "", False),
    )
    rank, peer, mb = (np.asarray(c[k], np.int64) for k in ("rank", "peer", "microbatch"))
    d = np.array([TO, TO, FROM, FROM])
    assert partners(rank, peer, mb, np.asarray(c["start"], float), d).tolist() == [2, 3, 0, 1]
    g = graph(c)
    assert sorted(g.kind[g.span >= 0].tolist()) == [SEND, SEND, RECV, RECV]  # (and a launch node per send)
    ends = g.evaluate(g.intrinsic[None, :])[0]
    assert sorted((ends[g.kind == RECV] + g.t0).tolist()) == pytest.approx([1.2, 3.2])  # each with its send


def test_a_sendrecv_pairs_only_with_its_peers_sendrecv_and_never_with_itself() -> None:
    rank, peer = np.array([0, 1, 2, 3]), np.array([1, 0, 2, 0])
    d = np.array([BOTH, BOTH, BOTH, TO])
    assert partners(rank, peer, np.full(4, -1), np.zeros(4), d).tolist() == [1, 0, -1, -1]


def test_the_direction_is_declared_or_inferred_from_the_op_for_old_producers() -> None:
    c = columns(
        (0, 0, "isend", "comm", 0.0, 1.0, 0, 1, "", False),  # inferred: send
        (0, 0, "irecv", "comm", 0.0, 1.0, 0, 1, "", False),  # inferred: recv
        (0, 0, "send", "compute", 0.0, 1.0, 0, 1, "", False),  # inferred only for comm spans
        (0, 0, "batch_isend_irecv", "comm", 0.0, 1.0, 0, 1, "sendrecv", True),
        (0, 0, "ncclKernel", "other", 0.0, 1.0, 0, 1, "recv", False),  # declared: any class
        (0, 0, "send", "comm", 0.0, 1.0, 0, -1, "send", False),  # no peer: not a transfer
    )
    ops = Codebook()
    op = ops.encode(c["op"])
    assert directed(op, inferred(ops), declared(c), c["op_class"] == "comm", c["peer"] >= 0).tolist() == [
        TO,
        FROM,
        NONE,
        BOTH,
        FROM,
        NONE,
    ]
    old = {k: v for k, v in c.items() if k not in ("p2p", "blocking")}
    assert directed(op, inferred(ops), declared(old), c["op_class"] == "comm", c["peer"] >= 0).tolist() == [
        TO,
        FROM,
        NONE,
        NONE,
        NONE,
        NONE,
    ]


def test_the_directions_per_op_code_follow_a_codebook_that_grows_and_are_read_only() -> None:
    ops = Codebook()
    ops.encode(np.array(["isend", "compute"], dtype=object))
    first = inferred(ops)
    assert first.tolist() == [NONE, TO, NONE] and inferred(ops) is first  # (kept: every step of a job asks)
    with pytest.raises(ValueError):
        first[0] = TO  # (shared by the steps: never written)
    ops.encode(np.array(["irecv"], dtype=object))  # a later step's new op
    assert inferred(ops).tolist() == [NONE, TO, NONE, FROM]
    other = Codebook()  # another job's codebook: its own directions
    other.encode(np.array(["irecv", "isend"], dtype=object))
    assert inferred(other).tolist() == [NONE, FROM, TO] and inferred(ops).tolist() == [NONE, TO, NONE, FROM]


def test_collective_members_stay_members_and_blocking_spans_are_not_collectives() -> None:
    c = two_stages(1.0, 2.0, 0.5, 1.0)
    c["group"] = np.array(["", "", "", "", "", ""], dtype=object)
    g = graph(c)
    assert MEMBER not in g.kind.tolist()
    assert (g.kind == BLOCKING).sum() == 2


def test_blocking_pairs_in_contradicting_orders_fall_back_to_waits_on_untraced_peers() -> None:
    # each rank exchanges with both others, in an order that cannot all have happened (a pairing cycle)
    c = columns(
        (0, 0, "forward", "compute", 0.0, 1.0, 0, -1, "", False),
        (0, 0, "x", "comm", 1.0, 1.0, -1, 1, "sendrecv", True),
        (0, 0, "x", "comm", 2.0, 1.0, -1, 2, "sendrecv", True),
        (1, 1, "x", "comm", 1.0, 1.0, -1, 2, "sendrecv", True),
        (1, 1, "x", "comm", 2.0, 1.0, -1, 0, "sendrecv", True),
        (2, 2, "x", "comm", 1.0, 1.0, -1, 0, "sendrecv", True),
        (2, 2, "x", "comm", 2.0, 1.5, -1, 1, "sendrecv", True),
    )
    g = graph(c)
    assert (g.kind == BLOCKING).sum() == 6
    assert g.evaluate(g.intrinsic[None, :]).max() == pytest.approx(g.observed_s)


def pipeline(compute: list[list[float]], transfer: float, sendrecv: bool) -> dict[str, Any]:
    """A GPipe step over len(compute) stages (one rank each) whose transfers are rendezvous: both ends start
    when the later one arrives and end ``transfer`` later. ``compute[s]``: the stage's forward then backward
    durations per microbatch. Each transfer is one blocking span on each side: a send and a recv, or, with
    ``sendrecv``, two sendrecv spans."""
    stages, half = len(compute), len(compute[0]) // 2
    programs: list[list[tuple[str, int, float]]] = []  # per rank: (op, peer, duration)
    for s in range(stages):
        prog: list[tuple[str, int, float]] = []
        for m in range(half):
            if s > 0:
                prog.append(("recv", s - 1, 0.0))
            prog.append(("forward", -1, compute[s][m]))
            if s < stages - 1:
                prog.append(("send", s + 1, 0.0))
        for m in range(half):
            if s < stages - 1:
                prog.append(("recv", s + 1, 0.0))
            prog.append(("backward", -1, compute[s][half + m]))
            if s > 0:
                prog.append(("send", s - 1, 0.0))
        programs.append(prog)
    pc, clock, rows = [0] * stages, [0.0] * stages, []
    while any(pc[r] < len(programs[r]) for r in range(stages)):
        moved = False
        for r in range(stages):
            while pc[r] < len(programs[r]):
                op, peer, dur = programs[r][pc[r]]
                if peer < 0:
                    rows.append((r, r, op, "compute", clock[r], dur, 0, -1, "", False))
                    clock[r] += dur
                elif pc[peer] < len(programs[peer]) and programs[peer][pc[peer]][1] == r:
                    meet = max(clock[r], clock[peer])
                    for a, b in ((r, peer), (peer, r)):
                        kind = "sendrecv" if sendrecv else programs[a][pc[a]][0]
                        rows.append((a, a, "p2p", "comm", clock[a], meet + transfer - clock[a], -1, b, kind, True))
                        clock[a] = meet + transfer
                    pc[peer] += 1
                else:
                    break
                pc[r] += 1
                moved = True
        assert moved, "the pipeline deadlocked"
    return columns(*rows)


@settings(max_examples=40, deadline=None)
@given(
    stages=st.integers(2, 4),
    micro=st.integers(1, 4),
    slow=st.floats(1.0, 3.0),
    transfer=st.floats(1e-3, 0.2),  # spans shorter than the jitter may swap places: their order is lost
    sendrecv=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_the_graph_of_a_rendezvous_pipeline_answers_what_if_like_running_it_again(
    stages: int, micro: int, slow: float, transfer: float, sendrecv: bool, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    base = rng.uniform(0.5, 1.5, (stages, 2 * micro))
    slowed = base.copy()
    slowed[stages // 2] *= slow  # one slow stage
    c = pipeline(slowed.tolist(), transfer, sendrecv)
    g = graph(c)
    assert g.evaluate(g.intrinsic[None, :]).max() == pytest.approx(g.observed_s, rel=1e-9)
    healed = g.intrinsic.copy()
    compute = g.span >= 0
    compute[compute] = c["op_class"][g.span[compute]] == "compute"
    healed[compute] *= (base / slowed)[g.rank[compute], _compute_index(g, c)[compute]]
    rerun = pipeline(base.tolist(), transfer, sendrecv)
    rerun_s = float((rerun["start"] + rerun["duration"]).max() - rerun["start"].min())
    assert g.evaluate(healed[None, :]).max() == pytest.approx(rerun_s, rel=1e-9)
    exported = graph(as_exported(c, 5e-6, 32.0, rng))
    assert exported.signature == g.signature
    assert exported.evaluate(exported.intrinsic[None, :]).max() == pytest.approx(exported.observed_s, rel=0.02)


def _compute_index(g: StepGraph, c: dict[str, Any]) -> npt.NDArray[np.int64]:
    """Per node: the place of a compute span among its rank's compute spans (by start)."""
    out = np.zeros(g.nodes, np.int64)
    compute = np.flatnonzero(c["op_class"] == "compute")
    for r in np.unique(c["rank"][compute]):
        rows = compute[c["rank"][compute] == r]
        rows = rows[np.argsort(c["start"][rows], kind="stable")]
        place = {int(row): i for i, row in enumerate(rows)}
        for n in np.flatnonzero(g.span >= 0):
            if int(g.span[n]) in place:
                out[n] = place[int(g.span[n])]
    return out


@settings(max_examples=50, deadline=None)
@given(c0=st.floats(0.05, 5.0), gap=st.floats(0.0, 1.0), send=st.floats(0.01, 1.0), heal=st.floats(0.0, 0.9))
def test_a_blocking_recv_of_an_asynchronous_send_moves_with_the_sender(
    c0: float, gap: float, send: float, heal: float
) -> None:
    """Rank 1 waits in a blocking receive for rank 0's asynchronous send, launched ``gap`` (host time) after
    rank 0's compute: the model reproduces the step, and a shorter compute on rank 0 ends the receive as
    much earlier (the receive is not pinned to the send's observed start)."""
    c = columns(
        (0, 0, "forward", "compute", 0.0, c0, 0, -1, "", False),
        (0, 0, "send", "comm", c0 + gap, send, -1, 1, "send", False),
        (1, 1, "recv", "comm", 0.0, c0 + gap + send, -1, 0, "recv", True),
        (1, 1, "forward", "compute", c0 + gap + send, 1.0, 0, -1, "", False),
    )
    g = graph(c)
    ends = g.evaluate(g.intrinsic[None, :])[0]
    assert ends.max() == pytest.approx(g.observed_s, abs=1e-9)
    healed = np.where(ops_of(g, c, "forward") & (g.rank == 0), c0 * (1 - heal), g.intrinsic)
    assert g.evaluate(healed[None, :])[0].max() == pytest.approx(g.observed_s - c0 * heal, abs=1e-9)


@settings(max_examples=50, deadline=None)
@given(gaps=st.lists(st.floats(0.0, 0.5), min_size=2, max_size=2), barrier=st.booleans())
def test_host_time_between_spans_is_the_ranks_own_and_kept_in_the_model(gaps: list[float], barrier: bool) -> None:
    """Untraced host time between a rank's spans (before a compute span or before a blocking exchange) is
    the rank's own: the model reproduces the step with it."""
    t = 0.0
    rows = []
    for i, host in enumerate([0.0, *gaps]):  # the step starts with the first span
        t += host
        rows.append((0, 0, f"op{i}", "compute", t, 0.25, 0, -1, "", False))
        t += 0.25
    if barrier:  # rank 1 is ready first: rank 0's gap before the exchange delays both
        rows.append((0, 0, "x", "comm", t + 0.1, 0.05, -1, 1, "sendrecv", True))
        rows.append((1, 1, "x", "comm", 0.0, t + 0.15, -1, 0, "sendrecv", True))
        t += 0.15
    g = graph(columns(*rows))
    assert g.evaluate(g.intrinsic[None, :])[0].max() == pytest.approx(t, abs=1e-9)


def test_each_declared_p2p_name_gives_its_direction_an_unknown_one_none_and_no_name_the_ops() -> None:
    p2p = np.array(["", "send", "bogus", "recv", "sendrecv", ""], dtype=object)
    found = declared({"p2p": p2p})
    assert found is not None and found.dtype == np.int64
    assert found.tolist() == [INFER, TO, NONE, FROM, BOTH, INFER]
    assert declared({"p2p": np.array(["", ""], dtype=object)}) is None
    assert declared({"p2p": np.array([], dtype=object)}) is None
