"""Decode one Kafka value into valid samples and precise rejections; never raises on bad input."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson
from pydantic import BaseModel, ValidationError

from streams.contract.samples import StepSample

TELEMETRY_SCHEMA = "driftlog.telemetry/1"
MAX_MESSAGE_BYTES = 4 * 1024 * 1024
MAX_SAMPLES = 200_000
SAMPLE_MODELS: dict[str, type[BaseModel]] = {"step": StepSample}


@dataclass(frozen=True)
class Reject:
    """Why (part of) a message was refused. ``index`` is the sample's position, None for the whole message."""

    reason: str
    detail: str
    index: int | None = None


@dataclass
class Decoded:
    samples: list[BaseModel] = field(default_factory=list)
    rejects: list[Reject] = field(default_factory=list)


def decode_telemetry(raw: bytes) -> Decoded:
    """Parse a telemetry envelope; keep every valid sample, reject each bad one with its reason."""
    out = Decoded()
    if len(raw) > MAX_MESSAGE_BYTES:
        out.rejects.append(Reject("oversized", f"{len(raw)} bytes > limit {MAX_MESSAGE_BYTES}"))
        return out
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        out.rejects.append(Reject("malformed_json", str(exc)))
        return out
    envelope_error = _check_envelope(doc)
    if envelope_error is not None:
        out.rejects.append(envelope_error)
        return out
    for i, item in enumerate(doc["samples"]):
        _decode_sample(item, i, out)
    return out


def _check_envelope(doc: Any) -> Reject | None:
    if not isinstance(doc, dict):
        return Reject("not_an_envelope", f"expected a JSON object, got {type(doc).__name__}")
    schema = doc.get("schema")
    if schema != TELEMETRY_SCHEMA:
        return Reject("unknown_schema", f"schema {schema!r} is not {TELEMETRY_SCHEMA!r}")
    samples = doc.get("samples")
    if not isinstance(samples, list):
        return Reject("missing_field", "envelope field 'samples' must be a list")
    if len(samples) > MAX_SAMPLES:
        return Reject("oversized", f"{len(samples)} samples > limit {MAX_SAMPLES}")
    return None


def _decode_sample(item: Any, index: int, out: Decoded) -> None:
    kind = item.get("kind") if isinstance(item, dict) else None
    model = SAMPLE_MODELS.get(kind) if isinstance(kind, str) else None
    if model is None:
        out.rejects.append(Reject("unknown_kind", f"sample kind {kind!r} is not one of {sorted(SAMPLE_MODELS)}", index))
        return
    try:
        out.samples.append(model.model_validate(item))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        out.rejects.append(Reject(_reason(first["type"]), f"{kind}.{where}: {first['msg']}", index))


def _reason(error_type: str) -> str:
    if error_type == "missing":
        return "missing_field"
    if error_type in ("finite_number",):
        return "not_finite"
    if error_type.startswith(("greater_than", "less_than")):
        return "out_of_range"
    return "wrong_type"
