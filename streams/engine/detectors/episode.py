"""Episodes shared by the detectors that alarm on "k of the last n observations": one alarm per episode,
re-armed after ``window`` unflagged observations in a row."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field


@dataclass
class KOfN:
    window: int
    persistence: int
    _recent: deque[bool] = field(default_factory=deque)
    _quiet: int = 0
    _onset: float | None = None
    _alarmed: bool = False

    @property
    def alarmed(self) -> bool:
        """Whether this episode has alarmed already (until it is re-armed)."""
        return self._alarmed

    def update(self, flagged: bool, time: float) -> float | None:
        """The next observation; the episode's onset (time of its first flagged observation) when this one
        completes ``persistence`` of the last ``window``, else None."""
        self._recent.append(flagged)
        if len(self._recent) > self.window:
            self._recent.popleft()
        if flagged:
            self._quiet = 0
            self._onset = time if self._onset is None else self._onset
        else:
            self._quiet += 1
            if self._quiet >= self.window:
                self._alarmed, self._onset = False, None
        if self._alarmed or self._onset is None or sum(self._recent) < self.persistence:
            return None
        self._alarmed = True
        return self._onset
