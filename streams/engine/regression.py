"""Control regression: ``REGRESSION_STEPS`` analysed steps before and after a decision; if the job's mean
step time rose by at least ``REGRESSION_MIN`` and an element the decision's targets host (operator graph)
explains at least half of the rise, a ``control_regression`` finding names the decision as the first cause
and the element as the second."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from streams.engine.attribution import Attribution, StepGains, containment, specific_chain
from streams.engine.findings import Finding
from streams.engine.opgraph import OperatorGraph

REGRESSION_STEPS = 10
REGRESSION_MIN = 0.03


@dataclass
class Decision:
    """What a regression needs of a decision that touched the job."""

    id: str
    time: float
    targets: tuple[str, ...]


def windows(d: Decision, gains: Iterable[StepGains]) -> tuple[list[StepGains], list[StepGains]] | None:
    """The steps before ``d`` and after it (one step to settle), once ``REGRESSION_STEPS`` follow it; None
    while fewer do."""
    steps = list(gains)
    before = [g for g in steps if g.t0 < d.time][-REGRESSION_STEPS:]
    after = [g for g in steps if g.t0 >= d.time][1 : REGRESSION_STEPS + 1]
    return None if len(after) < REGRESSION_STEPS else (before, after)


def regression(
    d: Decision, before: list[StepGains], after: list[StepGains], graph: OperatorGraph
) -> tuple[Finding, list[Attribution]] | None:
    """A decision after which the job got slower, through an element its targets host."""
    if len(before) < REGRESSION_STEPS:
        return None
    mean_before = sum(g.step_s for g in before) / len(before)
    mean_after = sum(g.step_s for g in after) / len(after)
    rise = mean_after - mean_before
    if rise < REGRESSION_MIN * mean_before:
        return None

    def mean_gain(window: list[StepGains], element: str) -> float:
        return sum(g.gains.get(element, 0.0) for g in window) / len(window)

    elements = {e for g in after for e in g.gains}
    hosted = [e for e in elements if any(graph.hosts(t, e) for t in d.targets)]
    if not hosted:
        return None
    rises = {e: mean_gain(after, e) - mean_gain(before, e) for e in hosted}
    element = specific_chain(max(sorted(rises), key=rises.__getitem__), rises, containment(after))[-1]
    explained = rises[element]
    if explained < 0.5 * rise:
        return None
    ranks = sum(g.ranks for g in after) / len(after)
    cost = ranks * rise * len(after)
    finding = Finding(
        kind="control_regression",
        subjects=(*d.targets, element),
        start=d.time,
        end=after[-1].t0 + after[-1].step_s,
        severity=round(mean_after / mean_before, 6),
        evidence={
            "decision": d.id,
            "step_s_before": round(mean_before, 6),
            "step_s_after": round(mean_after, 6),
            "steps_compared": len(after),
            "element": element,
            "element_gain_s_before": round(mean_gain(before, element), 6),
            "element_gain_s_after": round(mean_gain(after, element), 6),
        },
        cost={"accel_s": round(cost, 6)},
    )
    share = min(1.0, explained / rise)
    slowdown = mean_after / mean_before
    attributions = [
        Attribution(finding.id, 1, "decision", d.id, share, slowdown, share * cost, {"via": element}),
        Attribution(
            finding.id,
            2,
            "element",
            element,
            share,
            mean_after / (mean_after - mean_gain(after, element)),
            ranks * mean_gain(after, element) * len(after),
            {"hosted_by": list(d.targets)},
        ),
    ]
    return finding, attributions
