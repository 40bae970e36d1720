"""OpenTelemetry metrics (otlp_json, otlp_proto) → ``metric`` samples."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from google.protobuf.json_format import MessageToJson
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue
from opentelemetry.proto.metrics.v1 import metrics_pb2 as m
from opentelemetry.proto.resource.v1.resource_pb2 import Resource

from streams.contract.envelope import decode_telemetry
from streams.formats.errors import FormatError
from streams.formats.otlp import envelopes
from streams.testing import run_stream

T_NS = 1_767_225_600_000_000_000
TAGS = '{"arrayValue":{"values":[{"stringValue":"a"},{"intValue":"2"}]}}'  # an array attribute, as JSON text
REQUEST_LABELS = f'code="200",http.route="/v1/chat",tags="{TAGS}"'


def kv(key: str, value: Any) -> KeyValue:
    if isinstance(value, int):
        return KeyValue(key=key, value=AnyValue(int_value=value))
    return KeyValue(key=key, value=AnyValue(string_value=str(value)))


def request(points: int = 2) -> ExportMetricsServiceRequest:
    """A DCGM-like power gauge per GPU, a counter with a data-point attribute, a histogram, a summary."""
    dcgm = m.Metric(name="DCGM_FI_DEV_POWER_USAGE", unit="W", gauge=m.Gauge(data_points=[
        m.NumberDataPoint(time_unix_nano=T_NS + i, as_double=300.0 + i, attributes=[kv("gpu", str(i))])
        for i in range(points)]))  # fmt: skip
    zero = m.Metric(name="queue_depth", gauge=m.Gauge(data_points=[m.NumberDataPoint(time_unix_nano=T_NS, as_int=0)]))
    tags = AnyValue(array_value=ArrayValue(values=[AnyValue(string_value="a"), AnyValue(int_value=2)]))
    route = [kv("http.route", "/v1/chat"), kv("code", 200), KeyValue(key="tags", value=tags)]
    counter_point = m.NumberDataPoint(time_unix_nano=T_NS, as_int=42, attributes=route)
    counter = m.Metric(name="requests", unit="1", sum=m.Sum(is_monotonic=True, data_points=[counter_point]))
    hist_point = m.HistogramDataPoint(
        time_unix_nano=T_NS, count=10, sum=2.5, min=0.1, max=0.9, bucket_counts=[5, 5], explicit_bounds=[0.5]
    )
    hist = m.Metric(name="latency", unit="s", histogram=m.Histogram(data_points=[hist_point]))
    quantile = m.SummaryDataPoint.ValueAtQuantile(quantile=0.99, value=0.5)
    summary_point = m.SummaryDataPoint(time_unix_nano=T_NS, count=4, sum=1.0, quantile_values=[quantile])
    summary = m.Metric(name="ttft", summary=m.Summary(data_points=[summary_point]))
    no_time = m.Metric(name="skipped", gauge=m.Gauge(data_points=[m.NumberDataPoint(as_double=1.0)]))
    node = m.ResourceMetrics(
        resource=Resource(attributes=[kv("host.name", "node7"), kv("driftlog.job", "llm")]),
        scope_metrics=[m.ScopeMetrics(metrics=[dcgm, zero, hist, no_time])],
    )
    service = m.ResourceMetrics(
        resource=Resource(attributes=[kv("service.name", "router")]),
        scope_metrics=[m.ScopeMetrics(metrics=[counter, summary])],
    )
    return ExportMetricsServiceRequest(resource_metrics=[node, service])


def rows(messages: list[bytes]) -> list[tuple[Any, ...]]:
    out = []
    for raw in messages:
        for batch in orjson.loads(raw)["columns"]:
            d = batch["data"]
            out += list(zip(d["entity"], d["name"], d["value"], d["time"], d["unit"], d["job"], strict=True))
    return sorted(out)


def test_both_encodings_give_the_documented_samples() -> None:
    req = request()
    from_proto = rows(envelopes(req.SerializeToString(), "otlp_proto"))
    from_json = rows(envelopes(MessageToJson(req).encode(), "otlp_json"))
    assert from_proto == from_json == rows(envelopes(req.SerializeToString()))  # auto-detected too
    t = T_NS / 1e9
    assert from_json == sorted([
        ("device:node7/gpu0", "power_w", 300.0, t, "W", "llm"),
        ("device:node7/gpu1", "power_w", 301.0, t + 1e-9, "W", "llm"),
        ("node:node7", "latency.count", 10.0, t, "s", "llm"),
        ("node:node7", "latency.max", 0.9, t, "s", "llm"),
        ("node:node7", "latency.min", 0.1, t, "s", "llm"),
        ("node:node7", "latency.sum", 2.5, t, "s", "llm"),
        ("node:node7", "queue_depth", 0.0, t, "", "llm"),
        ("service:router", f"requests{{{REQUEST_LABELS}}}", 42.0, t, "1", ""),
        ("service:router", "ttft.count", 4.0, t, "", ""),
        ("service:router", "ttft.q0.99", 0.5, t, "", ""),
        ("service:router", "ttft.sum", 1.0, t, "", ""),
    ])  # fmt: skip


def test_envelopes_pass_the_contract_and_the_service_takes_them() -> None:
    messages = envelopes(request(points=64).SerializeToString(), source="otel/node7", seq=3)
    for raw in messages:
        decoded = decode_telemetry(raw)
        assert not decoded.rejects and sum(len(b.columns["entity"]) for b in decoded.batches) > 64
    out = run_stream(("telemetry", raw) for raw in messages)
    assert not out.dead_letters and out.samples_by_kind["metric"] == len(rows(messages))


def test_explicit_entity_wins_and_an_empty_request_gives_nothing() -> None:
    doc = {"resourceMetrics": [{"resource": {"attributes": [
        {"key": "driftlog.entity", "value": {"stringValue": "link:node7-leaf2"}},
        {"key": "host.name", "value": {"stringValue": "node7"}}]},
        "scopeMetrics": [{"metrics": [{"name": "latency_s", "gauge": {"dataPoints": [
            {"timeUnixNano": str(T_NS), "asDouble": 4e-6}]}}]}]}]}  # fmt: skip
    got = rows(envelopes(orjson.dumps(doc), "otlp_json"))
    assert got == [("link:node7-leaf2", 'latency_s{host.name="node7"}', 4e-6, T_NS / 1e9, "", "")]
    assert envelopes(b'{"resourceMetrics": []}') == []


@pytest.mark.parametrize(
    ("raw", "encoding"),
    [(b'{"resourceMetrics": [', "otlp_json"), (b"[1, 2]", "otlp_json"), (b"\xff\xff\xff", "otlp_proto")],
)
def test_damaged_messages_raise_one_line_errors(raw: bytes, encoding: Any) -> None:
    with pytest.raises(FormatError) as info:
        envelopes(raw, encoding)
    assert "OTLP" in str(info.value) and "\n" not in str(info.value)


def test_the_worker_path_reads_both_encodings_and_dead_letters_what_is_not_otlp() -> None:
    from audit.records import SourcePosition
    from streams.pipeline import Processor

    processor = Processor()
    source = SourcePosition("otel-metrics", 0, 0)
    binary = processor.otlp(request(3).SerializeToString(), source)
    text = processor.otlp(MessageToJson(request(3)).encode(), SourcePosition("otel-metrics", 0, 1))
    assert binary.samples_by_kind["metric"] == text.samples_by_kind["metric"] > 0
    assert not binary.dead_letters and not text.dead_letters
    bad = processor.otlp(b"{not otlp", SourcePosition("otel-metrics", 0, 2))
    assert [r.reason for d in bad.dead_letters for r in d.rejects] == ["malformed_json"]
    assert bad.dead_letters[0].original == b"{not otlp"
