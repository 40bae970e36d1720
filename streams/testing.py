"""A broker-free harness: run Kafka-like messages through the same processor the live agents use."""

from __future__ import annotations

from collections.abc import Iterable

from audit.records import SourcePosition
from streams.engine.engine import Engine, EngineConfig
from streams.pipeline import Output, Processor


def run_messages(
    messages: Iterable[bytes],
    config: EngineConfig | None = None,
    decisions: Iterable[bytes] = (),
    processor: Processor | None = None,
) -> Output:
    """Feed telemetry ``messages`` (offsets 0, 1, ... of topic ``telemetry``), then ``decisions`` (of topic
    ``decisions``) through one processor; return everything it emitted."""
    processor = processor or Processor(Engine(config or EngineConfig()))
    total = Output()
    for offset, raw in enumerate(messages):
        total.extend(processor.telemetry(raw, SourcePosition("telemetry", 0, offset)))
    for offset, raw in enumerate(decisions):
        total.extend(processor.decision(raw, SourcePosition("decisions", 0, offset)))
    return total
