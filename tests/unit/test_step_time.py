from dataclasses import replace

from streams.engine.detectors.step_time import StepObs, StepTimeDrift
from streams.synthetic import SyntheticJob


def steps(job: SyntheticJob) -> list[StepObs]:
    return [StepObs(s["job"], s["step"], s["start"], s["duration"]) for s in job.samples()]


def run(job: SyntheticJob) -> list:
    detector = StepTimeDrift(job.job, warmup=20, threshold=0.05)
    return [f for s in steps(job) if (f := detector.update(s)) is not None]


def test_healthy_job_raises_nothing() -> None:
    assert run(SyntheticJob(slowdown=1.0, jitter=0.04, steps=2000)) == []


def test_sustained_slowdown_is_found_once_with_onset_and_magnitude() -> None:
    findings = run(SyntheticJob(slow_from=150, slowdown=1.25))
    assert len(findings) == 1
    f = findings[0]
    assert f.kind == "step_time_drift"
    assert f.subjects == ("job:llm-pretrain-demo",)
    assert f.evidence["onset_step"] == 150
    assert 150 <= f.evidence["detected_at_step"] <= 155
    assert abs(f.severity - 1.25) < 0.05
    assert f.cost["extra_step_seconds"] > 0


def test_slowdown_below_threshold_is_not_drift() -> None:
    assert run(SyntheticJob(slowdown=1.03)) == []


def test_a_single_slow_step_is_not_drift() -> None:
    job = SyntheticJob(slowdown=1.0)
    samples = steps(job)
    samples[100] = samples[100]._replace(duration=samples[100].duration * 1.5)
    detector = StepTimeDrift(job.job)
    assert [f for s in samples if (f := detector.update(s))] == []


def test_same_input_gives_same_finding_ids() -> None:
    a = run(SyntheticJob(seed=3))
    b = run(SyntheticJob(seed=3))
    assert [f.id for f in a] == [f.id for f in b]
    assert [f.id for f in a] != [f.id for f in run(replace(SyntheticJob(seed=3), slow_from=160))]


def test_detector_rearms_after_recovery() -> None:
    job = SyntheticJob(steps=400, slow_from=100)
    samples = steps(job)
    # heal from step 160, slow again from 300
    healed = [s if s.step < 160 or s.step >= 300 else s._replace(duration=s.duration / 1.25) for s in samples]
    detector = StepTimeDrift(job.job)
    onsets = [f.evidence["onset_step"] for s in healed if (f := detector.update(s))]
    assert onsets == [100, 160, 300]  # the recovery at 160 is a change too (direction "down")
