"""The op fields ``p2p`` and ``blocking``: optional (old producers omit them), checked on both decode paths."""

from __future__ import annotations

from typing import Any
from unittest import mock

import orjson
import pytest

from streams.contract import envelope
from streams.contract.envelope import Decoded, decode_telemetry

SPAN = {"kind": "op", "job": "j", "step": 1, "rank": 0, "op": "batch_p2p", "op_class": "comm", "start": 1.0,
        "duration": 0.5, "peer": 1}  # fmt: skip


def message(**fields: Any) -> bytes:
    return orjson.dumps({"schema": "driftlog.telemetry/1", "source": "s", "samples": [{**SPAN, **fields}]})


def both_paths(raw: bytes) -> tuple[Decoded, Decoded]:
    with (
        mock.patch.object(envelope, "decode_fast", lambda raw: None),
        mock.patch.object(envelope, "decode_native", lambda raw: None),
    ):
        precise = decode_telemetry(raw)
    return decode_telemetry(raw), precise


@pytest.mark.parametrize(
    ("fields", "p2p", "blocking"),
    [({}, "", False), ({"p2p": "sendrecv", "blocking": True}, "sendrecv", True), ({"p2p": "recv"}, "recv", False)],
)
def test_transfer_fields_decode_with_their_defaults(fields: dict[str, Any], p2p: str, blocking: bool) -> None:
    for decoded in both_paths(message(**fields)):
        assert decoded.rejects == []
        (batch,) = decoded.batches
        assert batch.columns["p2p"].tolist() == [p2p]
        assert batch.columns["blocking"].dtype == bool and batch.columns["blocking"].tolist() == [blocking]


@pytest.mark.parametrize(
    ("fields", "reason"),
    [({"p2p": "both"}, "out_of_range"), ({"blocking": 1}, "wrong_type"), ({"blocking": "true"}, "wrong_type")],
)
def test_a_wrong_transfer_field_is_refused_by_both_paths(fields: dict[str, Any], reason: str) -> None:
    for decoded in both_paths(message(**fields)):
        assert [r.reason for r in decoded.rejects] == [reason]


def test_columnar_transfer_fields() -> None:
    data = {k: v for k, v in SPAN.items() if k != "kind"} | {"blocking": [True, False], "p2p": "sendrecv"}
    raw = orjson.dumps(
        {"schema": "driftlog.telemetry/1", "source": "s", "columns": [{"kind": "op", "n": 2, "data": data}]}
    )
    for decoded in both_paths(raw):
        (batch,) = decoded.batches
        assert batch.columns["blocking"].tolist() == [True, False]
        assert batch.columns["p2p"].tolist() == ["sendrecv", "sendrecv"]
