"""The fast path: msgspec types compiled from the same schema rules, decoding valid messages in C.

msgspec validates types, bounds, lengths and enums while it parses, without building a dict per sample.
It is at least as strict as the rule-by-rule path (it refuses ``3.0`` for an integer, NaN, a bool for a
number), so whatever it accepts is valid; anything it refuses goes to :mod:`streams.contract.envelope`'s
precise path, which decides sample by sample. ``tests/unit/test_contract_fuzz.py`` checks both paths agree.
"""

from __future__ import annotations

from functools import cache
from operator import attrgetter
from typing import Annotated, Any, Literal, Union

import msgspec
import numpy as np
import numpy.typing as npt

from streams.contract.schema import SAMPLE_KINDS, TELEMETRY_SCHEMA, FieldRule, sample_rules

MAX_COLUMN_ROWS = 200_000
MAX_COLUMN_BATCHES = 64
MAX_SEQ = 2**63 - 1


def _value_type(rule: FieldRule) -> Any:
    if rule.enum is not None:
        return Literal[tuple(sorted(rule.enum))]
    if rule.kind == "string":
        return Annotated[str, msgspec.Meta(min_length=rule.min_length or 0, max_length=rule.max_length)]
    if rule.kind == "boolean":
        return bool
    bounds: dict[str, Any] = {}
    if rule.minimum is not None:
        bounds["ge"] = rule.minimum
    if rule.maximum is not None:
        bounds["le"] = rule.maximum
    if rule.exclusive_minimum is not None:
        bounds["gt"] = rule.exclusive_minimum
    base = int if rule.kind == "integer" else float
    return Annotated[base, msgspec.Meta(**bounds)] if bounds else base


def _fields(kind: str, columnar: bool) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    for rule in sample_rules(kind):
        value_type = _value_type(rule)
        field_type = Union[list[value_type], value_type] if columnar else value_type  # type: ignore[valid-type]  # noqa: UP007
        out.append((rule.name, field_type) if rule.required else (rule.name, field_type, rule.default))
    return out


@cache
def _envelope_decoder() -> msgspec.json.Decoder[Any]:
    rows = tuple(
        msgspec.defstruct(f"{k.title()}Row", _fields(k, False), tag_field="kind", tag=k, kw_only=True)
        for k in SAMPLE_KINDS
    )
    batches = tuple(
        msgspec.defstruct(
            f"{k.title()}Columns",
            [
                ("n", Annotated[int, msgspec.Meta(ge=0, le=MAX_COLUMN_ROWS)]),
                ("data", msgspec.defstruct(f"{k.title()}Data", _fields(k, True), kw_only=True)),
            ],
            tag_field="kind",
            tag=k,
        )
        for k in SAMPLE_KINDS
    )
    envelope = msgspec.defstruct(
        "Envelope",
        [
            ("schema", Literal[TELEMETRY_SCHEMA]),
            ("source", Annotated[str, msgspec.Meta(min_length=1, max_length=256)]),
            ("seq", Union[Annotated[int, msgspec.Meta(ge=0, le=MAX_SEQ)], None], None),  # noqa: UP007
            ("samples", Union[list[Union[rows]], None], None),  # type: ignore[valid-type]  # noqa: UP007
            ("columns", Union[list[Union[batches]], None], None),  # type: ignore[valid-type]  # noqa: UP007
        ],
        kw_only=True,
    )
    return msgspec.json.Decoder(envelope)


def _array(rule: FieldRule, values: Any) -> npt.NDArray[Any]:
    if rule.kind == "string":
        arr = np.empty(len(values), dtype=object)
        arr[:] = values
        return arr
    return np.array(values, dtype={"integer": np.int64, "boolean": bool}.get(rule.kind, np.float64))


def decode_fast(raw: bytes) -> tuple[str, int | None, list[tuple[str, int, dict[str, npt.NDArray[Any]]]], int] | None:
    """(source, seq, [(kind, first sample position, columns)], total samples), or None to take the precise
    path (any problem at all, including column lengths that do not match ``n``)."""
    if b"\\ud" in raw or b"\\uD" in raw:
        return None  # surrogate escapes: lone ones are not text, and only orjson tells pairs from lone ones
    try:
        if not raw.isascii():  # ASCII is UTF-8 (and checked without a copy)
            raw.decode()  # msgspec skips the bytes of fields it ignores; those must be UTF-8 too
        env = _envelope_decoder().decode(raw)
    except (msgspec.ValidationError, msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return None  # the precise path names the problem (deep nesting: malformed_json)
    if env.samples is None and env.columns is None:
        return None  # neither form: the precise path names the missing field
    samples, column_batches = env.samples or [], env.columns or []
    if len(column_batches) > MAX_COLUMN_BATCHES:
        return None
    out: list[tuple[str, int, dict[str, npt.NDArray[Any]]]] = []
    if samples:
        kinds = {type(s).__struct_config__.tag for s in samples}
        if len(kinds) != 1:
            return None  # mixed kinds: positions per kind are the precise path's business
        kind = kinds.pop()
        rules = sample_rules(kind)
        cols = zip(*map(attrgetter(*(r.name for r in rules)), samples), strict=True) if len(rules) > 1 else None
        if cols is None:
            return None
        out.append((kind, 0, {r.name: _array(r, c) for r, c in zip(rules, cols, strict=True)}))
    position = len(samples)
    for batch in column_batches:
        kind = type(batch).__struct_config__.tag
        columns: dict[str, npt.NDArray[Any]] = {}
        for rule in sample_rules(kind):
            value = getattr(batch.data, rule.name)
            if type(value) is list:
                if len(value) != batch.n:
                    return None
                columns[rule.name] = _array(rule, value)
            else:
                columns[rule.name] = np.repeat(_array(rule, [value]), batch.n)
        if batch.n:
            out.append((kind, position, columns))
        position += batch.n
    if position > MAX_COLUMN_ROWS:
        return None  # too many samples in all: the precise path says so
    return env.source, env.seq, out, position
