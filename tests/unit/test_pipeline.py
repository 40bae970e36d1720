"""The live agent's processor, driven by the broker-free harness."""

from streams.engine.engine import EngineConfig
from streams.synthetic import SyntheticJob, envelope
from streams.testing import run_messages


def test_synthetic_job_yields_one_finding_and_no_dead_letters() -> None:
    job = SyntheticJob()
    out = run_messages(job.messages())
    assert out.samples_by_kind == {"step": job.steps}
    assert out.dead_letters == []
    assert [r.type for r in out.audit] == ["finding"]
    finding = out.audit[0]
    assert finding.body["evidence"]["onset_step"] == job.slow_from
    assert finding.key == f"job:{job.job}"
    # the record names the input message that completed the evidence
    assert finding.source.offset == finding.body["evidence"]["detected_at_step"] // job.steps_per_message


def test_bad_input_is_dead_lettered_and_the_stream_goes_on() -> None:
    job = SyntheticJob()
    msgs = list(job.messages())
    msgs.insert(3, b"\x00garbage")
    msgs.insert(7, envelope([{"kind": "step", "job": "x", "step": 1, "start": 0.0, "duration": -5.0}], "s"))
    out = run_messages(msgs)
    assert [(d.reject.reason, d.source.offset, d.reject.index) for d in out.dead_letters] == [
        ("malformed_json", 3, None),
        ("out_of_range", 7, 0),
    ]
    assert out.dead_letters[0].original == b"\x00garbage"
    assert sum(r.type == "dead_letter" for r in out.audit) == 2
    assert sum(r.type == "finding" for r in out.audit) == 1  # the valid stream still found the slowdown
    assert out.samples_by_kind == {"step": job.steps}


def test_duplicate_and_late_steps_are_ignored_deterministically() -> None:
    job = SyntheticJob()
    msgs = list(job.messages())
    replayed = msgs[:12] + msgs[5:9] + msgs[12:]  # a producer retry re-sent four messages
    a, b = run_messages(msgs), run_messages(replayed)
    assert [r.body["evidence"] for r in a.audit] == [r.body["evidence"] for r in b.audit]
    assert [r.id for r in a.audit] == [r.id for r in b.audit]


def test_engine_settings_reach_the_detector() -> None:
    out = run_messages(SyntheticJob(slowdown=1.25).messages(), EngineConfig(step_drift_threshold=0.5))
    assert out.audit == []
