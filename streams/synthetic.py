"""A small synthetic training job for the demo and the tests: step summaries with an injected slowdown.

(The full scenario simulator with ground truth is ``driftlog simulate``; this is the walking skeleton's.)
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson

from streams.contract.schema import TELEMETRY_SCHEMA


@dataclass(frozen=True)
class SyntheticJob:
    job: str = "llm-pretrain-demo"
    steps: int = 240
    step_s: float = 1.0
    jitter: float = 0.02
    slow_from: int = 150  # first step of the injected slowdown (a straggler rank stalls every collective)
    slowdown: float = 1.25
    tokens_per_step: float = 4_194_304.0
    steps_per_message: int = 10
    t0: float = 1_767_225_600.0  # 2026-01-01T00:00:00Z: event time, never the wall clock
    seed: int = 7

    def samples(self) -> Iterator[dict[str, Any]]:
        rng = random.Random(self.seed)
        t = self.t0
        for step in range(self.steps):
            factor = self.slowdown if step >= self.slow_from else 1.0
            duration = self.step_s * factor * (1.0 + rng.uniform(-self.jitter, self.jitter))
            yield {
                "kind": "step",
                "job": self.job,
                "step": step,
                "start": round(t, 6),
                "duration": round(duration, 6),
                "output_units": self.tokens_per_step,
                "attempts": 1,
            }
            t += duration

    def messages(self) -> Iterator[bytes]:
        """Envelopes of ``steps_per_message`` steps each, as a training loop's exporter would send them."""
        batch: list[dict[str, Any]] = []
        seq = 0
        for sample in self.samples():
            batch.append(sample)
            if len(batch) == self.steps_per_message:
                yield envelope(batch, source=f"trainer/{self.job}", seq=seq)
                batch, seq = [], seq + 1
        if batch:
            yield envelope(batch, source=f"trainer/{self.job}", seq=seq)


def envelope(samples: list[dict[str, Any]], source: str, seq: int | None = None) -> bytes:
    """A row-wise telemetry envelope (``seq`` numbers the messages of one source, for de-duplication)."""
    sent_at = max((s.get("start", 0.0) for s in samples), default=0.0)
    doc: dict[str, Any] = {"schema": TELEMETRY_SCHEMA, "source": source, "sent_at": sent_at, "samples": samples}
    if seq is not None:
        doc["seq"] = seq
    return orjson.dumps(doc)
