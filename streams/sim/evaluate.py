"""``driftlog eval``: run scenarios through the engine and score the detectors against the ground truth,
beside two baselines on the same step-time series: a fixed threshold and river's ADWIN.

Scoring, per detector and scenario: a run with an injected cause counts as detected when the detector
fires at or after the cause's onset (an alarm before the onset is a false alarm); the delay is in steps
from the onset to the first alarm after it; on a healthy run any alarm is a false alarm. For the straggler
detector the named element must be the injected one: AC@k is the share of runs whose first alarm after
the onset ranked it within the top k causes (from the finding's attributions, or its first subject), Avg@5
the mean of AC@1..AC@5; for control regressions the truth is the decision that made things worse.
``slowdown_err``/``cost_err``: the top cause's estimated slowdown and attributed accelerator-seconds against
the simulator's true counterfactual over the same steps (median over runs of |estimate / truth - 1|).
"""

from __future__ import annotations

import bisect
import itertools
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from river import drift

from streams.config import Settings
from streams.pipeline import build_processor
from streams.sim.scenarios import SCENARIOS, Scenario
from streams.testing import run_stream


@dataclass
class Run:
    """One scenario run: the step times, the step each detector first alarmed at, what it named."""

    scenario: str
    seed: int
    onset: int | None  # first step of the first injected cause (None: healthy)
    truth_element: str | None
    truth_decision: str | None = None
    expected: tuple[str, ...] = ()  # finding kinds the ground truth expects
    targets: dict[str, tuple[int, tuple[str, ...], str | None]] = field(default_factory=dict)  # detector -> truth
    alarms: dict[str, list[int]] = field(default_factory=dict)  # detector -> steps it alarmed at
    named: dict[str, list[list[str]]] = field(default_factory=dict)  # detector -> per alarm, elements ranked
    slowdown_error: dict[str, float] = field(default_factory=dict)  # detector -> |estimated / true - 1|
    cost_error: dict[str, float] = field(default_factory=dict)  # detector -> |attributed / true accel-s - 1|

    def onset_for(self, detector: str) -> int | None:
        return self.targets[detector][0] if detector in self.targets else self.onset

    def truth_for(self, detector: str) -> tuple[str | None, ...]:
        """What the detector should name first: the decision behind it for a control regression or a retry
        storm, else the element."""
        if detector not in self.targets:
            return (self.truth_decision if detector in NAMES_DECISIONS else self.truth_element,)
        _, elements, decision = self.targets[detector]
        return (decision,) if detector in NAMES_DECISIONS else elements


NAMES_DECISIONS = ("driftlog:control_regression", "driftlog:retry_storm")
# Which injected cause each detector is judged against (default: the scenario's first cause).
CAUSE_OF = {
    "driftlog:straggler": ("straggler_rank",),
    "driftlog:straggler_cascade": ("straggler_rank",),
    "driftlog:sync_loss": ("sync_loss",),
    "driftlog:restart_rerun": ("restart",),
    "driftlog:tail_latency_inflation": ("slow_replica",),
    "driftlog:retry_storm": ("retry_storm",),
    "driftlog:energy_feedback_loop": ("energy_feedback_loop",),
    "driftlog:control_conflict": ("energy_feedback_loop", "preemption_churn"),
}


def fixed_threshold(durations: list[float], warmup: int = 20, factor: float = 1.2, runs: int = 3) -> list[int]:
    """Baseline: alarm when ``runs`` consecutive steps exceed ``factor`` × the warm-up median."""
    base = statistics.median(durations[:warmup])
    alarms, streak = [], 0
    for step, d in enumerate(durations[warmup:], start=warmup):
        streak = streak + 1 if d > factor * base else 0
        if streak == runs:
            alarms.append(step)
    return alarms


def adwin(durations: list[float], warmup: int = 20) -> list[int]:
    """Baseline: river's ADWIN on the step-time series divided by its warm-up median (ADWIN's bounds assume
    values in [0, 1]; on raw seconds a 10% shift of a 0.4 s step stays inside them). An alarm per change."""
    base = statistics.median(durations[:warmup])
    detector = drift.ADWIN()  # type: ignore[no-untyped-call]
    alarms = []
    for step, d in enumerate(durations):
        detector.update(d / base - 1.0)  # type: ignore[no-untyped-call]
        if detector.drift_detected:
            alarms.append(step)
    return alarms


def run_scenario(name: str, seed: int, ranks: int, steps: int, settings: Settings | None = None) -> Run:
    """One run through the processor ``settings`` describe (None: the engine's defaults)."""
    scenario: Scenario = SCENARIOS[name](seed, ranks, steps)
    items = [(kind, value) for kind, _, value in scenario.run()]
    truth = scenario.ground_truth(seed)
    causes = truth["causes"]
    run = Run(name, seed, causes[0]["start_step"] if causes else None, causes[0]["element"] if causes else None,
              next((c["decision"] for c in causes if c.get("decision")), None),
              tuple(truth["expected_findings"]))  # fmt: skip
    for detector, kinds in CAUSE_OF.items():
        mine = [c for c in causes if c["kind"] in kinds]
        if mine:  # any of the matching causes, and the nodes a conflict was fought on, count as named right
            elements = tuple(dict.fromkeys([e for c in mine for e in (c["element"], *c.get("nodes", ()))]))
            run.targets[detector] = (min(c["start_step"] for c in mine), elements, mine[0].get("decision"))
    decided = next((c for c in causes if c.get("decision") and c["kind"] in TRAINING_CAUSES), None)
    if decided is not None:  # a regression is judged from the decision behind it
        run.targets["driftlog:control_regression"] = (
            decided["start_step"], (decided["element"],), decided["decision"])  # fmt: skip
    out = run_stream(items, build_processor(settings) if settings is not None else None)
    step_at = _step_locator(truth)
    causes_of: dict[str, list[dict[str, Any]]] = {}
    for record in (r for r in out.audit if r.type == "attribution"):
        causes_of.setdefault(record.body["finding_id"], []).append(record.body)
    for record in (r for r in out.audit if r.type == "finding"):
        body = record.body
        detector = f"driftlog:{body['kind']}"
        run.alarms.setdefault(detector, []).append(step_at(body["end"]))  # when it was detected
        ranked = sorted(causes_of.get(record.id, []), key=lambda c: c["rank"])
        run.named.setdefault(detector, []).append([c["cause"] for c in ranked] or [body["subjects"][0]])
        if ranked and ranked[0]["cause_kind"] == "element" and detector not in run.slowdown_error:
            _score_estimates(run, detector, ranked[0], truth)
    durations = truth.get("latency_p99_s") or truth["step_time_s"]  # the job's symptom series
    run.alarms["baseline:fixed_threshold"] = fixed_threshold(durations)
    run.alarms["baseline:adwin"] = adwin(durations)
    return run


def _score_estimates(run: Run, detector: str, top: dict[str, Any], truth: dict[str, Any]) -> None:
    """The top cause's slowdown and cost against the simulator's true counterfactual over the same steps."""
    ev = top["evidence"]
    if "first_step" not in ev:
        return
    lo, hi = ev["first_step"], ev["last_step"] + 1
    actual, healed = truth["step_time_s"][lo:hi], truth["counterfactual_step_time_s"][lo:hi]
    true_slowdown = statistics.mean(actual) / statistics.mean(healed)
    run.slowdown_error[detector] = abs(top["slowdown"] / true_slowdown - 1)
    true_cost = truth["layout"]["ranks"] * sum(a - h for a, h in zip(actual, healed, strict=True))
    if true_cost > 0:
        run.cost_error[detector] = abs(top["cost_accel_s"] / true_cost - 1)


def _step_locator(truth: dict[str, Any]) -> Callable[[float], int]:
    """Event time → the step running then: from the steps' recorded starts where the ground truth has them
    (a restart leaves a gap and runs steps again), else steps back to back from ``t0``."""
    attempts = truth.get("step_attempts")
    if attempts:
        first: dict[int, float] = {}
        for a in attempts:
            first.setdefault(a["step"], a["start"])
        steps = sorted(first)
        starts = [first[s] for s in steps]
    else:
        starts = list(itertools.accumulate(truth["step_time_s"][:-1], initial=truth["t0"]))
        steps = list(range(len(starts)))

    def step_at(t: float) -> int:
        return steps[max(0, bisect.bisect_right(starts, t) - 1)]

    return step_at


TRAINING_CAUSES = ("straggler_rank", "slow_stage", "slow_link", "imbalanced_dp", "sync_loss")
DETECTORS = (
    "driftlog:step_time_drift",
    "driftlog:structural_slowdown",
    "driftlog:straggler",
    "driftlog:straggler_cascade",
    "driftlog:control_regression",
    "driftlog:critical_path_shift",
    "driftlog:sync_loss",
    "driftlog:restart_rerun",
    "driftlog:tail_latency_inflation",
    "driftlog:retry_storm",
    "driftlog:control_conflict",
    "driftlog:energy_feedback_loop",
    "baseline:fixed_threshold",
    "baseline:adwin",
)


def score(runs: Iterable[Run]) -> list[dict[str, Any]]:
    """One row per scenario and detector (healthy scenarios: only their false alarms count)."""
    runs = list(runs)
    return [
        _score(scenario, detector, [r for r in runs if r.scenario == scenario])
        for scenario in dict.fromkeys(r.scenario for r in runs)
        for detector in DETECTORS
    ]


def _score(scenario: str, detector: str, runs: list[Run]) -> dict[str, Any]:
    injected = [r for r in runs if r.onset is not None]
    expected = any(detector.removeprefix("driftlog:") in r.expected for r in injected) or detector.startswith(
        "baseline:"
    )  # recall only where the scenario expects this kind of finding
    healthy = [r for r in runs if r.onset is None]
    hits, delays, early = 0, [], 0
    for r in injected:
        onset = r.onset_for(detector)
        assert onset is not None
        alarms = r.alarms.get(detector, [])
        early += sum(1 for a in alarms if a < onset)
        after = [a for a in alarms if a >= onset]
        if after:
            hits += 1
            delays.append(after[0] - onset)
    alarms_total = sum(len(r.alarms.get(detector, [])) for r in runs)
    true_alarms = sum(1 for r in injected for a in r.alarms.get(detector, []) if a >= (r.onset_for(detector) or 0))
    # only detectors that name an operator-graph element below the job are scored on attribution
    firsts = {id(r): _first_named_after_onset(r, detector) for r in injected}
    names_elements = any(not n.startswith("job:") for names in firsts.values() for n in names)

    def ac(k: int) -> float | None:
        if not names_elements or not injected:
            return None
        found = sum(1 for r in injected if set(r.truth_for(detector)) & set(firsts[id(r)][:k]))
        return found / len(injected)

    slowdown_errors = [r.slowdown_error[detector] for r in injected if detector in r.slowdown_error]
    cost_errors = [r.cost_error[detector] for r in injected if detector in r.cost_error]
    ac_k = [ac(k) for k in range(1, 6)]
    return {
        "scenario": scenario,
        "detector": detector,
        "runs": len(runs),
        "recall": hits / len(injected) if injected and expected else None,
        "precision": true_alarms / alarms_total if alarms_total else None,
        "median_delay_steps": statistics.median(delays) if delays else None,
        "alarms_before_onset": early,
        "false_alarms_on_healthy": sum(len(r.alarms.get(detector, [])) for r in healthy) if healthy else None,
        "AC@1": ac_k[0],
        "AC@3": ac_k[2],
        "Avg@5": statistics.mean(a for a in ac_k if a is not None) if ac_k[0] is not None else None,
        "slowdown_err": statistics.median(slowdown_errors) if slowdown_errors else None,
        "cost_err": statistics.median(cost_errors) if cost_errors else None,
    }


def _first_named_after_onset(run: Run, detector: str) -> list[str]:
    """What the detector's first alarm at or after the onset named, most likely first."""
    for step, names in zip(run.alarms.get(detector, []), run.named.get(detector, []), strict=False):
        onset = run.onset_for(detector)
        if onset is not None and step >= onset:
            return names
    return []


def evaluate(names: list[str], seeds: list[int], ranks: int, steps: int, settings: Settings | None = None) -> list[Run]:
    return [run_scenario(name, seed, ranks, steps, settings) for name in names for seed in seeds]


def table(rows: list[dict[str, Any]]) -> str:
    return grid(rows, ["scenario", "detector", "runs", "recall", "precision", "median_delay_steps",
                       "alarms_before_onset", "false_alarms_on_healthy", "AC@1", "AC@3", "Avg@5", "slowdown_err",
                       "cost_err"])  # fmt: skip


def grid(rows: list[dict[str, Any]], cols: list[str]) -> str:
    """``rows`` as aligned text columns (None as ``-``; floats with 2 decimals, 3 below 0.1)."""

    def cell(v: Any) -> str:
        return "-" if v is None else f"{v:.3f}" if isinstance(v, float) and v < 0.1 else f"{v:.2f}" if isinstance(
            v, float) else str(v)  # fmt: skip

    widths = [max(len(c), *(len(cell(r[c])) for r in rows)) for c in cols]
    lines = ["  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True))]
    lines += ["  ".join(cell(r[c]).ljust(w) for c, w in zip(cols, widths, strict=True)) for r in rows]
    return "\n".join(lines)
