"""OpenTelemetry metrics in: the messages an OpenTelemetry Collector's Kafka exporter writes to a metrics
topic (``encoding: otlp_json`` or ``otlp_proto``: one ``ExportMetricsServiceRequest`` per message) become
``metric`` samples of the event contract.

Mapping (docs/formats.md has the table):

- **entity** from the resource and data-point attributes: ``driftlog.entity`` when set; else a GPU
  (``gpu``/``gpu.index``/``gpu.id``/``device``, as DCGM exporters label) on a host (``host.name``,
  ``k8s.node.name``, ``Hostname``) is ``device:<host>/gpu<index>``; a host alone ``node:<host>``; else
  ``service:<service.name>``; else ``resource:unknown``;
- **name**: the metric's name (``DCGM_FI_DEV_POWER_USAGE`` becomes ``power_w`` and ``DCGM_FI_DEV_GPU_TEMP``
  ``temp_c``, the names the engine reads), followed by the data point's other attributes as
  ``{key="value",...}`` (sorted) so distinct series stay distinct;
- **value**: a gauge's or a sum's point value (a cumulative sum is sent as its running total); a histogram
  or exponential histogram gives ``<name>.count`` and ``<name>.sum`` (and ``.min``/``.max`` when present),
  a summary ``.count``, ``.sum`` and ``.q<quantile>``; non-finite values are left out;
- **time** ``timeUnixNano`` in seconds; **unit** the metric's unit; **job** the ``driftlog.job`` attribute.

:func:`envelopes` is what a metrics-topic agent calls: bytes in, telemetry envelopes out.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any, Literal

import orjson

from streams.contract.schema import TELEMETRY_SCHEMA
from streams.formats.errors import FormatError

Encoding = Literal["otlp_json", "otlp_proto", "auto"]
ENTITY_KEY = "driftlog.entity"
JOB_KEY = "driftlog.job"
HOST_KEYS = ("host.name", "k8s.node.name", "Hostname")
GPU_KEYS = ("gpu", "gpu.index", "gpu.id", "device")
SERVICE_KEY = "service.name"
RENAMES = {"DCGM_FI_DEV_POWER_USAGE": "power_w", "DCGM_FI_DEV_GPU_TEMP": "temp_c"}
MAX_SAMPLES_PER_MESSAGE = 50_000
MAX_TEXT = 256


# One data point: (attributes of its resource and its own, metric name, unit, time in ns, [(suffix, value)])
Point = tuple[dict[str, Any], str, str, float | None, list[tuple[str, float | None]]]


def points(raw: bytes, encoding: Encoding = "auto") -> Iterator[Point]:
    """The data points of one request, from either encoding. Raises :class:`FormatError` at once."""
    if encoding == "auto":
        encoding = "otlp_json" if raw.lstrip()[:1] == b"{" else "otlp_proto"
    if encoding == "otlp_proto":
        from streams.formats.otlp_proto import proto_points

        return proto_points(raw)
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise FormatError(f"not an OTLP/JSON metrics message: {exc}") from None
    if type(doc) is not dict:
        raise FormatError("not an OTLP/JSON metrics message: not a JSON object")
    return _json_points(doc)


def _value(any_value: Any) -> Any:
    """An OTLP AnyValue as a plain value (arrays and key-value lists as JSON text)."""
    if type(any_value) is not dict:
        return None
    for key in ("stringValue", "boolValue", "doubleValue"):
        if key in any_value:
            return any_value[key]
    if "intValue" in any_value:
        return int(any_value["intValue"])
    if "arrayValue" in any_value or "kvlistValue" in any_value:
        return orjson.dumps(any_value).decode()
    return None


def attributes(items: Any) -> dict[str, Any]:
    if type(items) is not list:
        return {}
    return {a["key"]: _value(a.get("value")) for a in items if type(a) is dict and isinstance(a.get("key"), str)}


def entity_of(attrs: dict[str, Any]) -> tuple[str, set[str]]:
    """The operator-graph element the attributes name, and which attribute keys that used."""
    if attrs.get(ENTITY_KEY):
        return str(attrs[ENTITY_KEY]), {ENTITY_KEY}
    host_key = next((k for k in HOST_KEYS if attrs.get(k) not in (None, "")), None)
    gpu_key = next((k for k in GPU_KEYS if attrs.get(k) not in (None, "")), None)
    if host_key is not None and gpu_key is not None:
        gpu = str(attrs[gpu_key]).removeprefix("nvidia").removeprefix("gpu")
        return f"device:{attrs[host_key]}/gpu{gpu}", {host_key, gpu_key}
    if host_key is not None:
        return f"node:{attrs[host_key]}", {host_key}
    if attrs.get(SERVICE_KEY):
        return f"service:{attrs[SERVICE_KEY]}", {SERVICE_KEY}
    return "resource:unknown", set()


def series_name(metric: str, attrs: dict[str, Any], used: set[str]) -> str:
    name = RENAMES.get(metric, metric)
    rest = sorted((k, v) for k, v in attrs.items() if k not in used and k != JOB_KEY)
    if rest:
        name += "{" + ",".join(f'{k}="{v}"' for k, v in rest) + "}"
    return name[:MAX_TEXT]


def _number(x: Any) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _point_values(kind: str, point: dict[str, Any]) -> Iterator[tuple[str, float | None]]:
    """(suffix, value) pairs of one data point."""
    if kind in ("gauge", "sum"):
        yield "", _number(point.get("asDouble", point.get("asInt")))
    elif kind in ("histogram", "exponentialHistogram"):
        yield ".count", _number(point.get("count", 0))
        for part in ("sum", "min", "max"):
            if part in point:
                yield f".{part}", _number(point[part])
    elif kind == "summary":
        yield ".count", _number(point.get("count", 0))
        yield ".sum", _number(point.get("sum", 0))
        for q in point.get("quantileValues") or []:
            yield f".q{_number(q.get('quantile', 0))}", _number(q.get("value", 0))


KINDS = ("gauge", "sum", "histogram", "exponentialHistogram", "summary")


def _json_points(request: dict[str, Any]) -> Iterator[Point]:
    for rm in request.get("resourceMetrics") or []:
        resource = attributes((rm.get("resource") or {}).get("attributes"))
        for sm in rm.get("scopeMetrics") or []:
            for metric in sm.get("metrics") or []:
                kind = next((k for k in KINDS if k in metric), None)
                if kind is None or not isinstance(metric.get("name"), str):
                    continue
                unit = str(metric.get("unit") or "")
                for point in (metric[kind] or {}).get("dataPoints") or []:
                    attrs = {**resource, **attributes(point.get("attributes"))}
                    values = list(_point_values(kind, point))
                    yield attrs, metric["name"], unit, _number(point.get("timeUnixNano")), values


def samples(request_points: Iterator[Point]) -> Iterator[dict[str, Any]]:
    """``metric`` sample rows (non-finite values and points without a time left out)."""
    for attrs, metric, unit, time, values in request_points:
        if time is None or time <= 0:
            continue
        entity, used = entity_of(attrs)
        name = series_name(metric, attrs, used)
        job = str(attrs.get(JOB_KEY) or "")
        for suffix, value in values:
            if value is not None:
                yield {"entity": entity[:MAX_TEXT], "name": (name + suffix)[:MAX_TEXT], "value": value,
                       "time": time / 1e9, "unit": unit[:32], "job": job}  # fmt: skip


def envelopes(
    raw: bytes, encoding: Encoding = "auto", source: str = "otel-collector", seq: int | None = None
) -> list[bytes]:
    """Telemetry envelopes (columnar ``metric`` batches) of one metrics message; [] when it holds no
    points. Raises :class:`FormatError` when the bytes are not an OTLP metrics request."""
    rows = list(samples(points(raw, encoding)))
    out = []
    for i in range(0, len(rows), MAX_SAMPLES_PER_MESSAGE):
        chunk = rows[i : i + MAX_SAMPLES_PER_MESSAGE]
        data = {key: [r[key] for r in chunk] for key in ("entity", "name", "value", "time", "unit", "job")}
        doc: dict[str, Any] = {"schema": TELEMETRY_SCHEMA, "source": source,
                               "columns": [{"kind": "metric", "n": len(chunk), "data": data}]}  # fmt: skip
        if seq is not None:
            doc["seq"] = seq * 1000 + i // MAX_SAMPLES_PER_MESSAGE
        out.append(orjson.dumps(doc))
    return out
