"""Every detector (each subclass of streams/engine/detectors/base.py's ``Detector``) against its contract:
deterministic, resumable from a pickle or a deep copy (and copies independent), bounded state. Each detector
is fed a seeded stream with a degradation in it, so that the contract is checked while it is finding
something."""

from __future__ import annotations

import copy
import importlib
import pickle
import pkgutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

import streams.engine.detectors
from streams.engine.detectors.base import Detector, findings
from streams.engine.detectors.coherence import ControlCoherence
from streams.engine.detectors.critical_path import CriticalPathShift
from streams.engine.detectors.early_warning import EarlyWarning
from streams.engine.detectors.rerun import Reruns
from streams.engine.detectors.series_drift import SeriesDrift, series_key
from streams.engine.detectors.serving import RetryStorm, TailLatency
from streams.engine.detectors.step_time import StepObs, StepTimeDrift
from streams.engine.detectors.straggler import CollectiveLateness
from streams.engine.detectors.structural_slowdown import IdealStep, StructuralSlowdown
from streams.engine.detectors.sync_loss import PhaseDrift, SyncLoss
from streams.engine.opgraph import OperatorGraph


def step_series(n: int) -> Iterator[tuple[Any, ...]]:
    rng = np.random.default_rng(5)
    for step in range(n):
        duration = 1.0 + 0.01 * rng.standard_normal() + (0.3 if n // 3 <= step < 2 * n // 3 else 0.0)
        yield (StepObs("j", step, float(step), duration),)


def collectives(n: int) -> Iterator[tuple[Any, ...]]:
    rng = np.random.default_rng(6)
    ranks = np.arange(8)
    for step in range(n):
        arrivals = step + 0.001 * rng.random(8)
        if step >= n // 3:
            arrivals[5] += 0.02  # rank 5 straggles
        yield (np.array(["g"] * 8, object), np.full(8, step), np.full(8, step), ranks, arrivals, np.full(8, 0.01))


def compositions(n: int) -> Iterator[tuple[Any, ...]]:
    for step in range(n):
        slow = step >= n // 3
        stages = {0: 1.0, 1: 3.0 if slow else 1.0}
        total = sum(stages.values())
        yield step, float(step), step + 1.0, {"stage:0": stages[0] / total, "stage:1": stages[1] / total,
                                              "work:compute": 1.0}  # fmt: skip


def replica_drift(n: int) -> Iterator[tuple[Any, ...]]:
    ranks, replicas = np.arange(8), np.arange(8) // 4  # two replicas of four ranks
    for step in range(n):
        steps = np.full(8, step)
        if step >= n // 3:
            steps[replicas == 1] -= (step - n // 3) // 4  # replica 1 falls behind, further and further
        yield ranks, steps, replicas, float(step)


def restarts(n: int) -> Iterator[tuple[Any, ...]]:
    newest = -1
    for i in range(n):
        cycle, at = divmod(i, 30)  # every 30 summaries: a failure, then 3 steps run again
        step = cycle * 27 + (at if at < 27 else at - 3)
        status = "failed" if at == 26 else "restarted" if at >= 27 else "ok"
        yield step, step <= newest, status, 2 if at >= 27 else 1, float(i), 8.0
        newest = max(newest, step)


def latencies(n: int) -> Iterator[tuple[Any, ...]]:
    rng = np.random.default_rng(7)
    for w in range(n):
        p50 = 1.0 + 0.02 * rng.standard_normal()
        tail = 1.6 if n // 3 <= w < 2 * n // 3 else 1.0  # the tail grows, the middle does not
        yield float(w), p50, p50 * 2.0 * tail * (1 + 0.02 * rng.standard_normal())


def attempts(n: int) -> Iterator[tuple[Any, ...]]:
    for w in range(n):
        storm = n // 3 <= w < 2 * n // 3
        yield float(w), 80.0, 80.0 * (3.5 if storm else 1.0)


def tug_of_war(n: int) -> Iterator[tuple[Any, ...]]:
    """A power manager capping a node and an autoscaler adding replicas on it, answering each other for a
    while, then each acting alone."""
    for i in range(n):
        fighting = n // 3 <= i < 2 * n // 3
        power = i % 2 == 0
        node = "node:n1" if fighting else ("node:n2" if power else "node:n3")
        metric = "power_w" if power else "latency_p99_s"
        yield ({"id": f"d{i}", "time": 30.0 * i, "controller": "power" if power else "hpa",
                "layer": "power" if power else "autoscaler", "action": "x", "targets": [node],
                "expected_effect": {"metric": metric, "direction": "down"}}, OperatorGraph(""))  # fmt: skip


def phases(n: int) -> Iterator[tuple[Any, ...]]:
    rng = np.random.default_rng(8)
    for step in range(n):
        phase = 0.001 * rng.standard_normal(6)
        if n // 3 <= step < n // 3 + 50:
            phase[4] += 0.01 * (step - n // 3)  # replica 4 drifts away for 50 steps, then rejoins
        yield step, float(step), 0.4, phase


def named_series(n: int) -> Iterator[tuple[Any, ...]]:
    rng = np.random.default_rng(9)
    keys = [series_key("service:s", "latency_p99_s"), series_key("job:j", "output_per_step"),
            series_key("node:n1", "power_w")]  # fmt: skip
    for i in range(n):
        slow = n // 3 <= i < 2 * n // 3
        values = [0.5 * (1.4 if slow else 1.0), -3.0 - (1.0 if slow else 0.0), 400.0]  # up, down, flat
        yield keys, [float(i)] * 3, np.array(values) + [0.01, 0.05, 5.0] * rng.standard_normal(3)


def slowing_down(n: int) -> Iterator[tuple[Any, ...]]:
    """An AR(1) whose recovery slows from a third of the way in, then recovers."""
    rng = np.random.default_rng(10)
    x = 0.0
    for i in range(n):
        phase = min(max((i % 600 - n // 3) / (n // 3), 0.0), 1.0) if i % 600 < 2 * n // 3 else 0.0
        x = (0.3 + 0.65 * phase) * x + rng.standard_normal()
        yield float(i), x


def ideal_steps(n: int) -> Iterator[tuple[Any, ...]]:
    """Steps against their ideal: 1-2% above it (jitter), 25% above it for the middle third."""
    rng = np.random.default_rng(11)
    for step in range(n):
        actual = 1.0 + 0.01 * rng.random() + (0.25 if n // 3 <= step < 2 * n // 3 else 0.0)
        yield (IdealStep(step, float(step), step + actual, actual, 0.99, 8),)


@dataclass(frozen=True)
class Case:
    make: Callable[[], Detector]
    stream: Callable[[int], Iterator[tuple[Any, ...]]]


CASES: dict[type[Detector], Case] = {
    StepTimeDrift: Case(lambda: StepTimeDrift("j"), step_series),
    CollectiveLateness: Case(lambda: CollectiveLateness("j"), collectives),
    CriticalPathShift: Case(lambda: CriticalPathShift("j"), compositions),
    SyncLoss: Case(lambda: SyncLoss("j"), replica_drift),
    Reruns: Case(lambda: Reruns("j"), restarts),
    TailLatency: Case(lambda: TailLatency("service:s"), latencies),
    RetryStorm: Case(lambda: RetryStorm("service:s"), attempts),
    ControlCoherence: Case(ControlCoherence, tug_of_war),
    PhaseDrift: Case(lambda: PhaseDrift("j"), phases),
    SeriesDrift: Case(SeriesDrift, named_series),
    EarlyWarning: Case(lambda: EarlyWarning("service:s"), slowing_down),
    StructuralSlowdown: Case(lambda: StructuralSlowdown("j"), ideal_steps),
}


def feed(detector: Detector, items: list[tuple[Any, ...]]) -> list[Any]:
    return [f.as_dict() for args in items for f in findings(detector.update(*args))]


def detectors() -> list[type[Detector]]:
    """Every subclass of Detector in streams/engine/detectors (each module imported to find them)."""
    for module in pkgutil.iter_modules(streams.engine.detectors.__path__):
        importlib.import_module(f"streams.engine.detectors.{module.name}")
    found: list[type[Detector]] = []
    pending = [Detector]
    while pending:
        for sub in pending.pop().__subclasses__():
            found.append(sub)
            pending.append(sub)
    return sorted(set(found), key=lambda c: c.__name__)


@pytest.fixture(params=detectors(), ids=lambda c: c.__name__)
def case(request: pytest.FixtureRequest) -> Case:
    assert request.param in CASES, f"{request.param.__name__} has no contract case: add its seeded stream"
    made = CASES[request.param].make()
    assert type(made) is request.param and not made.__abstractmethods__
    return CASES[request.param]


def test_it_finds_the_degradation_and_is_deterministic(case: Case) -> None:
    items = list(case.stream(300))
    first = feed(case.make(), items)
    assert first, "the seeded stream has a degradation the detector must find"
    assert feed(case.make(), items) == first


def test_a_pickled_or_copied_detector_continues_as_the_original(case: Case) -> None:
    items = list(case.stream(300))
    whole = feed(case.make(), items)
    for cut in (50, 120, 200):
        original = case.make()
        before = feed(original, items[:cut])
        resumed = pickle.loads(pickle.dumps(original))
        clone = copy.deepcopy(original)
        assert before + feed(resumed, items[cut:]) == whole
        assert feed(original, items[cut:]) == feed(clone, items[cut:])  # the copy shares no state with it


def test_state_is_bounded(case: Case) -> None:
    detector = case.make()
    items = list(case.stream(6000))  # degraded from item 2000 on (streams degrade from a third of the way)
    feed(detector, items[:2500])
    size = detector.state_size()
    feed(detector, items[2500:])
    assert detector.state_size() <= 1.2 * size + 512
