"""Same input, same records: for every simulator scenario (and several jobs at once), the audit records are
identical whether the input arrives (a) in event order, (b) decisions first, (c) decisions last, (d) batched
per rank, (e) through processors snapshotted and restored at random points, (f) split between two engines
that each keep half of the jobs, or (g) read from files by ``analyze`` (listed in any order)."""

from __future__ import annotations

import pickle
import random
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from streams.analyze import analyze_files
from streams.engine import layouts
from streams.engine.engine import Engine
from streams.pipeline import Output, Processor
from streams.sim.scenarios import SCENARIOS
from streams.testing import run_stream
from streams.variants import Item, decisions_first, decisions_last, merged, per_rank, without_job

STEPS = 60
RANKS = {"training-sync-loss": 32, "control-storm": 32, "control-storm-healthy": 32}
Records = dict[tuple[str, str], bytes]


STEPS_OF = {"serving-saturation": 100, "serving-saturation-healthy": 100}


def scenario(name: str, seed: int = 1) -> list[Item]:
    steps = STEPS_OF.get(name, STEPS)
    return [(kind, value) for kind, _, value in SCENARIOS[name](seed, RANKS.get(name, 16), steps).run()]


def several_jobs() -> list[Item]:
    return merged(scenario("training-fabric"), scenario("inference-sla"), scenario("control-storm"))


def sampled_async_collectives() -> list[Item]:
    """A straggler among asynchronous collectives (two per group and step), every 100th step traced."""
    from tests.unit.test_collectives import BATCHINGS, job, messages, rank_of

    return [("telemetry", m) for m in messages(job(24, rank_of(1, 0, 1), every=100), BATCHINGS["per step"])]


CASES: dict[str, Callable[[], list[Item]]] = {name: lambda name=name: scenario(name) for name in SCENARIOS}
CASES["several-jobs"] = several_jobs
CASES["sampled-async-collectives"] = sampled_async_collectives
CASES["several-jobs-no-job-samples"] = lambda: without_job(several_jobs())  # power and fabric topology of no job


def records(out: Output) -> Records:
    assert out.dead_letters == [], [d.rejects[:3] for d in out.dead_letters[:3]]
    found: Records = {}
    for r in out.audit:
        body = orjson.dumps(r.body, option=orjson.OPT_SORT_KEYS)
        assert found.setdefault((r.type, r.id), body) == body, f"{r.type} {r.id} emitted twice, differently"
    return found


def encoded(out: Output) -> set[bytes]:
    """The records as the audit topic carries them (provenance included)."""
    return {r.encode() for r in out.audit}


def restored(items: list[Item], seed: int) -> Output:
    """Like run_stream, but the processor is pickled and a copy carries on, at random points."""
    rng = random.Random(seed)
    points = set(rng.sample(range(len(items)), k=min(5, len(items))))
    processor = Processor()
    out = Output()
    from audit.records import SourcePosition

    processor.declare([SourcePosition("telemetry", 0, 0), SourcePosition("decisions", 0, 0)])
    offsets = {"telemetry": 0, "decisions": 0}
    for i, (kind, raw) in enumerate(items):
        if i in points:
            processor = pickle.loads(pickle.dumps(processor))
            layouts._kept.clear()  # a restart: the process-wide step-graph layouts are gone too
        source = SourcePosition(kind, 0, offsets[kind])
        offsets[kind] += 1
        out.extend(processor.telemetry(raw, source) if kind == "telemetry" else processor.decision(raw, source))
    out.extend(processor.flush(SourcePosition("telemetry", 0, offsets["telemetry"])))
    return out


def split(items: list[Item]) -> Records:
    """Two engines, each keeping its half of the jobs (and one the control plane), both reading everything."""
    first = records(run_stream(items, Processor(Engine(shard=(0, 2)))))
    second = records(run_stream(items, Processor(Engine(shard=(1, 2), owns_control=False), decision_share=(1, 2))))
    assert not first.keys() & second.keys(), "a record emitted by both engines"
    return first | second


def analyzed(items: list[Item], tmp: Path) -> Records:
    """The input written as files (telemetry and decisions apart, telemetry in two halves), given to analyze
    in reverse order."""
    telemetry = [raw for kind, raw in items if kind == "telemetry"]
    half = len(telemetry) // 2
    files = {
        "a-telemetry.jsonl": telemetry[:half],
        "b-telemetry.jsonl": telemetry[half:],
        "c-decisions.jsonl": [raw for kind, raw in items if kind == "decisions"],
    }
    for name, lines in files.items():
        (tmp / name).write_bytes(b"".join(line + b"\n" for line in lines))
    return records(analyze_files(sorted((tmp / n for n in files), reverse=True)))


@pytest.mark.parametrize("case", sorted(CASES))
def test_records_depend_on_the_input_only(case: str, tmp_path: Path) -> None:
    items = CASES[case]()
    expected = records(run_stream(items))
    assert any(t != "graph_snapshot" for t, _ in expected), "nothing to compare"
    first, last = run_stream(decisions_first(items)), run_stream(decisions_last(items))
    assert records(first) == expected, "(b) decisions first"
    assert records(last) == expected, "(c) decisions last"
    # provenance too: an engine record names the message that contributed to its epoch last, fixed by the input
    assert encoded(first) == encoded(last) == encoded(run_stream(items)), "provenance depends on arrival order"
    assert records(run_stream(per_rank(items))) == expected, "(d) per-rank batching"
    assert records(restored(items, seed=len(case))) == expected, "(e) restored from snapshots"
    assert split(items) == expected, "(f) two engines splitting the jobs"
    assert analyzed(items, tmp_path) == expected, "(g) analyze of the files"


def test_a_sample_older_than_the_watermark_is_dead_lettered_not_dropped() -> None:
    from audit.records import SourcePosition
    from streams.contract.admission import Admission

    telemetry = [raw for kind, raw in scenario("training-fabric-healthy") if kind == "telemetry"]
    processor = Processor(admission=Admission(allowed_lateness=5.0))
    processor.declare([SourcePosition("telemetry", 0, 0)])
    for offset, raw in enumerate(telemetry):
        assert processor.telemetry(raw, SourcePosition("telemetry", 0, offset)).dead_letters == []
    # the first message again, from another source (so not a duplicate): older than the watermark by now
    doc = orjson.loads(telemetry[0])
    late = orjson.dumps({**doc, "source": "replayed-exporter", "seq": 0})
    out = processor.telemetry(late, SourcePosition("telemetry", 0, len(telemetry)))
    rejects = [r for d in out.dead_letters for r in d.rejects]
    assert {r.reason for r in rejects} == {"late"} and len(rejects) == sum(out.samples_by_kind.values()) + len(
        rejects) > 0  # fmt: skip
    assert "watermark" in rejects[0].detail
