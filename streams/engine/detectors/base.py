"""The contract every detector keeps; tests/unit/test_detector_contract.py checks each subclass against it.

A detector is a dataclass subclassing :class:`Detector` that holds the state of one key — a job, a service
(``service:<s>``), or the control plane as a whole (``''``) — with an :meth:`Detector.update` that takes the
next observation (or batch of them) in input order and returns the findings it completes. Beyond that:

- **pure and deterministic**: event time only, no clock, no I/O; the same input gives the same findings;
- **self-contained**: what it needs besides its own state (e.g. the operator graph, to relate two
  elements) comes in as an argument of ``update``; it keeps no handle back into the engine (no callback)
  and shares no mutable state with another detector;
- **resumable**: pickled mid-stream (or deep-copied), it continues exactly as the original would, so a
  checkpoint or a replay reproduces the live findings; copies are independent of each other;
- **bounded**: its :meth:`Detector.state_size` stops growing after a warm-up, however long the key lives.
"""

from __future__ import annotations

import pickle
from abc import ABC, abstractmethod
from typing import Any

from streams.engine.findings import Finding

Found = Finding | list[Finding] | None


class Detector(ABC):
    job: str  # the key whose state it holds: a job, a service entity, or '' for the control plane

    @abstractmethod
    def update(self, *observation: Any, **named: Any) -> Found:
        """The next observation (each detector types its own), in input order: the findings it completes —
        one, a list, or None."""

    def state_size(self) -> int:
        """The bytes of its state, pickled (the contract test checks that it stays bounded)."""
        return len(pickle.dumps(self, protocol=pickle.HIGHEST_PROTOCOL))


def findings(found: Found) -> list[Finding]:
    """What an :meth:`Detector.update` returned, as a list."""
    if found is None:
        return []
    return found if isinstance(found, list) else [found]
