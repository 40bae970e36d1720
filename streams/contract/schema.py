"""The JSON Schema files in ``schemas/`` are the contract; this module compiles them into field rules.

Only the subset of JSON Schema the files use is understood (type, const, enum, minimum, maximum,
exclusiveMinimum, minLength, maxLength, maxItems, required, default, properties); a schema using anything
else fails loudly at import rather than being half-checked.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

SCHEMA_DIR = Path(__file__).resolve().parent / "schemas"
TELEMETRY_SCHEMA = "driftlog.telemetry/1"
DECISION_SCHEMA = "driftlog.decision/1"
SCHEMA_FILES = {TELEMETRY_SCHEMA: "telemetry.v1.json", DECISION_SCHEMA: "decision.v1.json"}
SAMPLE_KINDS = ("op", "metric", "step", "topology")
# the field that carries a sample's event time, per kind (lateness is judged on it)
EVENT_TIME = {"op": "start", "metric": "time", "step": "start", "topology": "time"}

_KNOWN_KEYWORDS = {
    "type", "const", "enum", "minimum", "maximum", "exclusiveMinimum", "minLength", "maxLength", "maxItems",
    "items", "default", "description", "properties", "title",
}  # fmt: skip


@dataclass(frozen=True)
class FieldRule:
    """How one field is checked. ``kind`` is the JSON type; bounds are inclusive unless named exclusive."""

    name: str
    kind: str  # string | integer | number | boolean | array | object
    required: bool
    default: Any = None
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: float | None = None
    min_length: int | None = None
    max_length: int | None = None
    enum: frozenset[str] | None = None
    max_items: int | None = None
    item_max_length: int | None = None
    nested: tuple[FieldRule, ...] = ()

    def broken_bounds(self, low: Any, high: Any) -> Iterator[tuple[Any, str]]:
        """Each bound of the rule, as whether values whose least is ``low`` and greatest ``high`` break it (numbers:
        a column's extremes; arrays: each value as both, row by row) and the reason to give when they do."""
        if self.minimum is not None:
            yield low < self.minimum, f"below minimum {self.minimum}"
        if self.exclusive_minimum is not None:
            yield low <= self.exclusive_minimum, f"must exceed {self.exclusive_minimum}"
        if self.maximum is not None:
            yield high > self.maximum, f"above maximum {self.maximum}"


def load(name: str) -> dict[str, Any]:
    """The parsed schema document for a schema name such as ``driftlog.telemetry/1``."""
    return json.loads((SCHEMA_DIR / SCHEMA_FILES[name]).read_text())  # type: ignore[no-any-return]


def _rule(name: str, spec: dict[str, Any], required: bool) -> FieldRule:
    unknown = set(spec) - _KNOWN_KEYWORDS
    if unknown:
        raise ValueError(f"schema field {name!r} uses unsupported keywords {sorted(unknown)}")
    if "const" in spec:
        return FieldRule(name, "string", required, enum=frozenset([spec["const"]]))
    kind = spec["type"]
    items = spec.get("items", {})
    nested = tuple(_rule(k, v, False) for k, v in spec.get("properties", {}).items())
    return FieldRule(
        name,
        kind,
        required,
        default=spec.get("default"),
        minimum=spec.get("minimum"),
        maximum=spec.get("maximum"),
        exclusive_minimum=spec.get("exclusiveMinimum"),
        min_length=spec.get("minLength"),
        max_length=spec.get("maxLength"),
        enum=frozenset(spec["enum"]) if "enum" in spec else None,
        max_items=spec.get("maxItems"),
        item_max_length=items.get("maxLength"),
        nested=nested,
    )


def _rules(obj: dict[str, Any], skip: frozenset[str] = frozenset()) -> tuple[FieldRule, ...]:
    required = set(obj.get("required", ()))
    return tuple(_rule(k, v, k in required) for k, v in obj["properties"].items() if k not in skip)


@cache
def sample_rules(kind: str) -> tuple[FieldRule, ...]:
    """Field rules of one telemetry sample kind (without the ``kind`` field itself)."""
    return _rules(load(TELEMETRY_SCHEMA)["$defs"][kind], skip=frozenset({"kind"}))


@cache
def decision_rules() -> tuple[FieldRule, ...]:
    return _rules(load(DECISION_SCHEMA), skip=frozenset({"schema"}))
