"""A processor resumed from a snapshot without its event-time buffer (``Processor.snapshot``), the buffered
range re-read (``rebuffer``), writes exactly what an uninterrupted processor writes: the same records with the
same provenance, and the same dead letters — with duplicates, late samples and decisions in the input."""

from __future__ import annotations

import pickle
import random

import pytest

from audit.records import SourcePosition
from streams.contract.admission import Admission
from streams.engine.engine import Engine
from streams.pipeline import Output, Processor
from streams.sim.scenarios import SCENARIOS
from streams.testing import run_stream
from streams.variants import Item

CHANNELS = [SourcePosition("telemetry", 0, 0), SourcePosition("decisions", 0, 0)]


def adversarial(items: list[Item], seed: int) -> list[Item]:
    """Some telemetry messages sent twice (one of them much later: a duplicate), one held back far behind
    its time (its samples late), decisions interleaved as they come."""
    rng = random.Random(seed)
    out = list(items)
    telemetry = [i for i, (kind, _) in enumerate(out) if kind == "telemetry"]
    for i in rng.sample(telemetry, 3):
        out.insert(min(len(out), i + rng.randint(1, 40)), out[i])
    held = out.pop(telemetry[len(telemetry) // 4])
    out.append(held)
    return out


def processor() -> Processor:
    return Processor(Engine(), Admission(allowed_lateness=5.0))


def resumed(items: list[Item], seed: int) -> tuple[Output, list[int]]:
    """Like run_stream, but at random points the processor is snapshotted, dropped, resumed from the
    snapshot and the pending range of each channel re-read; returns the output and the snapshot sizes."""
    rng = random.Random(seed)
    points = set(rng.sample(range(1, len(items)), k=min(6, len(items) - 1)))
    p = processor()
    p.declare(CHANNELS)
    out, sizes = Output(), []
    read: dict[str, list[bytes]] = {"telemetry": [], "decisions": []}
    for i, (kind, raw) in enumerate(items):
        if i in points:
            snap = p.snapshot()
            sizes.append(len(snap.state))
            p = Processor.resume(snap.state)
            for name, first in sorted(snap.pending.items()):
                topic = name.rpartition("/")[0]
                for offset in range(first, len(read[topic])):
                    p.rebuffer(read[topic][offset], SourcePosition(topic, 0, offset), topic)
        source = SourcePosition(kind, 0, len(read[kind]))
        read[kind].append(raw)
        out.extend(p.telemetry(raw, source) if kind == "telemetry" else p.decision(raw, source))
    out.extend(p.flush(SourcePosition("telemetry", 0, len(read["telemetry"]) - 1)))
    return out, sizes


@pytest.mark.parametrize("scenario", ["training-fabric", "inference-sla"])
@pytest.mark.parametrize("seed", [1, 2])
def test_resuming_from_the_released_state_writes_the_same(scenario: str, seed: int) -> None:
    items = adversarial([(k, v) for k, _, v in SCENARIOS[scenario](seed, 16, 30).run()], seed)
    whole = run_stream(items, processor())
    again, sizes = resumed(items, seed)
    assert [r.encode() for r in again.audit] == [r.encode() for r in whole.audit]
    assert [(d.source, d.rejects) for d in again.dead_letters] == [(d.source, d.rejects) for d in whole.dead_letters]
    assert any(r.type == "dead_letter" for r in whole.audit), "the input should have had duplicates and late samples"
    assert sizes


def test_the_snapshot_leaves_the_buffer_out() -> None:
    items = [(k, v) for k, _, v in SCENARIOS["training-fabric"](1, 16, 30).run() if k == "telemetry"]
    p = Processor(Engine(), Admission(allowed_lateness=2.0))
    p.declare(CHANNELS[:1])
    for offset, (_, raw) in enumerate(items[: len(items) // 2]):
        p.telemetry(raw, SourcePosition("telemetry", 0, offset))
    snap = p.snapshot()
    assert snap.pending["telemetry/0"] > 0, "released messages are not re-read"
    assert len(snap.state) < 0.6 * len(pickle.dumps(p)), "the buffered samples are not in the snapshot"
    assert not Processor.resume(snap.state).timeline.pending(), "nothing buffered until the range is re-read"
