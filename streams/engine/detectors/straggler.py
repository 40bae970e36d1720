"""Stragglers measured by lateness of arrival at collectives, not by op duration.

A collective (or barrier) evens durations out: the straggler's all-reduce is *short* and its peers' are
long, because they waited for it. So each finished collective is judged by its members' arrival times (the
start of their span): the last rank to arrive is late when it arrived more than ``min_gap_s`` after the
next-latest. A rank is a straggler when it was late in at least ``persistence`` of its last ``window``
collectives; the finding's cost is the accelerator-seconds its peers spent waiting for it. One finding
per episode; the detector re-arms after ``window`` collectives in a row without the rank being late.

Lateness propagates: a slow rank delays its tensor-parallel peers and, through the pipeline, every stage
of its data-parallel replica, so all of them arrive late at their own collectives. Only the *root* gets
a finding: the rank whose own compute in that step exceeds its position's peers (same pipeline stage and
tensor index, other replicas) the most (``compute``); the other persistently late ranks are listed as the
affected set in its evidence.

A collective ``(group, seq)`` is judged once its step is complete, by the rule the job's steps are
analysed by (:mod:`streams.engine.steps`: spans of a step ``LAG`` later arrived, or the job ended): every
member has arrived by then whatever the batching (a message per rank and step holding several collectives
of a group, per stage, per step, or all at once), and the collectives complete together are judged in
the order of their first arrival. Spans of a collective already judged are counted as late and dropped.
So the findings depend on the input's content only and a replay gives the same findings.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from streams.engine import elements
from streams.engine.compute import RankCompute
from streams.engine.detectors.base import Detector
from streams.engine.findings import Finding
from streams.engine.medians import median
from streams.engine.steps import LAG


@dataclass
class _Open:
    group: str
    seq: int
    step: int
    ranks: list[int] = field(default_factory=list)
    arrivals: list[float] = field(default_factory=list)
    ends: list[float] = field(default_factory=list)


RECENT_GAPS = 64


@dataclass
class _Episode:
    start: float
    gaps: deque[float] = field(default_factory=lambda: deque(maxlen=RECENT_GAPS))  # the latest, for the median
    late: int = 0
    waited_s: float = 0.0


@dataclass
class CollectiveLateness(Detector):
    job: str
    min_gap_s: float = 0.005
    window: int = 10
    persistence: int = 6
    placement: dict[int, str] = field(default_factory=dict)  # rank -> node element id, when known
    compute: RankCompute | None = None  # names the rank that slowed a step (None: the late rank itself)
    late_spans: int = 0  # spans of a collective already judged
    _open: dict[tuple[str, int], _Open] = field(default_factory=dict)
    _newest: int = -1  # the job's newest step (of any span)
    _judged_through: int = -1  # the newest step of a collective judged: older spans are late
    _late: dict[int, deque[bool]] = field(default_factory=dict)
    _episodes: dict[int, _Episode] = field(default_factory=dict)
    _alarmed: set[int] = field(default_factory=set)
    _quiet: dict[int, int] = field(default_factory=dict)

    def place(self, rank: int, node: str) -> None:
        """Where ``rank`` runs (a node element id), to name it in its findings."""
        self.placement[rank] = node

    def spans(self, c: dict[str, Any]) -> None:
        """Op span columns of the job (all kinds): the job's newest step (which completes earlier ones), and
        what ``compute`` names the rank that slowed a step from."""
        if len(c["step"]):
            self._newest = max(self._newest, int(c["step"].max()))
        if self.compute is not None:
            self.compute.add(c)

    def update(
        self,
        groups: npt.NDArray[np.object_],
        seqs: npt.NDArray[np.int64],
        steps: npt.NDArray[np.int64],
        ranks: npt.NDArray[np.int64],
        starts: npt.NDArray[np.float64],
        durations: npt.NDArray[np.float64],
    ) -> list[Finding]:
        """Feed collective spans (one row per rank and collective) in input order; judges the collectives
        whose step is complete."""
        late = steps <= self._judged_through  # too late to change a collective already judged
        if late.any():
            self.late_spans += int(np.count_nonzero(late))
            keep = ~late
            groups, seqs, steps, ranks = groups[keep], seqs[keep], steps[keep], ranks[keep]
            starts, durations = starts[keep], durations[keep]
        if not len(steps):
            return self._judge(self._newest - LAG)
        self._newest = max(self._newest, int(steps.max()))
        # each collective's rows at once, collectives in the order they first appear, rows in input order
        first: dict[tuple[str, int], int] = {}
        keys = zip(groups.tolist(), seqs.tolist(), strict=True)
        codes = np.fromiter((first.setdefault(k, len(first)) for k in keys), np.int64, len(steps))
        order = np.argsort(codes, kind="stable")
        bounds = np.searchsorted(codes[order], np.arange(len(first) + 1)).tolist()
        columns = (ranks[order].tolist(), starts[order].tolist(), (starts + durations)[order].tolist())
        step_of = steps[order].tolist()
        for key, lo, hi in zip(first, bounds[:-1], bounds[1:], strict=True):
            current = self._open.get(key)
            if current is None:
                current = self._open[key] = _Open(key[0], key[1], step_of[lo])
            current.ranks += columns[0][lo:hi]
            current.arrivals += columns[1][lo:hi]
            current.ends += columns[2][lo:hi]
        return self._judge(self._newest - LAG)

    def flush(self) -> list[Finding]:
        """The end of the job's input: judge every collective still open."""
        return self._judge(self._newest)

    def release(self) -> None:
        """The job is closed (nothing follows its flush): its ranks' histories go now, a dict per rank, before
        its last steps are analysed (a large job's peak)."""
        self._late, self._episodes, self._alarmed, self._quiet = {}, {}, set(), {}
        if self.compute is not None:
            self.compute = RankCompute()

    def _judge(self, through: int) -> list[Finding]:
        """Judge the collectives of the steps up to ``through``, in the order of their first arrival."""
        done = sorted(
            (c for c in self._open.values() if c.step <= through), key=lambda c: (min(c.arrivals), c.group, c.seq)
        )
        findings: list[Finding] = []
        for c in done:
            del self._open[(c.group, c.seq)]
            self._judged_through = max(self._judged_through, c.step)
            findings.extend(self._close(c))
        return findings

    def _close(self, c: _Open) -> list[Finding]:
        """Judge one collective; its members' histories (Python numbers: a collective has a few members, and
        numpy's per-call cost was most of this)."""
        if len(c.ranks) < 2:
            return []
        arrivals = c.arrivals
        order = sorted(range(len(arrivals)), key=arrivals.__getitem__)  # stable, as np.argsort(kind="stable")
        last, second = order[-1], order[-2]
        gap = arrivals[last] - arrivals[second]
        late_rank = c.ranks[last] if gap > self.min_gap_s else None
        findings = []
        histories, quiet_of, window = self._late, self._quiet, self.window  # (most members are quiet: a few lookups)
        for rank in c.ranks:
            history = histories.get(rank)
            if history is None:
                history = histories[rank] = deque(maxlen=window)
            is_late = rank == late_rank
            history.append(is_late)
            if not is_late:
                quiet = quiet_of[rank] = quiet_of.get(rank, 0) + 1
                if quiet == window:  # counted up by one from 0 (a late arrival): the episode ends once
                    self._episodes.pop(rank, None)
                    self._alarmed.discard(rank)
                continue
            episode = self._episodes.get(rank)
            if episode is None:
                episode = self._episodes[rank] = _Episode(arrivals[last])
            episode.gaps.append(gap)
            episode.late += 1
            episode.waited_s += _waited(arrivals, arrivals[last])
            self._quiet[rank] = 0
            if rank not in self._alarmed and sum(history) >= self.persistence:
                self._alarmed.add(rank)
                root = rank if self.compute is None else self.compute.root(c.step)
                if root == rank:  # a rank late because another slowed it gets no finding
                    findings.append(self._finding(rank, max(c.ends)))
        return findings

    def _finding(self, rank: int, end: float) -> Finding:
        episode = self._episodes[rank]
        affected = sorted(r for r, h in self._late.items() if r != rank and sum(h) >= self.persistence)
        subjects = (elements.rank(self.job, rank), *([self.placement[rank]] if rank in self.placement else []))
        return Finding(
            kind="straggler",
            subjects=subjects,
            start=episode.start,
            end=end,
            severity=round(median(episode.gaps), 6),
            evidence={
                "late_collectives": episode.late,
                "window": self.window,
                "median_late_s": median(episode.gaps),
                "affected_ranks": affected,
                "measure": "arrival lateness at collectives (gap to the next-latest member)",
            },
            cost={"accel_s": round(episode.waited_s, 6)},
        )


PAIRWISE_BLOCK = 8  # numpy sums fewer values than this one after another (its pairwise sum's block)


def _waited(arrivals: list[float], last: float) -> float:
    """The peers' wait for the ``last`` arrival: numpy's pairwise sum (the cost's bits as they were), which
    for a collective of a few members is the sum in order, in Python numbers (numpy's per-call cost was most
    of a late collective's judging)."""
    if len(arrivals) >= PAIRWISE_BLOCK:
        return float((last - np.asarray(arrivals)).sum())
    waited = 0.0
    for at in arrivals:
        waited += last - at
    return waited
