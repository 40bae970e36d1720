"""Decode one control decision (one Kafka message on the decisions topic)."""

from __future__ import annotations

import copy
from typing import Any

from streams.contract.columns import MISSING, check_column
from streams.contract.envelope import MAX_MESSAGE_BYTES, Reject, parse_json
from streams.contract.schema import DECISION_SCHEMA, decision_rules


def decode_decision(raw: bytes) -> tuple[dict[str, Any] | None, Reject | None]:
    """The normalised decision (defaults filled, unknown fields dropped), or why it was refused."""
    if len(raw) > MAX_MESSAGE_BYTES:
        return None, Reject("oversized", f"{len(raw)} bytes > limit {MAX_MESSAGE_BYTES}")
    doc, error = parse_json(raw)
    if error is not None:
        return None, error
    if type(doc) is not dict:
        return None, Reject("not_an_envelope", f"expected a JSON object, got {type(doc).__name__}")
    if doc.get("schema") != DECISION_SCHEMA:
        return None, Reject("unknown_schema", f"schema {doc.get('schema')!r} is not {DECISION_SCHEMA!r}")
    decision: dict[str, Any] = {}
    for rule in decision_rules():
        checked = check_column(rule, [doc.get(rule.name, MISSING)])
        if checked.problems:
            _, reason, detail = checked.problems[0]
            return None, Reject(reason, f"decision.{detail}")
        value = checked.values[0]
        # numpy scalars become Python values; defaults ({} ...) are copied, never shared between decisions
        decision[rule.name] = value.item() if hasattr(value, "item") else copy.deepcopy(value)
    return decision, None
