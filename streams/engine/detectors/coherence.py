"""Loss of control coherence: control loops that each act correctly but against each other.

- **Conflicting pair**: decision D of one controller follows decision E of another (the latest of that
  controller) within ``horizon_s``, on
  related elements (the same element, one placed on the other, or a replica of a service acted on as a
  whole), and the two pursue different objectives (a different expected metric, or the same metric in the
  opposite direction). A ``control_conflict`` finding when one pair of controllers has produced
  ``min_pairs`` such pairs within ``episode_s`` with at least two decisions of each; one per episode,
  re-armed after ``episode_s`` without a pair. Subjects: the element they fight over (one both acted on
  directly in most pairs, else the service acted on), then the two controllers.
- **Energy feedback loop**: a conflict in which one side is a power controller, while the power of the
  rack (or of the nodes it capped) oscillates: the autocorrelation of its last ``POWER_SAMPLES`` samples,
  less their mean, peaks at ≥ ``min_autocorr`` at a lag of 2 or more samples, with a peak-to-peak swing of
  at least ``min_swing`` of the mean. The lag is the loop's period. Subjects: what the other controller
  acted on (the service), then the power entity.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from streams.engine import elements
from streams.engine.detectors.base import Detector
from streams.engine.findings import Finding
from streams.engine.opgraph import OperatorGraph

POWER_SAMPLES = 64


@dataclass(frozen=True)
class _Pair:
    first: dict[str, Any]
    second: dict[str, Any]

    @property
    def time(self) -> float:
        return float(self.second["time"])


def _objective(d: dict[str, Any]) -> tuple[str, str]:
    effect = d.get("expected_effect") or {}
    return effect.get("metric", ""), effect.get("direction", "")


def _opposed(a: dict[str, Any], b: dict[str, Any]) -> bool:
    (ma, da), (mb, db) = _objective(a), _objective(b)
    return bool(ma and mb) and (ma != mb or (da != db and "none" not in (da, db)))


def same_service(a: str, b: str) -> bool:
    """One of the two is a replica of the other, a service."""
    return elements.in_service(a, b) or elements.in_service(b, a)


@dataclass
class ControlCoherence(Detector):
    job: str = ""  # the control plane's key
    horizon_s: float = 120.0
    episode_s: float = 1800.0
    min_pairs: int = 3
    min_autocorr: float = 0.3
    min_swing: float = 0.05
    _decisions: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=512))
    _pairs: dict[tuple[str, str], deque[_Pair]] = field(default_factory=dict)
    _alarmed: dict[tuple[str, str], float] = field(default_factory=dict)  # controller pair -> last pair time
    _looped: set[tuple[str, str]] = field(default_factory=set)
    _power: dict[str, deque[tuple[float, float]]] = field(default_factory=dict)

    def power(self, entity: str, time: float, watts: float) -> None:
        self._power.setdefault(entity, deque(maxlen=POWER_SAMPLES)).append((time, watts))

    def _scope(self) -> str:
        """Tells apart the findings of two jobs that both see one conflict (the job that judged it)."""
        return elements.job(self.job) if self.job else ""

    def update(self, d: dict[str, Any], fabric: OperatorGraph) -> list[Finding]:
        """The next decision (in time order), with the operator graph as it stands (what relates two
        elements besides being the same or a service and its replica: one placed on the other); the
        findings it completes."""
        found = []
        latest: dict[str, dict[str, Any]] = {}  # per other controller: its latest decision in the horizon
        for e in self._decisions:
            if e["controller"] != d["controller"] and 0 <= d["time"] - e["time"] <= self.horizon_s:
                latest[e["controller"]] = e
        for e in latest.values():
            if _opposed(e, d) and _touch(e, d, fabric):
                found.extend(self._pair(_Pair(e, d)))
        self._decisions.append(d)
        return found

    def _pair(self, pair: _Pair) -> list[Finding]:
        key = tuple(sorted((pair.first["controller"], pair.second["controller"])))
        assert len(key) == 2
        last = self._alarmed.get(key)
        if last is not None and pair.time - last > self.episode_s:
            del self._alarmed[key]
            self._looped.discard(key)
        pairs = self._pairs.setdefault(key, deque(maxlen=64))
        pairs.append(pair)
        while pairs and pair.time - pairs[0].time > self.episode_s:
            pairs.popleft()
        out = []
        if key not in self._alarmed and len(pairs) >= self.min_pairs and _both_persist(pairs, key):
            out.append(self._conflict(key, list(pairs)))
        if key in self._alarmed or out:
            self._alarmed[key] = pair.time
        if key in self._alarmed and key not in self._looped:
            loop = self._loop(key, list(pairs))
            if loop is not None:
                self._looped.add(key)
                out.append(loop)
        return out

    def _conflict(self, key: tuple[str, str], pairs: list[_Pair]) -> Finding:
        either: Counter[str] = Counter()
        both: Counter[str] = Counter()
        for p in pairs:
            a, b = set(p.first["targets"]), set(p.second["targets"])
            either.update(a | b)
            both.update(a & b)
        shared = max(sorted(both), key=both.__getitem__, default=None)
        services = sorted((e for e in either if elements.is_kind(e, "service")), key=lambda e: -either[e])
        # what they fight over: an element both act on directly in most pairs, else the service in between
        if shared is not None and (both[shared] * 2 > len(pairs) or not services):
            element = shared
        else:
            element = services[0] if services else max(sorted(either), key=either.__getitem__)
        return Finding(
            kind="control_conflict",
            series=self._scope(),
            subjects=(element, *(elements.controller(c) for c in key)),
            start=float(pairs[0].first["time"]),
            end=pairs[-1].time,
            severity=float(len(pairs)),
            evidence={
                "pairs": [[p.first["id"], p.second["id"]] for p in pairs[:32]],
                "objectives": {c: list(_objective(next(p.first if p.first["controller"] == c else p.second
                                                       for p in pairs))) for c in key},
                "measure": "decisions of two controllers with different objectives on related elements, "
                           f"within {self.horizon_s:.0f} s of each other",
            },
        )  # fmt: skip

    def _loop(self, key: tuple[str, str], pairs: list[_Pair]) -> Finding | None:
        sides = [p.first if p.first["layer"] == "power" else p.second for p in pairs]
        others = [p.second if p.first["layer"] == "power" else p.first for p in pairs]
        if not any(d["layer"] == "power" for d in sides):
            return None
        candidates = [e for e in self._power if elements.is_kind(e, "rack")] or sorted(
            {t for d in sides for t in d["targets"]}
        )
        best = max(((e, *_oscillation(self._power.get(e, ()))) for e in candidates), key=lambda x: x[1], default=None)
        if best is None:
            return None
        entity, corr, lag, swing, interval = best
        if corr < self.min_autocorr or swing < self.min_swing:
            return None
        acted = Counter(t for d in others for t in d["targets"])
        service = max(sorted(acted), key=lambda t: (elements.is_kind(t, "service"), acted[t]))
        return Finding(
            kind="energy_feedback_loop",
            series=self._scope(),
            subjects=(service, entity),
            start=float(pairs[0].first["time"]),
            end=pairs[-1].time,
            severity=round(swing, 6),
            evidence={"period_s": round(lag * interval, 3), "autocorrelation": round(corr, 4),
                      "swing_of_mean": round(swing, 4), "controllers": [elements.controller(c) for c in key],
                      "pairs": len(pairs),
                      "measure": "power oscillating while a power controller and another controller conflict"},
        )  # fmt: skip


def _touch(a: dict[str, Any], b: dict[str, Any], fabric: OperatorGraph) -> bool:
    """The two decisions act on related elements."""
    return any(x == y or same_service(x, y) or fabric.hosts(x, y) or fabric.hosts(y, x)
               for x in a["targets"] for y in b["targets"])  # fmt: skip


def _both_persist(pairs: Any, key: tuple[str, ...]) -> bool:
    """Each controller took at least two of the decisions: they keep answering each other (a single
    decision followed by another controller's routine actions is not a fight)."""
    for controller in key:
        ids = {d["id"] for p in pairs for d in (p.first, p.second) if d["controller"] == controller}
        if len(ids) < 2:
            return False
    return True


def _oscillation(samples: Any) -> tuple[float, int, float, float]:
    """(peak autocorrelation at lag ≥ 2, its lag, peak-to-peak swing / mean, median sample interval)."""
    if len(samples) < 16:
        return 0.0, 0, 0.0, 0.0
    t = np.array([s[0] for s in samples])
    v = np.array([s[1] for s in samples])
    mean = float(v.mean())
    x = v - mean
    denom = float((x * x).sum())
    if denom <= 0 or mean <= 0:
        return 0.0, 0, 0.0, 0.0
    lags = range(2, len(x) // 2)
    corr = [float((x[:-k] * x[k:]).sum() / denom) for k in lags]
    top = max(corr)
    peaks = [i for i in range(len(corr)) if corr[i] >= 0.8 * top and (i == 0 or corr[i] >= corr[i - 1])
             and (i == len(corr) - 1 or corr[i] >= corr[i + 1])]  # fmt: skip
    best = peaks[0] if peaks else int(np.argmax(corr))  # the first peak: the period, not a multiple of it
    return corr[best], best + 2, float((v.max() - v.min()) / mean), float(np.median(np.diff(t)))
