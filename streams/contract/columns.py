"""Vectorised checks of one column of values against a :class:`FieldRule`.

The fast path looks at the set of Python types in the column once (a C-level ``map``), converts it with
numpy and checks bounds as array operations; only a column holding a foreign type takes the per-value
path, which pins down exactly which rows are wrong.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from streams.contract.schema import FieldRule


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()
_NUMERIC = frozenset({int, float})
_INT = frozenset({int})
_STR = frozenset({str})
_BOOL = frozenset({bool})

Mask = npt.NDArray[np.bool_]


@dataclass
class Checked:
    """A converted column and, per failing row, the first reason (``reasons[i]`` is None when fine)."""

    values: npt.NDArray[Any]
    problems: list[tuple[Mask, str, str]] = field(default_factory=list)

    def fail(self, mask: Mask, reason: str, detail: str) -> None:
        if mask.any():
            self.problems.append((mask, reason, detail))


def check_column(rule: FieldRule, values: list[Any]) -> Checked:
    """Check and convert ``values`` (one entry per row; ``MISSING`` where the row lacks the field)."""
    types = set(map(type, values))
    if _Missing in types:
        missing = np.fromiter((v is MISSING for v in values), dtype=bool, count=len(values))
        if rule.required:
            result = check_column(rule, [rule_placeholder(rule) if v is MISSING else v for v in values])
            result.problems.insert(0, (missing, "missing_field", f"{rule.name}: required field is missing"))
            return result
        return check_column(rule, [rule.default if v is MISSING else v for v in values])
    if rule.kind == "number":
        return _numbers(rule, values, types)
    if rule.kind == "integer":
        return _integers(rule, values, types)
    if rule.kind == "string":
        return _strings(rule, values, types)
    if rule.kind == "boolean":
        return _booleans(rule, values, types)
    return _objects(rule, values)


def rule_placeholder(rule: FieldRule) -> Any:
    return {"number": 0.0, "integer": 0, "string": "", "boolean": False}.get(rule.kind)


def _wrong(values: list[Any], ok: set[type], placeholder: Any) -> tuple[list[Any], Mask]:
    bad = np.fromiter((type(v) not in ok for v in values), dtype=bool, count=len(values))
    return [placeholder if b else v for v, b in zip(values, bad, strict=True)], bad


def _numbers(rule: FieldRule, values: list[Any], types: set[type]) -> Checked:
    wrong: Mask | None = None
    if not types <= _NUMERIC:
        values, wrong = _wrong(values, {int, float}, 0.0)
    try:
        arr = np.array(values, dtype=np.float64)
    except OverflowError:  # an integer beyond float range
        arr = np.array([v if abs(v) < 1e308 else math.inf for v in values], dtype=np.float64)
    out = Checked(arr)
    if wrong is not None:
        out.fail(wrong, "wrong_type", f"{rule.name}: expected a number")
    out.fail(~np.isfinite(arr), "not_finite", f"{rule.name}: NaN or infinity")
    _bounds(rule, arr, out)
    return out


def _integers(rule: FieldRule, values: list[Any], types: set[type]) -> Checked:
    wrong: Mask | None = None
    if not types <= _INT:
        # JSON Schema counts 3.0 as an integer; anything else (bool, str, 3.5, null) is the wrong type
        bad = np.fromiter(
            (not (type(v) is int or (type(v) is float and v.is_integer())) for v in values),
            dtype=bool,
            count=len(values),
        )
        values = [0 if b else int(v) for v, b in zip(values, bad, strict=True)]
        wrong = bad
    limit = 2**62
    if any(v > limit or v < -limit for v in (max(values, default=0), min(values, default=0))):
        huge = np.fromiter((v > limit or v < -limit for v in values), dtype=bool, count=len(values))
        values = [0 if h else v for v, h in zip(values, huge, strict=True)]
        arr = np.array(values, dtype=np.int64)
        out = Checked(arr)
        out.fail(huge, "out_of_range", f"{rule.name}: integer out of range")
    else:
        arr = np.array(values, dtype=np.int64)
        out = Checked(arr)
    if wrong is not None:
        out.problems.insert(0, (wrong, "wrong_type", f"{rule.name}: expected an integer"))
    _bounds(rule, arr, out)
    return out


def _bounds(rule: FieldRule, arr: npt.NDArray[Any], out: Checked) -> None:
    for broken, reason in rule.broken_bounds(arr, arr):
        out.fail(broken, "out_of_range", f"{rule.name}: {reason}")


def _booleans(rule: FieldRule, values: list[Any], types: set[type]) -> Checked:
    wrong: Mask | None = None
    if not types <= _BOOL:  # JSON true/false only: not 0/1, not "true"
        values, wrong = _wrong(values, {bool}, False)
    out = Checked(np.array(values, dtype=bool))
    if wrong is not None:
        out.fail(wrong, "wrong_type", f"{rule.name}: expected true or false")
    return out


def _strings(rule: FieldRule, values: list[Any], types: set[type]) -> Checked:
    wrong: Mask | None = None
    if not types <= _STR:
        values, wrong = _wrong(values, {str}, "")
    arr = np.empty(len(values), dtype=object)
    arr[:] = values
    out = Checked(arr)
    if wrong is not None:
        out.fail(wrong, "wrong_type", f"{rule.name}: expected a string")
    if rule.enum is not None:
        allowed = rule.enum
        if not set(values) <= allowed:  # the mask is built only when some value is foreign
            out.fail(
                np.fromiter((v not in allowed for v in values), dtype=bool, count=len(values)),
                "out_of_range",
                f"{rule.name}: not one of {sorted(allowed)}",
            )
        return out
    lo = rule.min_length or 0
    hi = rule.max_length if rule.max_length is not None else math.inf
    lengths = list(map(len, values))
    if lengths and (min(lengths) < lo or max(lengths) > hi):  # the masks only when some length is off
        arr = np.array(lengths, dtype=np.int64)
        out.fail(arr < lo, "out_of_range", f"{rule.name}: shorter than {lo} characters")
        out.fail(arr > hi, "out_of_range", f"{rule.name}: longer than {hi} characters")
    return out


def _objects(rule: FieldRule, values: list[Any]) -> Checked:
    """Arrays and objects (decisions only, low volume): checked value by value."""
    arr = np.empty(len(values), dtype=object)
    arr[:] = values
    out = Checked(arr)
    problems = [check_value(rule, v) for v in values]
    for reason in ("wrong_type", "out_of_range"):
        mask = np.fromiter((p is not None and p[0] == reason for p in problems), dtype=bool, count=len(values))
        detail = next((p[1] for p in problems if p is not None and p[0] == reason), "")
        out.fail(mask, reason, detail)
    return out


def check_value(rule: FieldRule, value: Any) -> tuple[str, str] | None:
    """(reason, detail) for one nested value, or None when it is fine."""
    if rule.kind == "array":
        if type(value) is not list or not all(type(x) is str for x in value):
            return ("wrong_type", f"{rule.name}: expected an array of strings")
        if rule.max_items is not None and len(value) > rule.max_items:
            return ("out_of_range", f"{rule.name}: more than {rule.max_items} items")
        if any(not x or (rule.item_max_length is not None and len(x) > rule.item_max_length) for x in value):
            return ("out_of_range", f"{rule.name}: an item is empty or too long")
        return None
    if rule.kind == "object":
        if type(value) is not dict:
            return ("wrong_type", f"{rule.name}: expected an object")
        for sub in rule.nested:
            if sub.name in value:
                checked = check_column(sub, [value[sub.name]])
                if checked.problems:
                    _, reason, detail = checked.problems[0]
                    return (reason, f"{rule.name}.{detail}")
        return None
    checked = check_column(rule, [value])
    return (checked.problems[0][1], checked.problems[0][2]) if checked.problems else None
