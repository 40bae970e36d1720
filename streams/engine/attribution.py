"""Ranked causes of a slowdown over a window of analysed steps, from their what-if results.

Each candidate element's *gain* is the mean, over the window, of the seconds per step that healing it
alone would save (a step where it was not a candidate counts 0). Its *slowdown* is the window's mean step
time over the mean step time with it healed; its *share* is its gain over the window's slowdown against
the job's baseline (healing several elements is not additive, so shares need not sum to 1); its cost is
ranks × gain, summed over the steps.

Ranking prefers the most specific explanation: when an element contains another (a replica or a stage
contains its ranks; the op type ``send`` contains the links its transfers cross) and the contained one
explains at least ``SPECIFIC`` of the container's gain, the contained one ranks first and the container
after every most specific explanation (so that a second cause is not pushed behind the first one's
container, nor out of the top ``TOP``).

Structural causes (against the ideal step, :func:`structural_attributions`) are judged by both definitions:
an element is listed when the larger of its gain (heal only it) and its extra (leave only it unhealed) is
at least ``MIN_SHARE`` of the slowdown, so a cause in parallel with a slower one — healing it alone gains
nothing, alone it still costs — is listed; they are ordered by gain, and a container whose gain is nothing to
list is explained by a part under the leave-only definition instead. Two causes inside one container (a
slow rank and a slow link beside its stage; a slow replica and a slow rank of another replica, both inside
the spread across replicas) make the container outrank each of them: for each listed container, its listed
parts (at their most specific, none inside another) are healed *together*, one more what-if evaluation per
step (:meth:`decompose.Pending.healed_together`). When they save at least ``SPECIFIC`` of what healing the
container saves and hold less than ``FEW`` of its ideal work, a few of its parts explain it: they rank
first, highest score first, and the container right after them. Parts holding half of it or more are the
container itself (a slow replica's ranks, the slower half of a spread's replicas), which stays named.

An :class:`Attribution` is the audit record of one ranked cause (an element or a decision) of a finding.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from streams.engine import elements
from streams.engine.stepgraph import RECV_OPS, SEND_OPS

SPECIFIC = 0.9
FEW = 0.5
MIN_SHARE = 0.05
TOP = 5

# groups of (container, its parts) -> per group, over a window: the seconds healing the parts together saves
# and the parts' share of the container's ideal work; for one step: its step time with them healed, the share
Together = Callable[[list[tuple[str, tuple[str, ...]]]], list[tuple[float, float]]]


@dataclass(frozen=True)
class StructuralGains:
    """What the structural decomposition keeps of a step (:mod:`decompose`): its ideal step, and per
    candidate the seconds healing it alone saves and the seconds it alone adds to the ideal."""

    ideal_s: float
    gains: dict[str, float]
    extra: dict[str, float]
    contains: dict[str, tuple[str, ...]]
    decomposed: bool = True  # False: the step was not slow enough to be decomposed (no gains, no extra)
    actual_s: float | None = None  # the step's time on the job's timeline (:mod:`carry`; None: the step's own)


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
        step_s = self.step_s if s.actual_s is None else s.actual_s
        return StepGains(self.step, self.t0, step_s, s.ideal_s, self.ranks, s.gains, s.contains)


@dataclass(frozen=True)
class RankedCause:
    rank: int
    element: str
    gain_s: float
    share: float
    slowdown: float
    cost_accel_s: float


def _inside(container: str, contains: dict[str, set[str]]) -> Callable[[str], bool]:
    """Whether an element is inside ``container``: listed in ``contains``, or a link inside a transfer op (the
    container read once, for the many elements tested against it)."""
    held = contains.get(container, ())
    op = elements.split_of_job(container, "op")
    if op is not None and op[1] in (*SEND_OPS, *RECV_OPS):
        return lambda inner: inner in held or elements.is_kind(inner, "link")
    return held.__contains__


def specific_chain(element: str, totals: dict[str, float], contains: dict[str, set[str]],
                   score: dict[str, float] | None = None, floor: float = 0.0) -> list[str]:  # fmt: skip
    """``element``, then the element inside it that explains at least SPECIFIC of its total, and so on. With
    ``score`` (an element's larger definition): a container whose total (heal only) is at most ``floor``
    is explained by its score instead (leave only it unhealed)."""
    chain = [element]
    while True:
        by = totals if score is None or totals.get(chain[-1], 0.0) > floor else score
        inside = _inside(chain[-1], contains)
        inner = [e for e in totals if e not in chain and inside(e)]
        best = max(inner, key=lambda e: (by[e], e), default=None)
        if best is None or by[best] < SPECIFIC * by[chain[-1]]:
            return chain
        chain.append(best)


def containment(window: Sequence[StepGains]) -> dict[str, set[str]]:
    """Which candidate contained which, over a window of steps."""
    contains: dict[str, set[str]] = {}
    for s in window:
        for element, inner in s.contains.items():
            contains.setdefault(element, set()).update(inner)
    return contains


def _sums(parts: Sequence[dict[str, float]]) -> dict[str, float]:
    totals: dict[str, float] = {}
    for part in parts:
        for element, value in part.items():
            totals[element] = totals.get(element, 0.0) + value
    return totals


def rank_causes(window: Sequence[StepGains], unhealed: dict[str, float] | None = None,
                together: Together | None = None) -> list[RankedCause]:  # fmt: skip
    """The top causes over ``window`` (oldest first), most likely first; [] when nothing stands out.
    ``unhealed``: per element, the seconds it alone adds to the baseline summed over the window (leave only
    it unhealed): an element is then listed by the larger of its two definitions (still ordered by its gain).
    ``together``: heals groups of parts at once over the window (see the module), so that a container
    explained by a few of its parts ranks after them."""
    if not window:
        return []
    n = len(window)
    totals = _sums([s.gains for s in window])
    score = {e: max(g, (unhealed or {}).get(e, 0.0)) for e, g in totals.items()}
    contains = containment(window)
    mean_step = sum(s.step_s for s in window) / n
    baselines = [s.baseline_s for s in window if s.baseline_s is not None]
    extra = mean_step - sum(baselines) / len(baselines) if baselines else max(totals.values(), default=0.0) / n
    if extra <= 0:
        return []
    floor = MIN_SHARE * extra * n  # below it, an element's total is nothing to list
    listed = [e for e in sorted(totals, key=lambda e: (-totals[e], e)) if score[e] >= floor]
    explained = explained_by_parts(listed, totals, score, contains, together, floor) if together else {}
    first: list[str] = []  # the most specific explanations (a few parts: then the container they explain)
    after: list[str] = []  # the containers explained by one part inside them
    for element in listed:
        chain = specific_chain(element, totals, contains, score, floor)
        for e in reversed(chain):
            first.extend(explained.get(e, ()))
            (first if e == chain[-1] else after).append(e)
    ordered = list(dict.fromkeys(first + after))
    ranks = sum(s.ranks for s in window) / n
    causes = []
    for i, element in enumerate(ordered[:TOP], start=1):
        gain = totals[element] / n
        slowdown = mean_step / (mean_step - gain) if gain < mean_step else float("inf")
        causes.append(RankedCause(i, element, gain, min(1.0, gain / extra), slowdown, ranks * totals[element]))
    return causes


def parts_of(container: str, listed: list[str], totals: dict[str, float], score: dict[str, float],
             contains: dict[str, set[str]], floor: float) -> list[str]:  # fmt: skip
    """The listed candidates inside ``container`` (at any depth), each taken at its most specific
    (:func:`specific_chain`), without those inside another of them; highest score first."""
    inside, todo = set(), [container]
    while todo:
        within = _inside(todo.pop(), contains)
        for e in listed:
            if e not in inside and e != container and within(e):
                inside.add(e)
                todo.append(e)
    specific = {specific_chain(e, totals, contains, score, floor)[-1] for e in inside}
    holds = {o: _inside(o, contains) for o in specific}
    nested = {e for e in specific for o in specific if o != e and holds[o](e)}
    return sorted(specific - nested, key=lambda e: (-score[e], e))


def explained_by_parts(listed: list[str], totals: dict[str, float], score: dict[str, float],
                       contains: dict[str, set[str]], together: Together,
                       floor: float) -> dict[str, tuple[str, ...]]:  # fmt: skip
    """The containers that a few of their parts explain: the parts healed together save at least SPECIFIC of
    what healing the container saves, and hold less than FEW of its ideal work (else they are the container
    itself, its members slow: a slow replica's ranks, a spread's slower half of the replicas, half of a
    stage's replicas; a float's rounding of exactly half is still half)."""
    parts = {c: tuple(parts_of(c, listed, totals, score, contains, floor)) for c in listed if totals.get(c, 0.0) > 0}
    groups = [(c, p) for c, p in parts.items() if len(p) > 1]
    found = together(groups)
    return {c: parts for (c, parts), (gain, share) in zip(groups, found, strict=True)
            if share < FEW - 1e-9 and gain >= SPECIFIC * totals[c]}  # fmt: skip


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


def structural_attributions(finding_id: str, window: list[StepGains],
                            together: dict[int, Together] | None = None) -> list[Attribution]:  # fmt: skip
    """The ranked causes of a blocking slowdown over ``window`` against the ideal step from peers, with both
    definitions: ``slowdown`` heals only the cause (actual / actual with it healed), ``slowdown_unhealed``
    leaves only it unhealed (ideal except it / ideal); ``share`` is its gain over actual less ideal. Over
    the steps of the window that were decomposed (slow enough to ask why). ``together``: per step, its
    evaluation of parts healed together (:meth:`decompose.Pending.healed_together`; a step without one counts
    as saving nothing)."""
    steps = [s for s in window if s.structural is not None and s.structural.decomposed]
    parts = [s.structural for s in steps if s.structural is not None]
    if not parts:
        return []
    ideal = sum(p.ideal_s for p in parts) / len(parts)
    added = _sums([p.extra for p in parts])
    out = []
    joint = _over_window(steps, together or {})
    for a in element_attributions(finding_id, [s.against_ideal() for s in steps], added, joint):
        extra = added.get(a.cause, 0.0) / len(parts)
        unhealed = (ideal + extra) / ideal if ideal > 0 else 1.0
        out.append(replace(a, evidence={**a.evidence, "ideal_s": round(ideal, 6)}, slowdown_unhealed=unhealed))
    return out


def _over_window(steps: list[StepGains], together: dict[int, Together]) -> Together:
    """``together`` over the window's steps: seconds saved summed, shares averaged (per step evaluated)."""

    def over(groups: list[tuple[str, tuple[str, ...]]]) -> list[tuple[float, float]]:
        saved = [0.0] * len(groups)
        shares: list[list[float]] = [[] for _ in groups]
        for s in steps:
            if s.step in together and groups:
                for i, (healed_s, share) in enumerate(together[s.step](groups)):
                    saved[i] += max(0.0, s.against_ideal().step_s - healed_s)
                    shares[i].append(share)
        return [(g, sum(sh) / len(sh) if sh else 1.0) for g, sh in zip(saved, shares, strict=True)]

    return over


def element_attributions(finding_id: str, window: list[StepGains], unhealed: dict[str, float] | None = None,
                         together: Together | None = None) -> list[Attribution]:  # fmt: skip
    """The ranked element causes of a finding over ``window`` (the analysed steps they were judged on);
    ``unhealed`` and ``together`` as for :func:`rank_causes`."""
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
        for c in rank_causes(window, unhealed, together)
    ]
