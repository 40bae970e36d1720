"""The contract every detector keeps; tests/unit/test_detector_contract.py checks each one against it.

A detector is a dataclass holding the state of one job (or, for control coherence, of the control plane
as a whole), with an ``update(...)`` that takes the next
observation (or batch of them) in input order and returns the findings it completes. Beyond that:

- **pure and deterministic**: event time only, no clock, no I/O; the same input gives the same findings;
- **resumable**: pickled mid-stream (or deep-copied), it continues exactly as the original would, so a
  checkpoint or a replay reproduces the live findings; copies are independent of each other;
- **bounded**: its state stops growing after a warm-up, however long the job runs.
"""

from __future__ import annotations

from typing import Protocol


class Detector(Protocol):
    job: str
