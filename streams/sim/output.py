"""Where simulated data goes: files in a directory, or the telemetry and decisions topics."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import orjson
from aiokafka import AIOKafkaProducer

from streams.kafka.limits import TELEMETRY_COMPRESSION
from streams.sim.scenarios import Scenario

Progress = Callable[[str], None]


def to_directory(scenario: Scenario, seed: int, out: Path, progress: Progress) -> dict[str, int]:
    """``telemetry.jsonl`` and ``decisions.jsonl`` (one Kafka value per line) and ``ground_truth.json``."""
    out.mkdir(parents=True, exist_ok=True)
    counts = {"telemetry": 0, "decisions": 0}
    files = {kind: (out / f"{kind}.jsonl").open("wb") for kind in counts}
    try:
        for kind, _, value in scenario.run():
            files[kind].write(value + b"\n")
            counts[kind] += 1
            if counts["telemetry"] % 500 == 0 and kind == "telemetry":
                progress(f"{counts['telemetry']:,} telemetry messages")
    finally:
        for f in files.values():
            f.close()
    (out / "ground_truth.json").write_bytes(orjson.dumps(scenario.ground_truth(seed), option=orjson.OPT_INDENT_2))
    return counts


async def to_kafka(
    scenario: Scenario, seed: int, bootstrap: str, topics: dict[str, str], truth: Path, progress: Progress
) -> dict[str, int]:
    """Produce every message, keyed by job (so a job stays on one partition); the ground truth to a file."""
    counts = {"telemetry": 0, "decisions": 0}
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=20, max_request_size=8 << 20,
                                compression_type=TELEMETRY_COMPRESSION)  # fmt: skip
    await producer.start()
    try:
        for kind, key, value in scenario.run():
            await producer.send(topics[kind], value, key=key.encode())
            counts[kind] += 1
            if counts["telemetry"] % 500 == 0 and kind == "telemetry":
                progress(f"{counts['telemetry']:,} telemetry messages sent")
        await producer.flush()
    finally:
        await producer.stop()
    truth.write_bytes(orjson.dumps(scenario.ground_truth(seed), option=orjson.OPT_INDENT_2))
    return counts


def run_to_kafka(*args: object) -> dict[str, int]:
    return asyncio.run(to_kafka(*args))  # type: ignore[arg-type]
