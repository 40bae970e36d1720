"""Ranked causes of a slowdown over a window of analysed steps, from their what-if results.

Each candidate element's *gain* is the mean, over the window, of the seconds per step that healing it
alone would save (a step where it was not a candidate counts 0). Its *slowdown* is the window's mean step
time over the mean step time with it healed; its *share* is its gain over the window's slowdown against
the job's baseline (healing several elements is not additive, so shares need not sum to 1); its cost is
ranks × gain, summed over the steps.

Ranking prefers the most specific explanation: when an element contains another (a replica or a stage
contains its ranks; the op type ``send`` contains the links its transfers cross) and the contained one
explains at least ``SPECIFIC`` of the container's gain, the contained one ranks first and the container
right after it.

An :class:`Attribution` is the audit record of one ranked cause (an element or a decision) of a finding.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from streams.engine import elements
from streams.engine.stepgraph import RECV_OPS, SEND_OPS

SPECIFIC = 0.9
MIN_SHARE = 0.05
TOP = 5


@dataclass(frozen=True)
class StructuralGains:
    """What the structural decomposition keeps of a step (:mod:`decompose`): its ideal step, and per
    candidate the seconds healing it alone saves and the seconds it alone adds to the ideal."""

    ideal_s: float
    gains: dict[str, float]
    extra: dict[str, float]
    contains: dict[str, tuple[str, ...]]
    decomposed: bool = True  # False: the step was not slow enough to be decomposed (no gains, no extra)


@dataclass(frozen=True)
class StepGains:
    """What attribution keeps of a step report (small; a job keeps a few hundred)."""

    step: int
    t0: float
    step_s: float
    baseline_s: float | None
    ranks: int
    gains: dict[str, float]
    contains: dict[str, tuple[str, ...]]
    structural: StructuralGains | None = None

    def against_ideal(self) -> StepGains:
        """The step's structural decomposition in the form :func:`rank_causes` reads (the ideal as its
        baseline)."""
        s = self.structural
        assert s is not None
        return StepGains(self.step, self.t0, self.step_s, s.ideal_s, self.ranks, s.gains, s.contains)


@dataclass(frozen=True)
class RankedCause:
    rank: int
    element: str
    gain_s: float
    share: float
    slowdown: float
    cost_accel_s: float


def _contains(container: str, inner: str, contains: dict[str, set[str]]) -> bool:
    if inner in contains.get(container, ()):
        return True
    op = elements.split_of_job(container, "op")
    return elements.is_kind(inner, "link") and op is not None and op[1] in (*SEND_OPS, *RECV_OPS)


def specific_chain(element: str, totals: dict[str, float], contains: dict[str, set[str]]) -> list[str]:
    """``element``, then the element inside it that explains at least SPECIFIC of its total, and so on."""
    chain = [element]
    while True:
        inner = [e for e in totals if e not in chain and _contains(chain[-1], e, contains)]
        best = max(inner, key=lambda e: (totals[e], e), default=None)
        if best is None or totals[best] < SPECIFIC * totals[chain[-1]]:
            return chain
        chain.append(best)


def containment(window: Sequence[StepGains]) -> dict[str, set[str]]:
    """Which candidate contained which, over a window of steps."""
    contains: dict[str, set[str]] = {}
    for s in window:
        for element, inner in s.contains.items():
            contains.setdefault(element, set()).update(inner)
    return contains


def rank_causes(window: Sequence[StepGains]) -> list[RankedCause]:
    """The top causes over ``window`` (oldest first), most likely first; [] when nothing stands out."""
    if not window:
        return []
    n = len(window)
    totals: dict[str, float] = {}
    for s in window:
        for element, gain in s.gains.items():
            totals[element] = totals.get(element, 0.0) + gain
    contains = containment(window)
    mean_step = sum(s.step_s for s in window) / n
    baselines = [s.baseline_s for s in window if s.baseline_s is not None]
    extra = mean_step - sum(baselines) / len(baselines) if baselines else max(totals.values(), default=0.0) / n
    if extra <= 0:
        return []
    by_gain = sorted(totals, key=lambda e: (-totals[e], e))
    ordered: list[str] = []
    for element in by_gain:
        if element in ordered or totals[element] / n < MIN_SHARE * extra:
            continue
        chain = specific_chain(element, totals, contains)
        ordered.extend(e for e in reversed(chain) if e not in ordered)
    ranks = sum(s.ranks for s in window) / n
    causes = []
    for i, element in enumerate(ordered[:TOP], start=1):
        gain = totals[element] / n
        slowdown = mean_step / (mean_step - gain) if gain < mean_step else float("inf")
        causes.append(RankedCause(i, element, gain, min(1.0, gain / extra), slowdown, ranks * totals[element]))
    return causes


@dataclass(frozen=True)
class Attribution:
    finding_id: str
    rank: int
    cause_kind: str  # element | decision
    cause: str
    share: float
    slowdown: float
    cost_accel_s: float
    evidence: dict[str, Any] = field(default_factory=dict)
    slowdown_unhealed: float | None = None  # ideal-except-this-cause / ideal (structural causes only)

    @property
    def id(self) -> str:
        return hashlib.sha256(f"attr|{self.finding_id}|{self.rank}|{self.cause}".encode()).hexdigest()[:32]

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "finding_id": self.finding_id,
            "rank": self.rank,
            "cause_kind": self.cause_kind,
            "cause": self.cause,
            "share": round(self.share, 6),
            "slowdown": round(self.slowdown, 6),
            "cost_accel_s": round(self.cost_accel_s, 6),
            "slowdown_unhealed": None if self.slowdown_unhealed is None else round(self.slowdown_unhealed, 6),
            "evidence": self.evidence,
        }


def structural_attributions(finding_id: str, window: list[StepGains]) -> list[Attribution]:
    """The ranked causes of a blocking slowdown over ``window`` against the ideal step from peers, with both
    definitions: ``slowdown`` heals only the cause (actual / actual with it healed), ``slowdown_unhealed``
    leaves only it unhealed (ideal except it / ideal); ``share`` is its gain over actual less ideal. Over
    the steps of the window that were decomposed (slow enough to ask why)."""
    steps = [s for s in window if s.structural is not None and s.structural.decomposed]
    parts = [s.structural for s in steps if s.structural is not None]
    if not parts:
        return []
    ideal = sum(p.ideal_s for p in parts) / len(parts)
    out = []
    for a in element_attributions(finding_id, [s.against_ideal() for s in steps]):
        extra = sum(p.extra.get(a.cause, 0.0) for p in parts) / len(parts)
        unhealed = (ideal + extra) / ideal if ideal > 0 else 1.0
        out.append(replace(a, evidence={**a.evidence, "ideal_s": round(ideal, 6)}, slowdown_unhealed=unhealed))
    return out


def element_attributions(finding_id: str, window: list[StepGains]) -> list[Attribution]:
    """The ranked element causes of a finding over ``window`` (the analysed steps they were judged on)."""
    steps = {"first_step": window[0].step, "last_step": window[-1].step, "steps": len(window)}
    return [
        Attribution(
            finding_id,
            c.rank,
            "element",
            c.element,
            c.share,
            c.slowdown,
            c.cost_accel_s,
            {"gain_s_per_step": round(c.gain_s, 6), **steps},
        )
        for c in rank_causes(window)
    ]
