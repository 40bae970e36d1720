"""Samples of no job (fabric topology, power) reach every task of the live worker (:mod:`streams.shared`):
the worker's tasks, driven here without a broker in a random interleaving, each reading its own telemetry
partition, every decision and the others' forwarded job-less samples and marks, write together the records
of one processor reading everything — whichever partition a job-less sample was produced to, however the
tasks' progress and commits interleave, and whether or not they batch per rank."""

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
    jobs = {j for b in decode_telemetry(raw).batches for j in b.columns.get("job", []).tolist() if j}
    return zlib.crc32(min(jobs).encode()) % tasks if jobs else n % tasks


@dataclass
class Broker:
    """Topic partitions as lists; the shared topic's messages become readable when their task commits."""

    logs: dict[tuple[str, int], list[bytes]] = field(default_factory=dict)

    def end(self, topic: str, partition: int) -> int:
        return len(self.logs.setdefault((topic, partition), []))


def task(partition: int, tasks: int, broker: Broker) -> WorkerState:
    state = WorkerState(partition, Processor(), None, broker.end, idle_flush_s=0.0)  # type: ignore[arg-type]
    everything = [(t, p) for t in ("telemetry", "shared") for p in range(tasks)] + [("decisions", 0)]
    state.configure(INPUTS, everything)
    return state


def commit(state: WorkerState, broker: Broker, pending: list[Output]) -> None:
    """What a transaction writes to the shared topic: the forwarded samples, then the mark."""
    log = broker.logs.setdefault(("shared", state.partition), [])
    for out in pending:
        log.extend(out.forward)
    pending.clear()
    mark = state.mark()
    if mark != state.marked:
        log.append(mark.encode())
        state.marked = mark


def run_tasks(items: list[Item], tasks: int, seed: int) -> list[Any]:
    """The live worker's protocol: ``tasks`` tasks, messages read in a random interleaving, commits at
    random moments; at the end each task flushes once all its input is caught up (as the idle flush does)."""
    rng = random.Random(seed)
    broker = Broker()
    for n, (kind, raw) in enumerate(items):
        broker.logs.setdefault((kind, 0 if kind == "decisions" else partition_of(raw, tasks, n)), []).append(raw)
    states = [task(p, tasks, broker) for p in range(tasks)]
    pending: list[list[Output]] = [[] for _ in states]
    audit: list[Any] = []

    def step(i: int) -> bool:
        state = states[i]
        ready = [tp for tp in state.offsets if state.offsets[tp] < broker.end(*tp)]
        if not ready:
            return False
        topic, p = rng.choice(sorted(ready))
        offset = state.offsets[(topic, p)]
        out = state.handle(state.kinds[topic], broker.logs[(topic, p)][offset], SourcePosition(topic, p, offset))
        audit.extend(out.audit)
        pending[i].append(out)
        return True

    while any(state.offsets[tp] < broker.end(*tp) for state in states for tp in state.offsets) or any(pending):
        i = rng.randrange(tasks)
        if not step(i) or rng.random() < 0.1:
            commit(states[i], broker, pending[i])
    for i, state in enumerate(states):
        commit(state, broker, pending[i])
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
