"""Duplicates and late arrivals, decided the same way on every replay (input order only, no wall clock).

- **Duplicate message**: a telemetry message whose ``(source, seq)`` was already admitted, or whose
  ``seq`` is more than ``dedupe_window`` behind the newest seq of its source (too old to tell), is refused
  whole with reason ``duplicate``. Messages without ``seq`` are never considered duplicates.
- **Duplicate decision**: a decision whose ``id`` was admitted before (among the last ``dedupe_window``
  ids) is refused with reason ``duplicate``.
- **Late sample**: a sample whose event time is more than ``allowed_lateness`` seconds before the newest
  event time seen from its source *before this message* is refused with reason ``late``. Within the
  allowed lateness, out-of-order samples are admitted; the engine orders what it needs to.

- **Future sample**: a sample whose event time is more than ``max_future`` seconds after the message's
  reference time (``now``: the Kafka record's timestamp, or the envelope's ``sent_at``; both are part of
  the input, so a replay decides the same) is refused with reason ``future``, and it does not move its
  source's newest event time: one sample dated 2099 does not make every later sample of its source late.
  Without a reference time nothing is refused as future.

State is bounded: at most ``max_sources`` sources are remembered (least recently seen forgotten first).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from streams.contract.envelope import SampleBatch
from streams.contract.schema import EVENT_TIME


@dataclass
class _Source:
    max_seq: int = -1
    recent: set[int] = field(default_factory=set)
    max_time: float = -np.inf


@dataclass
class Admission:
    allowed_lateness: float = 300.0
    max_future: float = 3600.0
    dedupe_window: int = 10_000
    max_sources: int = 65_536
    _sources: OrderedDict[str, _Source] = field(default_factory=OrderedDict)
    _decision_ids: OrderedDict[str, None] = field(default_factory=OrderedDict)

    def _source(self, name: str) -> _Source:
        state = self._sources.get(name)
        if state is None:
            state = self._sources[name] = _Source()
            if len(self._sources) > self.max_sources:
                self._sources.popitem(last=False)
        else:
            self._sources.move_to_end(name)
        return state

    def duplicate_message(self, source: str, seq: int | None) -> str | None:
        """Why the message is a duplicate, or None (and then it is remembered as admitted)."""
        if seq is None:
            return None
        state = self._source(source)
        if seq in state.recent:
            return f"message ({source!r}, seq {seq}) was already processed"
        if seq < state.max_seq - self.dedupe_window:
            return f"seq {seq} of {source!r} is more than {self.dedupe_window} behind {state.max_seq}"
        state.recent.add(seq)
        if seq > state.max_seq:
            state.max_seq = seq
            if len(state.recent) > 2 * self.dedupe_window:
                floor = seq - self.dedupe_window
                state.recent = {s for s in state.recent if s >= floor}
        return None

    def late_mask(self, source: str, batches: list[SampleBatch]) -> list[npt.NDArray[np.bool_]]:
        """Per batch, which samples are too late; then advance the source's newest event time."""
        return [late for late, _ in self.screen(source, batches)]

    def screen(
        self, source: str, batches: list[SampleBatch], now: float | None = None
    ) -> list[tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]]:
        """Per batch, (too late, too far in the future) masks; then advance the source's newest event time
        over the samples admitted. ``now``: the message's reference time in seconds (see the module)."""
        return [
            (np.zeros(len(b), np.bool_), np.zeros(len(b), np.bool_)) if masks is None else masks
            for b, masks in zip(batches, self.refused(source, batches, now), strict=True)
        ]

    def refused(
        self, source: str, batches: list[SampleBatch], now: float | None = None
    ) -> list[tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]] | None]:
        """:meth:`screen`, None for a batch none of whose samples is refused (the usual batch: no masks made
        and looked at again)."""
        state = self._source(source)
        cutoff = state.max_time - self.allowed_lateness
        horizon = np.inf if now is None else now + self.max_future
        masks: list[tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]] | None] = []
        newest = state.max_time
        for batch in batches:
            high = _usual(batch, cutoff, horizon)
            if high is not None:
                masks.append(None)
                newest = max(newest, high)
                continue
            times = batch.columns[EVENT_TIME[batch.kind]]
            future = times > horizon
            late = (times < cutoff) & ~future
            masks.append((late, future))
            admitted = times[~(late | future)]
            if len(admitted):
                newest = max(newest, float(admitted.max()))
        state.max_time = newest
        return masks

    def duplicate_decision(self, decision_id: str) -> bool:
        if decision_id in self._decision_ids:
            self._decision_ids.move_to_end(decision_id)
            return True
        self._decision_ids[decision_id] = None
        if len(self._decision_ids) > self.dedupe_window:
            self._decision_ids.popitem(last=False)
        return False


def _usual(batch: SampleBatch, cutoff: float, horizon: float) -> float | None:
    """The newest event time of a batch none of whose samples is late or in the future (told by its ends:
    :meth:`SampleBatch.time_bounds`; a NaN among them is looked at), else None."""
    ends = batch.time_bounds()
    return ends[1] if ends is not None and ends[0] >= cutoff and ends[1] <= horizon else None
