"""The structural baseline (the ideal step from peers) and the decomposition of a job's blocking slowdown,
on small jobs simulated here by hand: a pipeline of ``pp`` stages in ``dp`` replicas (forward passes of a
few microbatches, each an attention and an MLP span; activations sent between stages; an all-reduce per
stage across the replicas; an optimizer step). The truth is the same hand simulation run again with the
cause removed, so the engine's graph, its ideal and its what-if are checked against an independent model
of the job."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from streams.engine.attribution import Attribution
from streams.engine.opgraph import OperatorGraph
from streams.engine.steps import JobSteps
from streams.engine.structural import Derived, JobDerivations

MB = 4  # microbatches
FWD, SEND, AR, OPT = 0.10, 0.02, 0.03, 0.01  # seconds: forward per microbatch, send, all-reduce, optimizer
GAP = 0.05  # seconds between a step's end and the next step's start (every rank starts the next step together)


@dataclass
class Job:
    dp: int = 4
    pp: int = 3
    compute: dict[tuple[int, int], float] = field(default_factory=dict)  # (replica, stage) -> factor on its compute
    link: dict[int, float] = field(default_factory=dict)  # lower stage of the link -> factor on its sends
    jitter: float = 0.0  # relative, per span
    extra: dict[int, tuple[str, float]] = field(default_factory=dict)  # stage -> (op, seconds) only it runs
    labelled: bool = True  # False: every span's microbatch is -1 (a profiler that cannot tell them apart)
    prologue: float = 0.0  # seconds of host work each rank does first in a step (0: none)
    oversleep: float = 0.0  # mean relative lateness per span, only ever later (a host waking late from a wait)

    def rank(self, d: int, s: int) -> int:
        return d * self.pp + s

    def step(self, step: int, t0: float, rng: np.random.Generator | None = None,
             starts: npt.NDArray[np.float64] | None = None) -> tuple[dict[str, Any], float]:  # fmt: skip
        """One step's op spans (the contract's columns) and its true duration; ``starts``: when each rank
        (replica, stage) starts it (default: every rank at ``t0``)."""
        rows: list[tuple[Any, ...]] = []  # rank, dp, pp, op, class, start, duration, mb, group, seq, peer

        def noisy(x: float) -> float:
            if rng is None:
                return x
            return x * (1 + self.jitter * float(rng.standard_normal()) + self.oversleep * float(rng.exponential()))

        done = np.full((self.dp, self.pp), t0) if starts is None else starts.copy()  # when each rank is free
        for d in range(self.dp):
            for s in range(self.pp):
                if self.prologue:  # host work before the step's first receive (e.g. zeroing the gradients)
                    r = self.rank(d, s)
                    rows.append((r, d, s, "zero_grad", "compute", done[d, s], self.prologue, -1, "", -1, -1))
                    done[d, s] += self.prologue
        for m in range(MB):
            for d in range(self.dp):
                arrived = -np.inf
                for s in range(self.pp):
                    done[d, s] = max(done[d, s], arrived)
                    for op, share in (("attention", 0.4), ("mlp", 0.6)):  # a forward pass: two kinds of work
                        dur = noisy(share * FWD * self.compute.get((d, s), 1.0))
                        rows.append((self.rank(d, s), d, s, op, "compute", done[d, s], dur, m, "", -1, -1))
                        done[d, s] += dur
                    if s in self.extra:  # per microbatch, work only this stage does (embedding, loss)
                        op, seconds = self.extra[s]
                        rows.append((self.rank(d, s), d, s, op, "compute", done[d, s], noisy(seconds), m, "", -1, -1))
                        done[d, s] += rows[-1][6]
                    if s + 1 < self.pp:
                        sent = noisy(SEND * self.link.get(s, 1.0))
                        nxt = self.rank(d, s + 1)
                        rows.append((self.rank(d, s), d, s, "send", "comm", done[d, s], sent, m, "", -1, nxt))
                        rows.append((nxt, d, s + 1, "recv", "comm", done[d, s], sent, m, "", -1, self.rank(d, s)))
                        arrived = done[d, s] + sent
        end = t0
        for s in range(self.pp):
            release = float(done[:, s].max())
            for d in range(self.dp):
                r = self.rank(d, s)
                waited = release + AR - done[d, s]
                rows.append((r, d, s, "allreduce", "comm", done[d, s], waited, -1, f"ar{s}", step, -1))
                rows.append((r, d, s, "optimizer", "compute", release + AR, OPT, -1, "", -1, -1))
                end = max(end, release + AR + OPT)
        names = ("rank", "dp", "pp", "op", "op_class", "start", "duration", "microbatch", "group", "seq", "peer")
        cols: dict[str, Any] = {k: np.array([r[i] for r in rows], dtype=object if isinstance(rows[0][i], str)
                                else None) for i, k in enumerate(names)}  # fmt: skip
        cols["tp"] = np.zeros(len(rows), np.int64)
        if not self.labelled:
            cols["microbatch"] = np.full(len(rows), -1)
        return cols, end - t0

    def true_step_s(self) -> float:
        return self.step(0, 0.0)[1]


def analyse(job: Job, steps: int = 30, seed: int = 3) -> tuple[Derived, list[float]]:
    """The job's steps through the engine's step analysis and derivations (findings, attributions, roll-ups)."""
    rng = np.random.default_rng(seed)
    js, out = JobSteps("j"), Derived()
    derived = JobDerivations("j", OperatorGraph("j"), window=10)
    slowdowns: list[float] = []
    t = 1000.0
    for step in range(steps):
        cols, duration = job.step(step, t, rng if job.jitter or job.oversleep else None)
        reports = js.add(np.full(len(cols["rank"]), step), cols)
        slowdowns += [r.whatif.structural.slowdown for r in reports]
        derived.on_reports(reports, out)
        t += duration + GAP
    reports = js.flush()
    slowdowns += [r.whatif.structural.slowdown for r in reports]
    derived.on_reports(reports, out, final=True)
    return out, slowdowns


def structural(out: Derived) -> list[Attribution]:
    [finding] = [f for f in out.findings if f.kind == "structural_slowdown"]
    assert finding.subjects == ("job:j",)
    return [a for a in out.attributions if a.finding_id == finding.id]


def healthy(job: Job) -> Job:
    return Job(job.dp, job.pp, extra=job.extra, labelled=job.labelled, prologue=job.prologue)


def check_top(job: Job, element: str, healed: Job, unhealed: Job | None = None) -> None:
    """``element`` is named first; its slowdowns within 5% of the truth: actual / actual with it healed
    (``healed``: the job without it), and ideal with only it unhealed / ideal (``unhealed``, default: the
    job itself, when it is the only cause; the ideal is the healthy job)."""
    out, _ = analyse(job)
    top = structural(out)[0]
    assert top.cause == element
    assert top.slowdown == pytest.approx(job.true_step_s() / healed.true_step_s(), rel=0.05)
    truth_unhealed = (unhealed or job).true_step_s() / healthy(job).true_step_s()
    assert top.slowdown_unhealed == pytest.approx(truth_unhealed, rel=0.05)
    assert top.slowdown > 1.1  # not trivially within 5% of 1


@pytest.mark.parametrize("jitter", [0.0, 0.02])  # exact spans, and 2% noise on every span
def test_a_straggler_rank_present_from_the_first_step_is_named_with_its_slowdown(jitter: float) -> None:
    job = Job(compute={(2, 1): 1.6}, jitter=jitter)
    check_top(job, "rank:j/7", healthy(job))


@pytest.mark.parametrize("jitter", [0.0, 0.02])  # exact spans, and 2% noise on every span
def test_a_slow_replica_is_named_rather_than_one_of_its_ranks(jitter: float) -> None:
    job = Job(compute={(1, s): 1.5 for s in range(3)}, jitter=jitter)
    check_top(job, "dp:j/1", healthy(job))


@pytest.mark.parametrize("jitter", [0.0, 0.02])  # exact spans, and 2% noise on every span
def test_a_stage_slow_in_several_replicas_is_named_as_the_stage(jitter: float) -> None:
    # stage 2 of replicas 0 and 1 (of 4) runs 1.5x: no single replica or rank explains it
    job = Job(compute={(0, 2): 1.5, (1, 2): 1.5}, jitter=jitter)
    check_top(job, "stage:j/2", healthy(job))


@pytest.mark.parametrize("jitter", [0.0, 0.02])  # exact spans, and 2% noise on every span
def test_a_slow_link_is_named_as_the_link(jitter: float) -> None:
    # the stages either side hold its transfers too: the link is the more specific explanation
    job = Job(link={0: 6.0}, jitter=jitter)
    check_top(job, "link:j/stage0-stage1", healthy(job))


@pytest.mark.parametrize("jitter", [0.0, 0.02])  # exact spans, and 2% noise on every span
def test_an_imbalance_spread_over_the_replicas_is_named_as_the_spread(jitter: float) -> None:
    # every replica a little different (variable sequence lengths), the same every step: replicas 2 and 3 are
    # systematically slow, so the typical replica is the middle of replicas 0 and 1
    spread = {0: 1.0, 1: 1.15, 2: 1.3, 3: 1.45}
    job = Job(compute={(d, s): f for d, f in spread.items() for s in range(3)}, jitter=jitter)
    typical = Job(compute={(d, s): 1.15 for d in range(4) for s in range(3)})
    out, _ = analyse(job)
    top = structural(out)[0]
    assert top.cause == "spread:j/dp"
    assert top.slowdown == pytest.approx(job.true_step_s() / typical.true_step_s(), rel=0.05)
    # left alone in the ideal (every node at the typical replica's time): each replica's difference from the
    # typical one stays, on top of the ideal
    assert top.slowdown_unhealed == pytest.approx(job.true_step_s() / typical.true_step_s(), rel=0.05)
    assert "dp:j/3" in [a.cause for a in structural(out)]  # the slowest replica is ranked, after the spread


def test_a_healthy_job_with_jitter_has_no_structural_slowdown() -> None:
    out, slowdowns = analyse(Job(jitter=0.02), steps=40)
    assert not [f for f in out.findings if f.kind == "structural_slowdown"]
    assert 1.0 <= np.median(slowdowns) < 1.05
    names = {r.name for r in out.rollups}
    assert {"step_ideal_s", "step_modelled_s", "blocking_slowdown"} <= names


@pytest.mark.parametrize("seed", [3, 4, 5])
def test_two_replicas_with_one_sided_noise_have_no_structural_slowdown(seed: int) -> None:
    """Every span 8% late on average (exponential), never early (oversleeping a device wait on a loaded
    host): the ideal keeps that noise (the middle of two peers, not the luckier one), so a healthy job is not
    slow against it (against the lower of two peers its median step was 7% slow)."""
    out, slowdowns = analyse(Job(dp=2, oversleep=0.08), steps=40, seed=seed)
    assert not [f for f in out.findings if f.kind == "structural_slowdown"]
    assert 1.0 <= np.median(slowdowns) < 1.05


@pytest.mark.parametrize("seed", [3, 4, 5])
def test_a_straggler_of_two_replicas_with_one_sided_noise_is_named_first(seed: int) -> None:
    """With the same noise, a rank 1.6x slow from the first step is left out of its peers once its slowness
    is systematic (engine/systematic.py), so it is named before its stage and replica."""
    job = Job(dp=2, compute={(1, 1): 1.6}, oversleep=0.08)
    out, _ = analyse(job, seed=seed)
    top = structural(out)[0]
    assert top.cause == "rank:j/4"
    assert top.slowdown > 1.2


@pytest.mark.parametrize("jitter", [0.0, 0.02])  # exact spans, and 2% noise on every span
@pytest.mark.parametrize("pp", [2, 3, 4])
def test_a_stage_slow_in_every_replica_from_the_first_step_is_named_as_the_stage(jitter: float, pp: int) -> None:
    # no replica of the stage is faster than another: its peers are the other stages doing the same layers
    job = Job(pp=pp, compute={(d, 1): 1.5 for d in range(4)}, jitter=jitter)
    check_top(job, "stage:j/1", healthy(job))


@pytest.mark.parametrize("stage", [0, 2])
def test_work_only_one_stage_runs_does_not_make_it_slow(stage: int) -> None:
    # the first stage embeds, the last computes the loss, as ops of their own: they have no peers elsewhere
    job = Job(extra={stage: ("loss" if stage else "embedding", 0.08)}, jitter=0.02)
    out, slowdowns = analyse(job)
    assert not [f for f in out.findings if f.kind == "structural_slowdown"]
    assert np.median(slowdowns) < 1.05


def test_a_lighter_stage_stays_light_in_the_ideal() -> None:
    # the cross-stage typical only ever lowers a node's ideal: a stage doing less is not raised to the others
    job = Job(compute={(d, 2): 0.6 for d in range(4)})
    out, slowdowns = analyse(job)
    assert not [f for f in out.findings if f.kind == "structural_slowdown"]
    assert max(slowdowns) == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize("labelled", [True, False])  # without microbatch labels, the k-th call lines layers up
def test_a_slow_stage_is_named_beside_a_stage_that_holds_the_loss(labelled: bool) -> None:
    # stage 0 slow in every replica, stage 2 heavier only by an op of its own: stage 0 is the cause
    job = Job(compute={(d, 0): 2.0 for d in range(4)}, extra={2: ("loss", 0.05)}, jitter=0.02, labelled=labelled)
    check_top(job, "stage:j/0", healthy(job))


def test_a_job_with_one_replica_and_one_stage_has_no_peers_and_no_slowdown() -> None:
    job = Job(dp=1, pp=1, compute={(0, 0): 2.0})  # no peers at all: the ideal cannot call it slow
    out, slowdowns = analyse(job)
    assert max(slowdowns) == pytest.approx(1.0, abs=1e-6)
    assert not [f for f in out.findings if f.kind == "structural_slowdown"]


def test_the_roll_ups_hold_the_ideal_and_the_ratio_per_step() -> None:
    job = Job(compute={(2, 1): 1.6})
    out, _ = analyse(job, steps=30)
    by_name = {(r.name, r.window_start): r for r in out.rollups}
    windows = sorted(start for name, start in by_name if name == "blocking_slowdown")
    assert len(windows) == 3  # 30 steps in windows of 10
    for start in windows:
        ideal, modelled = by_name[("step_ideal_s", start)], by_name[("step_modelled_s", start)]
        ratio = by_name[("blocking_slowdown", start)]
        assert len(ratio.values) == 10
        assert ratio.values == pytest.approx([m / i for m, i in zip(modelled.values, ideal.values, strict=True)])
        # a step is its period on the job's timeline: its span and the host time before it (GAP), except the
        # first, which has no step before it (its span)
        gaps = GAP * (9 if start == windows[0] else 10)
        assert ideal.total == pytest.approx(10 * healthy(job).true_step_s() + gaps, rel=1e-6)
        assert modelled.total == pytest.approx(10 * job.true_step_s() + gaps, rel=1e-6)


def check_both(job: Job, causes: dict[str, tuple[Job, Job]], container: str) -> list[Attribution]:
    """Two causes at once, each with (the job without it, the job with only it): both ranked first, the
    ``container`` that holds both after them; each one's slowdowns within 5% of the truth (healing only it:
    actual / the job without it; leaving only it unhealed: the job with only it / ideal)."""
    out, _ = analyse(job)
    ranked = structural(out)
    names = [a.cause for a in ranked]
    assert set(names[:2]) == set(causes) and container in names[2:]
    ideal = healthy(job).true_step_s()
    for a in ranked[:2]:
        without, alone = causes[a.cause]
        assert a.slowdown == pytest.approx(job.true_step_s() / without.true_step_s(), rel=0.05)
        assert a.slowdown_unhealed == pytest.approx(alone.true_step_s() / ideal, rel=0.05)
    return ranked


@pytest.mark.parametrize("jitter", [0.0, 0.02])  # exact spans, and 2% noise on every span
def test_a_slow_rank_and_a_slow_link_of_its_stage_are_named_before_the_stage(jitter: float) -> None:
    # stage 1 holds both: healing it heals both, but its two parts healed together explain it; the rank's own
    # element leaves its transfers over the slow link to the link (else left alone it would carry them)
    rank, link = Job(compute={(2, 1): 1.6}), Job(link={1: 6.0})
    job = Job(compute=rank.compute, link=link.link, jitter=jitter)
    check_both(job, {"rank:j/7": (link, rank), "link:j/stage1-stage2": (rank, link)}, "stage:j/1")


@pytest.mark.parametrize("jitter", [0.0, 0.02])  # exact spans, and 2% noise on every span
def test_a_slow_rank_beside_a_slower_replica_is_named_though_healing_it_alone_gains_nothing(jitter: float) -> None:
    # replica 1 slow everywhere, rank 7 (replica 2) less: healing the rank alone gains nothing (replica 1 still
    # blocks), alone it costs; both are inside the spread across replicas, which is named after them
    replica, rank = Job(compute={(1, s): 1.5 for s in range(3)}), Job(compute={(2, 1): 1.3})
    job = Job(compute={**replica.compute, **rank.compute}, jitter=jitter)
    ranked = check_both(job, {"dp:j/1": (rank, replica), "rank:j/7": (replica, rank)}, "spread:j/dp")
    assert [a.cause for a in ranked[:2]] == ["dp:j/1", "rank:j/7"]  # by what healing it alone saves
    assert ranked[1].slowdown == pytest.approx(1.0, abs=0.01) and ranked[1].slowdown_unhealed > 1.05


def rank_ends(job: Job, cols: dict[str, Any]) -> npt.NDArray[np.float64]:
    """Per (replica, stage): the end of its last span."""
    ends = np.full((job.dp, job.pp), -np.inf)
    np.maximum.at(ends, (cols["dp"], cols["pp"]), cols["start"] + cols["duration"])
    return ends


def free_running(job: Job, steps: int) -> tuple[Derived, float]:
    """The job's steps with no synchronisation between steps: each rank starts the next step GAP after its
    own last span (a pipeline's stages overlap consecutive steps); the engine's output and the job's mean
    period over the second half of the steps (its steady state) on its own timeline."""
    js, out = JobSteps("j"), Derived()
    derived = JobDerivations("j", OperatorGraph("j"), window=10)
    starts = np.full((job.dp, job.pp), 1000.0)
    step_ends = []
    for step in range(steps):
        cols, _ = job.step(step, float(starts.min()), starts=starts)
        derived.on_reports(js.add(np.full(len(cols["rank"]), step), cols), out)
        ends = rank_ends(job, cols)
        step_ends.append(float(ends.max()))
        starts = ends + GAP
    derived.on_reports(js.flush(), out, final=True)
    half = step_ends[steps // 2 :]
    return out, (half[-1] - half[0]) / (len(half) - 1)


def test_without_a_sync_between_steps_the_ideal_does_not_inherit_the_lateness_of_the_steps_before() -> None:
    # the stages run ahead of each other from step to step; a rank that ended step N-1 late starts step N
    # late as observed, but in the ideal it would have ended (and started) earlier: the slowdown is the
    # ratio of the two timelines' periods, not the ratio of each step's span from its observed starts
    job = Job(compute={(2, 1): 1.6}, prologue=0.01)
    out, period = free_running(job, 40)
    _, ideal_period = free_running(healthy(job), 40)
    [finding] = [f for f in out.findings if f.kind == "structural_slowdown"]
    assert finding.evidence["blocking_slowdown"] == pytest.approx(period / ideal_period, rel=0.02)
    assert period / ideal_period > 1.1
    top = next(a for a in out.attributions if a.finding_id == finding.id)
    assert top.cause == "rank:j/7"
