import orjson
import pytest

from streams.contract.envelope import MAX_MESSAGE_BYTES, TELEMETRY_SCHEMA, decode_telemetry

GOOD = {"kind": "step", "job": "j", "step": 3, "start": 10.0, "duration": 1.5, "output_units": 4096}


def env(*samples: object, schema: str = TELEMETRY_SCHEMA) -> bytes:
    return orjson.dumps({"schema": schema, "source": "t", "sent_at": 1.0, "samples": list(samples)})


def test_valid_samples_are_kept_and_unknown_fields_tolerated() -> None:
    out = decode_telemetry(env(GOOD, {**GOOD, "step": 4, "future_field": [1, 2]}))
    assert [s.step for s in out.samples] == [3, 4]  # type: ignore[attr-defined]
    assert out.rejects == []


@pytest.mark.parametrize(
    ("sample", "reason"),
    [
        ({**GOOD, "duration": -1.0}, "out_of_range"),
        ({**GOOD, "duration": 0}, "out_of_range"),
        ({**GOOD, "duration": 1e12}, "out_of_range"),
        ({**GOOD, "step": "3"}, "wrong_type"),
        ({**GOOD, "start": None}, "wrong_type"),
        ({k: v for k, v in GOOD.items() if k != "job"}, "missing_field"),
        ({**GOOD, "kind": "telepathy"}, "unknown_kind"),
        ("not an object", "unknown_kind"),
    ],
)
def test_bad_samples_are_rejected_with_a_reason_and_good_ones_kept(sample: object, reason: str) -> None:
    out = decode_telemetry(env(GOOD, sample))
    assert len(out.samples) == 1
    assert [(r.reason, r.index) for r in out.rejects] == [(reason, 1)]


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"{nope", "malformed_json"),
        (
            b'{"schema": "driftlog.telemetry/1", "samples": [{"kind": "step", "start": NaN}]}',
            "malformed_json",
        ),
        (b"[1, 2]", "not_an_envelope"),
        (env(GOOD, schema="driftlog.telemetry/99"), "unknown_schema"),
        (b'{"schema": "driftlog.telemetry/1"}', "missing_field"),
        (b" " * (MAX_MESSAGE_BYTES + 1), "oversized"),
    ],
)
def test_bad_messages_are_rejected_whole(raw: bytes, reason: str) -> None:
    out = decode_telemetry(raw)
    assert out.samples == []
    assert [(r.reason, r.index) for r in out.rejects] == [(reason, None)]
    assert out.rejects[0].detail
