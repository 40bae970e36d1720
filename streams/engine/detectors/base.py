"""The detector contract: a small object fed one observation at a time, in event-time order."""

from __future__ import annotations

from typing import Protocol, TypeVar

from streams.engine.findings import Finding

Obs_contra = TypeVar("Obs_contra", contravariant=True)


class Detector(Protocol[Obs_contra]):
    """Feed observations of one series with :meth:`update`; it returns a finding when drift is detected.

    Implementations keep bounded state, are picklable and deterministic (same input, same findings).
    """

    def update(self, obs: Obs_contra) -> Finding | None: ...
