"""What the engine emits: findings (something degraded), with deterministic ids."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Finding:
    """A detected degradation.

    ``subjects`` are operator-graph element ids (``job:<id>``, ``rank:<job>/<r>``, ...); ``start``/``end``
    are event-time seconds; ``cost`` maps a unit (e.g. ``extra_step_seconds``) to an estimate.
    """

    kind: str
    subjects: tuple[str, ...]
    start: float
    end: float
    severity: float
    evidence: dict[str, Any] = field(default_factory=dict)
    cost: dict[str, float] = field(default_factory=dict)
    series: str = ""  # tells apart findings of one kind, subjects and start: a subject's series (a metric), or
    # the job that judged it (a control conflict seen by two jobs)

    @property
    def id(self) -> str:
        """Derived from content that a replay reproduces exactly (never from wall time or arrival order)."""
        key = f"{self.kind}|{','.join(self.subjects)}|{self.start!r}" + (f"|{self.series}" if self.series else "")
        return hashlib.sha256(key.encode()).hexdigest()[:32]

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "subjects": list(self.subjects),
            "start": self.start,
            "end": self.end,
            "severity": self.severity,
            "evidence": self.evidence,
            "cost": self.cost,
        }
