"""A broker-free harness: run Kafka-like messages through the same processor the live agent uses."""

from __future__ import annotations

from collections.abc import Iterable

from audit.records import SourcePosition
from streams.engine.engine import Engine, EngineConfig
from streams.pipeline import Output, TelemetryProcessor


def run_messages(
    messages: Iterable[bytes],
    config: EngineConfig | None = None,
    topic: str = "telemetry",
    partition: int = 0,
) -> Output:
    """Feed ``messages`` (as offsets 0, 1, ...) through one processor; return everything it emitted."""
    processor = TelemetryProcessor(Engine(config or EngineConfig()))
    total = Output()
    for offset, raw in enumerate(messages):
        out = processor.handle(raw, SourcePosition(topic, partition, offset))
        total.audit.extend(out.audit)
        total.dead_letters.extend(out.dead_letters)
        for kind, n in out.samples_by_kind.items():
            total.samples_by_kind[kind] = total.samples_by_kind.get(kind, 0) + n
    return total
