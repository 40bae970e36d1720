"""Samples of no job (fabric topology, power) reach every task of the live worker (:mod:`streams.shared`):
the worker's tasks, driven here without a broker in a random interleaving, each reading its own telemetry
partition, every decision and the others' forwarded job-less samples and marks, write together the records
of one processor reading everything — whichever partition a job-less sample was produced to, however the
tasks' progress and commits interleave, whether or not they batch per rank, and when tasks are killed and
restored from their snapshots (which leave the event-time buffer out: it is re-read)."""

from __future__ import annotations

import random
import zlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest

from audit.records import SourcePosition
from streams.contract.envelope import decode_telemetry
from streams.durable import _HEADER, Snapshot
from streams.pipeline import Output, Processor
from streams.shared import Mark, jobless
from streams.testing import run_stream
from streams.variants import Item, merged, per_rank, without_job
from streams.worker_state import WorkerState
from tests.unit.test_same_records import records, scenario

INPUTS = {"telemetry": "telemetry", "decisions": "decisions", "shared": "shared"}


def control_storm() -> list[Item]:
    return without_job(scenario("control-storm"))


def several_jobs() -> list[Item]:
    return without_job(merged(scenario("training-fabric"), scenario("inference-sla"), scenario("control-storm")))


CASES = {"control-storm": control_storm, "several-jobs": several_jobs}


def partition_of(raw: bytes, tasks: int, n: int) -> int:
    """A job's messages go to the partition of its key; those of no job to any (here: by position)."""
    jobs = {j for b in decode_telemetry(raw).batches if "job" in b.columns for j in b.columns["job"].tolist() if j}
    return zlib.crc32(min(jobs).encode()) % tasks if jobs else n % tasks


@dataclass
class Broker:
    """Topic partitions as lists; the shared topic's messages become readable when their task commits."""

    logs: dict[tuple[str, int], list[bytes]] = field(default_factory=dict)

    def end(self, topic: str, partition: int) -> int:
        return len(self.logs.setdefault((topic, partition), []))


def everything(tasks: int) -> list[tuple[str, int]]:
    return [(t, p) for t in ("telemetry", "shared") for p in range(tasks)] + [("decisions", 0)]


def task(partition: int, tasks: int, broker: Broker, snapshot: list[bytes] | None = None) -> WorkerState:
    """A task as :meth:`WorkerState.start` makes it: from its last committed snapshot (if any), the buffer
    re-read from the broker."""
    state = WorkerState(partition, Processor(), None, broker.end, idle_flush_s=0.0)  # type: ignore[arg-type]
    if snapshot:
        restored = Snapshot.decode(1, {i: part[_HEADER.size :] for i, part in enumerate(snapshot)})
        state.processor, state.offsets = restored.processor, dict(restored.offsets)
        for (topic, p), (first, end) in sorted(restored.ranges().items()):
            for offset in range(first, end):
                state.processor.rebuffer(broker.logs[(topic, p)][offset], SourcePosition(topic, p, offset),
                                         INPUTS[topic])  # fmt: skip
    state.configure(INPUTS, everything(tasks))
    return state


def commit(state: WorkerState, broker: Broker, pending: list[Output], audit: list[Any]) -> list[bytes]:
    """A transaction: the records (to ``audit``, what the sink sees), the forwarded samples and the mark (to
    the shared topic); returns the snapshot it carries."""
    log = broker.logs.setdefault(("shared", state.partition), [])
    for out in pending:
        audit.extend(out.audit)
        log.extend(out.forward)
    pending.clear()
    mark = state.mark()
    if mark != state.marked:
        log.append(mark.encode())
        state.marked = mark
    return Snapshot(1, state.processor, dict(state.offsets)).encode()


def run_tasks(items: list[Item], tasks: int, seed: int, kills: int = 0) -> list[Any]:
    """The live worker's protocol: ``tasks`` tasks, messages read in a random interleaving, commits at
    random moments, ``kills`` times a task killed (what it did since its last commit lost) and restarted
    from its snapshot; at the end each task flushes once all its input is caught up (the idle flush).
    Returns the committed records."""
    rng = random.Random(seed)
    broker = Broker()
    for n, (kind, raw) in enumerate(items):
        broker.logs.setdefault((kind, 0 if kind == "decisions" else partition_of(raw, tasks, n)), []).append(raw)
    states = [task(p, tasks, broker) for p in range(tasks)]
    snapshots: list[list[bytes] | None] = [None] * tasks
    pending: list[list[Output]] = [[] for _ in states]
    audit: list[Any] = []
    total = sum(map(len, broker.logs.values()))
    kill_at = set(rng.sample(range(total), kills))

    def step(i: int) -> bool:
        state = states[i]
        ready = [tp for tp in state.offsets if state.offsets[tp] < broker.end(*tp)]
        if not ready:
            return False
        topic, p = rng.choice(sorted(ready))
        offset = state.offsets[(topic, p)]
        pending[i].append(state.handle(state.kinds[topic], broker.logs[(topic, p)][offset],
                                       SourcePosition(topic, p, offset)))  # fmt: skip
        return True

    steps = 0
    while any(state.offsets[tp] < broker.end(*tp) for state in states for tp in state.offsets) or any(pending):
        i = rng.randrange(tasks)
        if steps in kill_at:
            pending[i].clear()
            states[i] = task(i, tasks, broker, snapshots[i])
        steps += 1
        if not step(i) or rng.random() < 0.1:
            snapshots[i] = commit(states[i], broker, pending[i], audit)
    for i, state in enumerate(states):
        commit(state, broker, pending[i], audit)
    for state in states:  # every task caught up, its shared channels too: the idle flush
        caught_up = state.caught_up()
        assert set(caught_up) == set(state.channels), "a task still waits for input"
        audit.extend(state.processor.advance(caught_up).audit)
        audit.extend(state.processor.flush(SourcePosition("telemetry", state.partition, 0)).audit)
    return audit


def once(audit: list[Any]) -> Counter[tuple[str, str]]:
    return Counter((r.type, r.id) for r in audit)


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("tasks,seed", [(2, 1), (3, 2), (4, 3)])
def test_tasks_write_the_records_of_one_processor(case: str, tasks: int, seed: int) -> None:
    items = CASES[case]()
    assert any(jobless(decode_telemetry(raw).batches) for kind, raw in items if kind == "telemetry")
    whole = run_stream(items)
    audit = run_tasks(items, tasks, seed)
    assert records(Output(audit=audit)) == records(whole)
    assert once(audit) == once(whole.audit), "a record written by no task, or by two"
    batched = run_tasks(per_rank(items), tasks, seed + 10)
    assert records(Output(audit=batched)) == records(whole), "per-rank batching"
    killed = run_tasks(items, tasks, seed + 20, kills=6)
    assert records(Output(audit=killed)) == records(whole), "tasks killed and restored from their snapshots"
    assert once(killed) == once(whole.audit), "a record lost or written twice across the kills"


def test_the_feedback_loop_needs_the_shared_power_samples() -> None:
    """The finding the job-less power samples make: gone when they reach only their own partition's task."""
    items = control_storm()
    kinds = {r.body["kind"] for r in run_tasks(items, 2, 1) if r.type == "finding"}
    assert "energy_feedback_loop" in kinds
    own_only = [(k, v) for k, v in items if k != "telemetry" or not orjson.loads(v)["source"].startswith("infra:")]
    kinds = {r.body["kind"] for r in run_stream(own_only).audit if r.type == "finding"}
    assert "energy_feedback_loop" not in kinds


def test_a_mark_round_trips() -> None:
    for mark in (Mark(1.5, True), Mark(float("-inf"), False)):
        assert Mark.decode(mark.encode()) == mark
    assert Mark.decode(control_storm()[0][1]) is None


def test_a_shared_topic_with_too_few_partitions_is_refused_in_one_line() -> None:
    from streams.errors import ConfigError

    state = WorkerState(3, Processor(), None, Broker().end, idle_flush_s=0.0)  # type: ignore[arg-type]
    everything = [(t, p) for t in ("telemetry",) for p in range(4)] + [("shared", 0), ("shared", 1), ("decisions", 0)]
    with pytest.raises(ConfigError, match="shared topic shared has no partition 3"):
        state.configure(INPUTS, everything)
