"""Co-moving series become one finding: the changes of one metric that start at the same sample.

A straggler or a power cap moves the utilisation and power of every device of a job at once; one
``series_drift`` per device buries the story. ``CoMoving`` holds each change under its group key (metric,
change kind, direction, start time) until the metric's event time has passed ``close_at`` = the first
member's detection time plus as long again as that member took to be detected and ``every`` of its
sampling intervals more (the others, sampled alike and tested on every ``every``-th sample at their own
phase, are found within about that delay), then emits the group: one member as it
was found; several as one finding on the job (``subjects``: the job element), with ``members`` (each
element, its level or noise before and after) in its evidence, ``series`` (what tells finding ids apart)
``metric:kind:direction``, ``before``/``after`` the members' medians
and ``severity`` the largest. A member found after its group was emitted is emitted on its own.

Same input, same records: the metric's clock and every member's times are event times of its own
series, and a group closes only on the metric's clock (checked after all the samples of a call), so
neither batching nor the order of series within a batch changes a group. ``flush()`` emits what is
still held (the end of a job's input). State: the groups still open, and the keys of the last
``remember`` groups emitted.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field, replace

from streams.engine.findings import Finding

GroupKey = tuple[str, str, str, float]  # metric, change kind, direction, start


def _key(f: Finding) -> GroupKey:
    return f.series, str(f.evidence["change"]), str(f.evidence["direction"]), f.start


@dataclass
class CoMoving:
    subject: str  # the element a group of several is about (the job)
    every: int = 1  # the change detector tests a series on every this many of its samples
    remember: int = 256
    _open: dict[GroupKey, list[Finding]] = field(default_factory=dict)
    _clock: dict[str, float] = field(default_factory=dict)  # newest sample time per metric
    _closed: deque[GroupKey] = field(default_factory=deque)

    def add(self, found: list[Finding], clock: dict[str, float]) -> list[Finding]:
        """The changes found in one call and the newest sample time of each metric it saw: the groups
        that closed (in order of key), and late members."""
        out: list[Finding] = []
        for f in found:
            key = _key(f)
            if key in self._closed:
                out.append(f)
            else:
                self._open.setdefault(key, []).append(f)
        for metric, t in clock.items():
            self._clock[metric] = max(t, self._clock.get(metric, t))
        due = sorted(k for k, members in self._open.items() if self._clock.get(k[0], k[3]) > self._close_at(members))
        return out + [self._emit(k) for k in due]

    def _close_at(self, members: list[Finding]) -> float:
        first = min(members, key=lambda f: (f.end, f.subjects))
        interval = (first.end - first.start) / max(int(first.evidence["detected_after_samples"]), 1)
        return first.end + (first.end - first.start) + self.every * interval

    def flush(self) -> list[Finding]:
        return [self._emit(k) for k in sorted(self._open)]

    def _emit(self, key: GroupKey) -> Finding:
        members = sorted(self._open.pop(key), key=lambda f: f.subjects)
        self._closed.append(key)
        if len(self._closed) > self.remember:
            self._closed.popleft()
        if len(members) == 1:
            return members[0]
        first = members[0]
        return replace(
            first,
            subjects=(self.subject,),
            series=":".join(map(str, key[:3])),  # the id tells apart groups that moved different ways at once
            end=max(f.end for f in members),
            severity=max(f.severity for f in members),
            evidence={
                **first.evidence,
                "before": statistics.median(f.evidence["before"] for f in members),
                "after": statistics.median(f.evidence["after"] for f in members),
                "slope_before": statistics.median(f.evidence["slope_before"] for f in members),
                "slope_after": statistics.median(f.evidence["slope_after"] for f in members),
                "detected_after_samples": max(f.evidence["detected_after_samples"] for f in members),
                "members": [
                    {"element": f.subjects[0], "before": f.evidence["before"], "after": f.evidence["after"]}
                    for f in members
                ],
            },
        )
