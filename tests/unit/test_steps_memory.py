"""The step analysis's memory: a pending step does not keep the arrays of steps already analysed alive, and
holding its rows apart changes no report."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from streams.engine.opgraph import OperatorGraph
from streams.engine.steps import JobSteps, StepReport
from streams.engine.structural import Derived, JobDerivations
from tests.unit.test_structural_baseline import GAP, Job


def one_batch(job: Job, steps: int) -> tuple[dict[str, Any], np.ndarray]:
    """``steps`` steps of the job in one batch (as the timeline releases an epoch), and each row's step."""
    rng, t, parts, step_of = np.random.default_rng(5), 1000.0, [], []
    for step in range(steps):
        cols, duration = job.step(step, t, rng)
        parts.append(cols)
        step_of.append(np.full(len(cols["rank"]), step))
        t += duration + GAP
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}, np.concatenate(step_of)


def add_as_slices(js: JobSteps, batch: dict[str, Any], step_of: np.ndarray, upto: int = -1) -> list[StepReport]:
    """Each step's rows (up to step ``upto``; -1: all, then the flush) as views of the one batch (how the
    engine hands an epoch over, step by step)."""
    reports = []
    for step in np.unique(step_of).tolist()[: upto if upto >= 0 else None]:
        rows = np.flatnonzero(step_of == step)
        at = slice(int(rows[0]), int(rows[-1]) + 1)
        reports += js.add(step_of[at], {k: v[at] for k, v in batch.items()})
    return reports + (js.flush() if upto < 0 else [])


def summary(r: StepReport) -> tuple[Any, ...]:
    return (r.step, r.t0, r.whatif.step_s, r.whatif.structural.ideal_s, r.cost, r.critical_path,
            r.replica_phase.tolist())  # fmt: skip


@pytest.mark.parametrize("jitter", [0.0, 0.05])
def test_pending_steps_own_their_rows_once_an_earlier_step_of_their_batch_is_analysed(jitter: float) -> None:
    batch, step_of = one_batch(Job(dp=2, pp=2, jitter=jitter), 4)
    js = JobSteps("j")
    assert len(add_as_slices(js, batch, step_of, upto=3)) == 1  # the third step completes the first
    pending = [p for parts in js._pending.values() for p in parts]
    assert pending and all(not np.shares_memory(v, batch[k]) for p in pending for k, v in p.items() if k in batch)


def test_reports_are_the_same_from_slices_of_one_batch_as_from_copies() -> None:
    batch, step_of = one_batch(Job(dp=3, pp=2, jitter=0.05), 6)
    sliced = add_as_slices(JobSteps("j"), batch, step_of)
    js, copied = JobSteps("j"), []
    for step in range(6):
        at = step_of == step
        copied += js.add(step_of[at], {k: v[at].copy() for k, v in batch.items()})
    copied += js.flush()
    assert [summary(r) for r in sliced] == [summary(r) for r in copied]
    assert len(sliced) == 6


def test_flushing_analyses_a_step_only_once_the_report_before_it_is_taken() -> None:
    batch, step_of = one_batch(Job(dp=2, pp=2, jitter=0.05), 4)
    js = JobSteps("j")
    assert [r.step for r in add_as_slices(js, batch, step_of, upto=4)] == [0, 1]
    flushing = js.flushing()
    assert sorted(js._pending) == [2, 3]  # nothing analysed before a report is asked for
    assert next(flushing).step == 2 and sorted(js._pending) == [3]
    assert [r.step for r in flushing] == [3] and not js._pending


def test_derived_reports_let_their_step_graph_and_rows_of_ends_go() -> None:
    batch, step_of = one_batch(Job(dp=2, pp=2, jitter=0.05), 4)
    reports = add_as_slices(JobSteps("j"), batch, step_of)
    derived = JobDerivations("j", OperatorGraph("j"))
    released = derived.on_reports(iter(reports), Derived(), final=True)
    assert [r.step for r in released] == [0, 1, 2, 3]
    assert all(r.whatif.pending is not None and r.whatif.pending.g.nodes for r in reports)
    assert all(r.whatif.pending is None for r in released)
    assert all(r.whatif.ends.base is None or r.whatif.ends.base.size == r.whatif.ends.size for r in reports)  # one row
    assert all(not len(r.whatif.ends) and not len(r.whatif.peer_median) for r in released)  # per node: let go
    assert [summary(r) for r in released] == [summary(r) for r in reports]


def test_a_batch_of_several_steps_gives_the_reports_in_order_or_not() -> None:
    """A batch of several steps is split by step as slices where its steps ascend (the usual epoch) and by
    masks where they do not: the same reports either way, and as when each step came on its own."""
    batch, step_of = one_batch(Job(dp=3, pp=2, jitter=0.05), 6)
    whole = JobSteps("j")
    in_order = whole.add(step_of, batch) + whole.flush()
    mixed = np.argsort(step_of % 2, kind="stable")  # even steps first: each step's rows in their order
    shuffled = JobSteps("j")
    out_of_order = shuffled.add(step_of[mixed], {k: v[mixed] for k, v in batch.items()}) + shuffled.flush()
    alone = add_as_slices(JobSteps("j"), batch, step_of)
    assert len(in_order) == 6
    assert [summary(r) for r in in_order] == [summary(r) for r in out_of_order] == [summary(r) for r in alone]
