"""The live agents' processor, driven by the broker-free harness."""

import orjson

from streams.contract.admission import Admission
from streams.engine.engine import Engine, EngineConfig
from streams.pipeline import Processor
from streams.synthetic import SyntheticJob, envelope
from streams.testing import run_messages

DECISION = {
    "schema": "driftlog.decision/1", "id": "d-1", "time": 1_767_225_700.0, "controller": "power-manager/rack7",
    "layer": "power", "action": "power_cap", "targets": ["node:n7"], "parameters": {"cap_w": 450},
    "reason": "rack over budget", "expected_effect": {"metric": "power_w", "direction": "down"},
}  # fmt: skip


def test_synthetic_job_yields_one_finding_and_no_dead_letters() -> None:
    job = SyntheticJob()
    out = run_messages(job.messages())
    assert out.samples_by_kind == {"step": job.steps}
    assert out.dead_letters == []
    assert [r.type for r in out.audit if r.type != "metrics_rollup"] == ["finding"]
    finding = next(r for r in out.audit if r.type == "finding")
    assert finding.body["evidence"]["onset_step"] == job.slow_from
    assert finding.key == f"job:{job.job}"
    # provenance: the input message whose arrival let event time pass the evidence (at or after it)
    assert finding.source.topic == "telemetry"
    assert finding.source.offset >= finding.body["evidence"]["detected_at_step"] // job.steps_per_message


def test_bad_input_is_dead_lettered_once_per_message_and_the_stream_goes_on() -> None:
    job = SyntheticJob()
    msgs = list(job.messages())
    msgs.insert(3, b"\x00garbage")
    bad_steps = [{"kind": "step", "job": "x", "step": i, "start": 0.0, "duration": -5.0} for i in range(3)]
    msgs.insert(7, envelope([*bad_steps, {"kind": "step", "job": "x", "step": 9, "start": 0.0, "duration": 1}], "s"))
    out = run_messages(msgs)
    assert [(d.source.offset, dict(d.counts())) for d in out.dead_letters] == [
        (3, {"malformed_json": 1}),
        (7, {"out_of_range": 3}),
    ]
    assert out.dead_letters[0].original == b"\x00garbage"
    records = [r.body for r in out.audit if r.type == "dead_letter"]
    assert [(b["reason"], b["count"], b["indices"], b["whole_message"]) for b in records] == [
        ("malformed_json", 1, [], True),
        ("out_of_range", 3, [0, 1, 2], False),
    ]
    headers = dict(out.dead_letters[1].headers())
    assert orjson.loads(headers["driftlog.reasons"]) == {"out_of_range": 3}
    assert headers["driftlog.source"] == b"telemetry/0/7"
    assert sum(r.type == "finding" for r in out.audit) == 1  # the valid stream still found the slowdown
    assert out.samples_by_kind == {"step": job.steps + 1}


def test_redelivered_messages_are_duplicates_by_source_and_seq() -> None:
    job = SyntheticJob()
    msgs = list(job.messages())
    replayed = msgs[:12] + msgs[5:9] + msgs[12:]  # a producer retry re-sent four messages
    a, b = run_messages(msgs), run_messages(replayed)
    assert [r.id for r in a.audit if r.type == "finding"] == [r.id for r in b.audit if r.type == "finding"]
    assert [dict(d.counts()) for d in b.dead_letters] == [{"duplicate": 1}] * 4
    assert b.samples_by_kind == a.samples_by_kind


def test_late_samples_are_refused_within_lateness_kept() -> None:
    t0 = 1_767_225_600.0

    def metric(t: float) -> dict[str, object]:
        return {"kind": "metric", "entity": "device:g0", "name": "power_w", "value": 500.0, "time": t}

    msgs = [
        envelope([metric(t0 + 1000)], "exporter-1", 0),
        envelope([metric(t0 + 900), metric(t0 + 600), metric(t0 + 699.9)], "exporter-1", 1),
        envelope([metric(t0)], "exporter-2", 0),  # another source has its own clock
    ]
    out = run_messages(msgs, processor=Processor(Engine(), Admission(allowed_lateness=300)))
    assert [(d.source.offset, [(r.reason, r.index) for r in d.rejects]) for d in out.dead_letters] == [
        (1, [("late", 1), ("late", 2)])
    ]
    assert out.samples_by_kind == {"metric": 3}


def test_decisions_are_recorded_and_bad_or_repeated_ones_dead_lettered() -> None:
    decisions = [
        orjson.dumps(DECISION),
        orjson.dumps(DECISION),  # the same id again
        orjson.dumps({**DECISION, "id": "d-2", "layer": "weather"}),
        orjson.dumps({**DECISION, "id": "d-3", "schema": "driftlog.decision/2"}),
        orjson.dumps({k: v for k, v in DECISION.items() if k != "targets"} | {"id": "d-4"}),
    ]
    out = run_messages([], decisions=decisions)
    recorded = [r for r in out.audit if r.type == "decision"]
    assert [r.body["id"] for r in recorded] == ["d-1"]
    assert recorded[0].body["expected_effect"] == {"metric": "power_w", "direction": "down"}
    assert recorded[0].key == "power-manager/rack7"
    assert [(d.source.offset, d.rejects[0].reason) for d in out.dead_letters] == [
        (1, "duplicate"), (2, "out_of_range"), (3, "unknown_schema"), (4, "missing_field"),
    ]  # fmt: skip


def test_engine_settings_reach_the_detector() -> None:
    out = run_messages(SyntheticJob(slowdown=1.25).messages(), EngineConfig(step_drift_threshold=0.5))
    assert [r for r in out.audit if r.type == "finding"] == []


def test_step_windows_are_rolled_up() -> None:
    job = SyntheticJob(steps=100, slow_from=50, slowdown=1.5, tokens_per_step=1000.0)
    rollups = [r.body for r in run_messages(job.messages(), EngineConfig(rollup_steps=50)).audit
               if r.type == "metrics_rollup"]  # fmt: skip
    assert [(r["name"], r["n"]) for r in rollups] == [("step_s", 50), ("step_s", 50)]  # no accelerator count
    assert 1.45 < rollups[1]["p50"] / rollups[0]["p50"] < 1.55
    assert abs(rollups[0]["window_end"] - rollups[1]["window_start"]) < 1e-4
