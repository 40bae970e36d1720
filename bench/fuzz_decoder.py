"""Fuzz the telemetry and decision decoders: mutated messages must never raise, every sample of an
accepted message must end up either in a batch or in a reject, exactly once, and whatever the native decoder
answers must be what the Python decoder answers.

    .venv/bin/python bench/fuzz_decoder.py [--messages 100000] [--decisions 10000] [--seed 0]
                                           [--skip-known-bugs]

Exit code 1 when an exception escaped a decoder or a message broke the accounting invariant.

The generator lives here and ``tests/unit/test_contract_fuzz.py`` imports it. It builds valid values from the
JSON Schema files themselves (not from the compiled rules in ``streams.contract.schema``), so it does not
share that module's mistakes, then mutates samples, column batches, the envelope and the raw bytes.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import re
import sys
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any
from unittest import mock

import numpy as np

from streams.contract import envelope
from streams.contract.decision import decode_decision
from streams.contract.envelope import Decoded, decode_telemetry
from streams.contract.native_decode import decode_native
from streams.contract.schema import SCHEMA_DIR, decision_rules, sample_rules

TELEMETRY = json.loads((SCHEMA_DIR / "telemetry.v1.json").read_text())
DECISION = json.loads((SCHEMA_DIR / "decision.v1.json").read_text())
DEFS: dict[str, Any] = TELEMETRY["$defs"]
KINDS: tuple[str, ...] = tuple(DEFS["columns"]["properties"]["kind"]["enum"])
TELEMETRY_ID = TELEMETRY["properties"]["schema"]["const"]
DECISION_ID = DECISION["properties"]["schema"]["const"]
MAX_SAMPLES: int = TELEMETRY["properties"]["samples"]["maxItems"]  # also the decoder's limit per message

_ASCII = "abcdefghijklmnopqrstuvwxyz0123456789-_/:. "
_WIDE = 'éßж中😀\u200b\t\n"\\'  # multi-byte UTF-8, astral (one code point, two UTF-16 units), escapes
_SURROGATE = "\ud800"  # a lone surrogate: json.dumps writes it as the escape \ud800
_DUP = "\x00dup:"  # key prefix; after encoding, '"\u0000dup:NAME"' becomes a second '"NAME"' key


_WRONG_TYPES: tuple[Any, ...] = (None, True, False, "3", "", [], [1], {}, {"a": 1})
_FAR: dict[str, list[Any]] = {  # far out of range, beyond 64 bits, beyond float range
    "integer": [2**63, 2**64, 2**64 + 1, -(2**64), 10**30, -(10**30), 10**400, 1e20, -1e20, 1e300],
    "number": [10**400, -(10**400), 1e308, -1e308, 2**64, -(2**64)],
    "string": ["x" * 5000],
    "enum": ["x" * 5000],
    "array": [["x"] * 50, [["x"]]],
    "object": [[{}]],
    "boolean": [0, 1, "true", "false"],
}
_EDGES: dict[int, list[Any]] = {}


def edge_values(spec: dict[str, Any]) -> list[Any]:
    """Values on and just beyond every bound of a JSON Schema property, and of every wrong type (all finite,
    so a JSON Schema validator can judge each one). Integers and floats of the same value both appear."""
    cached = _EDGES.get(id(spec))
    if cached is not None:
        return cached
    out: list[Any] = list(_WRONG_TYPES)
    if "const" in spec or "enum" in spec:
        allowed = [spec["const"]] if "const" in spec else list(spec["enum"])
        out += [*allowed, "magic", allowed[0].upper(), allowed[0] + " ", " " + allowed[-1], 3]
    elif spec["type"] == "string":
        lo, hi = spec.get("minLength", 0), spec.get("maxLength")
        out += ["x" * lo, "é" * lo, 3, 1.5, -1]
        if lo:
            out.append("x" * (lo - 1))
        if hi is not None:  # lengths count code points: é is two UTF-8 bytes, 😀 four (and two UTF-16 units)
            out += ["x" * hi, "é" * hi, "😀" * hi, "x" * (hi + 1), "é" * (hi + 1), "😀" * (hi + 1)]
    elif spec["type"] in ("integer", "number"):
        out += [0, -0.0, 3.5, -0.5, 1e-300]
        if spec["type"] == "integer":
            out += [3.0, 1e20, 2**63 - 1, 2**63, 2**64]
        for bound in (spec.get(k) for k in ("minimum", "maximum", "exclusiveMinimum")):
            if bound is None:
                continue
            whole = int(bound)
            out += [whole - 1, whole, whole + 1, float(bound), math.nextafter(bound, -math.inf)]
            out += [math.nextafter(bound, math.inf), float(whole - 1), float(whole + 1)]
    elif spec["type"] == "boolean":
        out += [0, 1, 0.0, "true"]
    elif spec["type"] == "array":
        item = spec.get("items", {})
        out += [[], ["x"], "x", [""], [3], ["x", None], ["x" * item.get("maxLength", 256)]]
        out += [["x" * (item.get("maxLength", 256) + 1)]]
    elif spec["type"] == "object":
        out += [{}, {"z": [1]}, "x", 3]
        out += [{name: v} for name, sub in spec.get("properties", {}).items() for v in edge_values(sub)]
    _EDGES[id(spec)] = out
    return out


@dataclass(frozen=True)
class Knobs:
    """What the generator may do. The defaults fuzz everything."""

    rowwise: bool = True
    columnar: bool = True
    mixed_kinds: bool = True  # several kinds among the row-wise samples (never taken by the fast path)
    max_samples: int = 12
    max_rows: int = 12  # rows per column batch
    mutate: float = 0.3  # chance that one sample, column batch or decision is mutated
    harmless: float = 0.1  # chance of an unknown field or column, or a duplicate key with a valid value
    nonfinite: bool = True  # NaN / Infinity / -Infinity literals (not strict JSON)
    envelope: float = 0.12  # chance of an invalid envelope (fields dropped, wrong types, not an object)
    corrupt: float = 0.08  # chance of mangled bytes (truncated, random, not UTF-8, UTF-16, BOM)
    # inputs of known product bugs (tests/unit/test_contract_fuzz.py pins each one); off to test the rest
    unsized_batch: bool = True  # a column batch that is not an object or has no integer 'n' in 0..200000
    ragged_extra_column: bool = True  # an unknown data column (a list) whose length is not n
    huge_seq: bool = True  # an envelope seq of 2**64 or more
    invalid_utf8: bool = True  # bytes that are not UTF-8 inside a string (ED A0 80 for a lone surrogate, FF, ...)


FUZZ = Knobs()
# the inputs of the known product bugs, each pinned by a strict-xfail test in tests/unit/test_contract_fuzz.py;
# the property tests (and --skip-known-bugs) leave them out so that they keep checking everything else
KNOWN_BUGS_OFF: dict[str, Any] = {}  # generator knobs to switch off while a found bug is open (none now)
# row-wise only, strict JSON, valid envelopes: every sample can be judged by the JSON Schema reference
DIFFERENTIAL = Knobs(columnar=False, mutate=0.5, nonfinite=False, envelope=0.0, corrupt=0.0, max_samples=16)
# mostly valid, one kind per message: the fast path takes a good share of these
FAST = Knobs(mixed_kinds=False, mutate=0.04, harmless=0.3, envelope=0.0, corrupt=0.0, max_samples=8, max_rows=8)


@dataclass
class Generated:
    raw: bytes
    samples: int  # how many samples (row-wise + column rows) the generator put in
    strict: bool  # strict JSON (no NaN/Infinity, no mangled bytes): a JSON Schema validator can judge it
    intact: bool = True  # the envelope was neither mutated nor its bytes mangled: it must be accepted


class Gen:
    """Random telemetry envelopes and decisions from one ``random.Random``."""

    def __init__(self, rng: random.Random, knobs: Knobs = FUZZ) -> None:
        self.rng = rng
        self.knobs = knobs
        self.nonfinite_used = False  # since the current message began
        self.surrogate_used = False
        self.unsized_used = False
        self.duplicates_used = False

    # ---- values -------------------------------------------------------------------------------------

    def string(self, lo: int = 0, hi: int = 24) -> str:
        rng = self.rng
        r = rng.random()
        if r < 0.05:
            n = hi  # at the limit
        elif r < 0.1:
            n = lo
        else:
            n = rng.randint(lo, min(hi, max(lo, 12)))
        pool = _ASCII if rng.random() < 0.8 else _ASCII + _WIDE
        text = "".join(rng.choices(pool, k=n))
        if text and rng.random() < 0.01:
            text = _SURROGATE + text[1:]  # not Unicode text: refused as malformed_json since the fix
            self.surrogate_used = True
        return text

    def valid_value(self, spec: dict[str, Any]) -> Any:
        rng = self.rng
        if "const" in spec:
            return spec["const"]
        if "enum" in spec:
            return rng.choice(spec["enum"])
        kind = spec["type"]
        if kind == "string":
            return self.string(spec.get("minLength", 0), spec.get("maxLength", 24))
        r = rng.random()
        if kind == "integer":
            lo, hi = spec.get("minimum", -(2**53)), spec.get("maximum", 2**53)
            if r < 0.3:
                value = rng.choice((lo, hi, lo + 1, hi - 1))  # the bounds
            else:
                value = rng.randint(lo, min(hi, lo + 100) if r < 0.7 else hi)
            return float(value) if rng.random() < 0.05 else value  # JSON Schema counts 3.0 as an integer
        if kind == "number":
            hi = spec.get("maximum", 1e6)
            if "exclusiveMinimum" in spec:
                lo = math.nextafter(spec["exclusiveMinimum"], math.inf)
            else:
                lo = spec.get("minimum", -1e6)
            if r < 0.25:
                return rng.choice((lo, hi, -0.0 if lo <= 0 else lo))  # the bounds (and a negative zero)
            if r < 0.45 and math.ceil(lo) <= math.floor(hi):  # an integer for a number
                return rng.randint(math.ceil(lo), min(math.floor(hi), math.ceil(lo) + 1000))
            return rng.uniform(lo, min(hi, lo + 10) if r < 0.7 else hi)
        if kind == "boolean":
            return r < 0.5
        if kind == "array":
            items = spec.get("items", {})
            return [self.valid_value(items) for _ in range(self.rng.randint(0, 3))]
        if kind == "object":
            out = {k: self.valid_value(v) for k, v in spec.get("properties", {}).items() if rng.random() < 0.6}
            if rng.random() < 0.3:
                out[self.string(1, 8)] = self.any_json()
            return out
        raise ValueError(f"generator does not know type {kind!r}")

    def bad_value(self, spec: dict[str, Any]) -> Any:
        """Mostly a value the schema refuses for ``spec`` (wrong type, out of range, too long, not in the enum);
        the edges include the bounds themselves, so now and then a valid one."""
        rng = self.rng
        kind = spec.get("type", "enum")
        if self.knobs.nonfinite and kind in ("number", "integer") and rng.random() < 0.1:
            self.nonfinite_used = True
            return rng.choice([math.nan, math.inf, -math.inf])
        if rng.random() < 0.8:
            return rng.choice(edge_values(spec))
        return rng.choice(_FAR[kind])

    def any_json(self, depth: int = 0) -> Any:
        rng = self.rng
        r = rng.random()
        if depth < 2 and r < 0.15:
            return [self.any_json(depth + 1) for _ in range(rng.randint(0, 3))]
        if depth < 2 and r < 0.3:
            return {self.string(0, 6): self.any_json(depth + 1) for _ in range(rng.randint(0, 3))}
        return rng.choice([None, True, False, 0, -1, 2**70, 3.25, 1e300, "", self.string(0, 10)])

    # ---- samples ------------------------------------------------------------------------------------

    def valid_sample(self, kind: str) -> dict[str, Any]:
        spec = DEFS[kind]
        required = set(spec["required"])
        return {
            name: self.valid_value(prop)
            for name, prop in spec["properties"].items()
            if name in required or self.rng.random() < 0.5
        }

    def mutate_sample(self, sample: dict[str, Any], kind: str) -> Any:
        rng = self.rng
        props = DEFS[kind]["properties"]
        for _ in range(rng.randint(1, 2)):
            r = rng.random()
            if r < 0.15 and sample:
                sample.pop(rng.choice(list(sample)))  # a required field (or kind) may go
            elif r < 0.55:
                name = rng.choice(list(props))
                sample[name] = self.bad_value(props[name])
            elif r < 0.65:
                sample[self.string(1, 8) + "_x"] = self.any_json()  # unknown fields are ignored
            elif r < 0.72:
                sample["kind"] = rng.choice(["telepathy", "", "OP", 7, None, ["op"], {"kind": "op"}, *KINDS])
            elif r < 0.8:
                return rng.choice([3, "op", None, True, 1.5, [], [sample], "{}"])  # not an object
            elif r < 0.9:
                name = rng.choice(list(props))  # a duplicate key: the last one counts
                self.duplicates_used = True
                value = self.bad_value(props[name]) if rng.random() < 0.5 else self.valid_value(props[name])
                if rng.random() < 0.5:
                    sample[_DUP + name] = value
                else:
                    sample = {_DUP + name: value, **sample}
            else:
                name = rng.choice([n for n, p in props.items() if p.get("type") in ("integer", "number")])
                sample[name] = self.bad_value(props[name])
        return sample

    def sample(self, kind: str) -> Any:
        rng = self.rng
        sample = self.valid_sample(kind)
        if rng.random() < self.knobs.harmless:
            if rng.random() < 0.5:
                sample[self.string(1, 8) + "_x"] = self.any_json()  # unknown fields are ignored
            else:  # a duplicate key with a valid value: the last one counts
                name = rng.choice(list(DEFS[kind]["properties"]))
                self.duplicates_used = True
                sample[_DUP + name] = self.valid_value(DEFS[kind]["properties"][name])
        return self.mutate_sample(sample, kind) if rng.random() < self.knobs.mutate else sample

    # ---- column batches -----------------------------------------------------------------------------

    def column_batch(self, kind: str) -> tuple[Any, int]:
        """(batch, how many sample positions it holds for the decoder)."""
        rng = self.rng
        spec = DEFS[kind]
        n = rng.choice([0, 1, 2, rng.randint(1, self.knobs.max_rows)])
        data: dict[str, Any] = {}
        for name, prop in spec["properties"].items():
            if name == "kind" or (name not in spec["required"] and rng.random() < 0.4):
                continue
            data[name] = self.valid_value(prop) if rng.random() < 0.3 else [self.valid_value(prop) for _ in range(n)]
        batch: Any = {"kind": kind, "n": n, "data": data}
        if rng.random() < self.knobs.harmless:
            self.unknown_column(data, n)
        if rng.random() < self.knobs.mutate:
            batch = self.mutate_batch(batch, kind)
        return batch, 0 if _unsized(batch) else batch["n"]

    def unknown_column(self, data: dict[str, Any], n: int) -> None:
        """Unknown columns: a scalar or a list of n entries is ignored (a list of another length is not)."""
        rng = self.rng
        length = n
        if self.knobs.ragged_extra_column and rng.random() < 0.4:
            length = n + rng.choice([1, 2, -1]) if n else 1
        name = self.string(1, 6) + "_x"
        if rng.random() < 0.7:
            data[name] = [self.any_json() for _ in range(length)]
        else:
            scalar = self.any_json()
            data[name] = {"list": scalar} if type(scalar) is list else scalar  # a list would be a column

    def mutate_batch(self, batch: dict[str, Any], kind: str) -> Any:
        rng = self.rng
        props = DEFS[kind]["properties"]
        data, n = batch["data"], batch["n"]
        known = [name for name in data if name in props]
        r = rng.random()
        if r < 0.3 and known:  # one bad cell, or a bad scalar (every row)
            name = rng.choice(known)
            if type(data[name]) is list and data[name]:
                column = list(data[name])
                column[rng.randrange(len(column))] = rng.choice([self.bad_value(props[name]), None])
                data[name] = column
            else:
                data[name] = self.bad_value(props[name])
        elif r < 0.42 and known:  # a column of the wrong length
            name = rng.choice(known)
            data[name] = [self.valid_value(props[name]) for _ in range(rng.choice([max(n - 1, 0), n + 1, n + 3]))]
            if len(data[name]) == n:
                data[name].append(self.valid_value(props[name]))
        elif r < 0.52 and data:
            data.pop(rng.choice(list(data)))
        elif r < 0.62:
            batch["kind"] = rng.choice(["telepathy", None, 3, ["op"], *KINDS])
        elif r < 0.68:
            batch.pop("kind")
        elif r < 0.75:
            batch["data"] = rng.choice([None, [], "x", 3, [data]])
        elif r < 0.85:
            self.unknown_column(data, n)
        elif r < 0.93 and self.knobs.unsized_batch:
            self.unsized_used = True  # a batch that cannot say its size refuses the whole message
            bad_n = [-1, -5, MAX_SAMPLES + 1, True, False, str(n), float(n), None, [n], 2**64]
            if rng.random() < 0.2:
                batch.pop("n")
            else:
                batch["n"] = rng.choice(bad_n)
        elif r < 0.97 or not self.knobs.unsized_batch:
            batch[self.string(1, 6) + "_x"] = self.any_json()  # unknown batch field
        else:
            self.unsized_used = True
            return rng.choice([None, 3, "columns", [batch]])
        return batch

    # ---- envelopes ----------------------------------------------------------------------------------

    def message(self) -> Generated:
        rng, knobs = self.rng, self.knobs
        self.nonfinite_used = self.duplicates_used = self.surrogate_used = self.unsized_used = False
        doc: dict[str, Any] = {"schema": TELEMETRY_ID, "source": self.string(1, 40)}
        if rng.random() < 0.7:
            doc["seq"] = rng.choice([0, rng.randint(0, 10**6), 2**63 - 1])
        elif rng.random() < 0.3:
            doc["seq"] = None
        if rng.random() < 0.2:
            doc["sent_at"] = rng.uniform(0, 2e9)
        if rng.random() < 0.1:
            doc[self.string(1, 8) + "_x"] = self.any_json()  # unknown envelope fields are ignored
        forms = [f for f, on in (("rows", knobs.rowwise), ("columns", knobs.columnar)) if on]
        use = set(rng.sample(forms, rng.randint(1, len(forms))))
        count = 0
        kind = rng.choice(KINDS)
        if "rows" in use:
            n = rng.randint(0, knobs.max_samples)
            doc["samples"] = [self.sample(rng.choice(KINDS) if knobs.mixed_kinds else kind) for _ in range(n)]
            count += n
        elif rng.random() < 0.2:
            doc["samples"] = None
        if "columns" in use:
            doc["columns"] = []
            for _ in range(rng.randint(0, 3)):
                batch, n = self.column_batch(rng.choice(KINDS))
                doc["columns"].append(batch)
                count += n
        elif rng.random() < 0.2:
            doc["columns"] = None
        huge = knobs.huge_seq and rng.random() < 0.02
        if huge:
            doc["seq"] = rng.choice([2**63, 2**64 + 5, 10**30])  # beyond the schema's maximum: refused whole
        whole: Any = doc
        intact = rng.random() >= knobs.envelope and not huge
        if not intact:
            whole = self.mutate_envelope(doc)
        raw = self.encode(whole)
        strict = not (self.nonfinite_used or self.surrogate_used)
        intact = intact and not (self.surrogate_used or self.unsized_used)
        if rng.random() < knobs.corrupt:
            mangled = self.corrupt(raw)
            if knobs.unsized_batch or not _has_unsized_batch(mangled):  # e.g. "n" mangled into "n\x7f"
                raw, strict, intact = mangled, False, False
        return Generated(raw, count, strict, intact)

    def mutate_envelope(self, doc: dict[str, Any]) -> Any:
        rng = self.rng
        r = rng.random()
        if r < 0.15:
            doc.pop(rng.choice(["schema", "source", "samples", "columns"]), None)
        elif r < 0.3:
            doc["schema"] = rng.choice(["driftlog.telemetry/2", "", None, 1, [TELEMETRY_ID], DECISION_ID])
        elif r < 0.45:
            doc["source"] = rng.choice(["", "x" * 257, "😀" * 256, "😀" * 257, 5, None, ["s"], {}])
        elif r < 0.6:
            doc["seq"] = rng.choice([-1, True, 1.5, 3.0, "3", [], {}, -(2**64)])
        elif r < 0.75:
            doc[rng.choice(["samples", "columns"])] = rng.choice(["x", {}, 3, True, {"kind": "op"}])
        elif r < 0.85:
            doc.pop("samples", None)
            doc.pop("columns", None)
        elif r < 0.9:  # too many samples (and, with a negative n to lower the count, past the limit)
            full = {"kind": "metric", "n": MAX_SAMPLES, "data": {"entity": "e", "name": "n", "value": 1, "time": 1}}
            lower = [{"kind": "metric", "n": -MAX_SAMPLES, "data": {}}] if self.knobs.unsized_batch else []
            doc["columns"] = [*lower, full, full]
        else:
            return rng.choice([[doc], "envelope", 3, None, True, [], 1.5])
        return doc

    def encode(self, doc: Any) -> bytes:
        """JSON text: the standard library writes integers beyond 64 bits and NaN/Infinity literals."""
        if self.rng.random() < 0.5:
            text = json.dumps(doc)  # \uXXXX escapes, lone surrogates included
        else:
            text = json.dumps(doc, ensure_ascii=False, separators=(",", ":"))
        if self.duplicates_used:
            text = text.replace('"\\u0000dup:', '"').replace('"\x00dup:', '"')
        # a lone surrogate becomes the bytes ED A0 80 (not UTF-8), or else the escape \ud800 again
        return text.encode("utf-8", "surrogatepass" if self.knobs.invalid_utf8 else "backslashreplace")

    def corrupt(self, raw: bytes) -> bytes:
        """Mangled bytes. Without ``knobs.invalid_utf8`` cuts and insertions fall between characters, so
        no string of the document gets bytes that are not UTF-8 (random bytes and UTF-16/32 still do, but a
        decoder meets them before any string)."""
        rng = self.rng
        at = rng.randrange(len(raw) + 1)
        if not self.knobs.invalid_utf8:
            while at < len(raw) and raw[at] & 0xC0 == 0x80:  # a UTF-8 continuation byte: not a boundary
                at += 1
        r = rng.random()
        if r < 0.3:
            return raw[:at]  # truncated
        if r < 0.45:
            return rng.randbytes(rng.randint(0, 64))
        if r < 0.65:
            junk = [b"\x00", b"\x7f", b"\\", b'"']
            if self.knobs.invalid_utf8:
                junk += [b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xe2\x82", b"\xc0\xaf"]
            return raw[:at] + rng.choice(junk) + raw[at:]
        if r < 0.75:
            return raw.decode("utf-8", "surrogatepass").encode(rng.choice(["utf-16", "utf-32", "utf-16-be"]), "replace")
        if r < 0.85:
            return b"\xef\xbb\xbf" + raw  # UTF-8 byte order mark
        if r < 0.95:
            return raw[:at] + rng.choice([b"NaN", b"Infinity", b"-Infinity", b"1e999", b"[", b"}", b","]) + raw[at:]
        return b" " * rng.randint(0, 3) + raw + b"\n"

    # ---- decisions ----------------------------------------------------------------------------------

    def decision(self) -> Generated:
        rng = self.rng
        self.nonfinite_used = self.duplicates_used = self.surrogate_used = False
        required = set(DECISION["required"])
        props = DECISION["properties"]
        doc: Any = {n: self.valid_value(p) for n, p in props.items() if n in required or rng.random() < 0.5}
        if rng.random() < self.knobs.mutate:
            for _ in range(rng.randint(1, 2)):
                r = rng.random()
                if r < 0.2 and doc:
                    doc.pop(rng.choice(list(doc)))
                elif r < 0.8:
                    name = rng.choice(list(props))
                    doc[name] = self.bad_value(props[name])
                elif r < 0.9:
                    doc[self.string(1, 8) + "_x"] = self.any_json()
                else:
                    doc = rng.choice([[doc], "decision", 3, None])
                    break
        raw = self.encode(doc)
        strict = not (self.nonfinite_used or self.surrogate_used)
        if rng.random() < self.knobs.corrupt:
            raw, strict = self.corrupt(raw), False
        return Generated(raw, 1, strict)


def _has_unsized_batch(raw: bytes) -> bool:
    """Whether the document holds a column batch that is not an object or has no integer n in 0..200000."""
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError):
        return False
    columns = doc.get("columns") if type(doc) is dict else None
    return type(columns) is list and any(map(_unsized, columns))


def _unsized(batch: Any) -> bool:
    """A column batch that is not an object or has no integer n in 0..200000 (the decoder gives it 0 positions)."""
    return type(batch) is not dict or type(batch.get("n")) is not int or not 0 <= batch["n"] <= MAX_SAMPLES


# ---- the accounting invariant ---------------------------------------------------------------------------

_DTYPES = {
    "integer": np.dtype(np.int64),
    "number": np.dtype(np.float64),
    "string": np.dtype(object),
    "boolean": np.dtype(bool),
}


def accounting_violations(decoded: Decoded) -> list[str]:
    """What is wrong with a decode result's bookkeeping (empty when nothing is).

    A whole-message reject (index None) is the only reject, with no batches and total 0. Otherwise every
    sample position 0..total-1 is in exactly one batch index or one reject index, total is within the limit
    of samples per message, batches hold the columns of their kind with the right dtypes and lengths, and
    accepted numbers are finite.
    """
    problems: list[str] = []
    if decoded.total > MAX_SAMPLES:
        problems.append(f"{decoded.total} samples in one message, over the limit of {MAX_SAMPLES}")
    whole = [r for r in decoded.rejects if r.index is None]
    if whole:
        if len(decoded.rejects) != 1 or decoded.batches or decoded.total != 0:
            problems.append(
                f"whole-message reject {whole[0].reason!r} alongside {len(decoded.rejects) - 1} other rejects, "
                f"{len(decoded.batches)} batches, total {decoded.total}"
            )
        return problems
    positions: list[int] = []
    for batch in decoded.batches:
        if batch.kind not in KINDS:
            problems.append(f"batch of unknown kind {batch.kind!r}")
            continue
        if batch.index.dtype != np.int64:
            problems.append(f"{batch.kind} batch index has dtype {batch.index.dtype}")
        positions.extend(batch.index.tolist())
        rules = {rule.name: rule for rule in sample_rules(batch.kind)}
        if set(batch.columns) != set(rules):
            problems.append(f"{batch.kind} batch columns {sorted(batch.columns)} are not {sorted(rules)}")
        for name, column in batch.columns.items():
            expected = _DTYPES.get(rules[name].kind) if name in rules else None
            if len(column) != len(batch.index):
                problems.append(f"{batch.kind}.{name} has {len(column)} values for {len(batch.index)} samples")
            if column.dtype != expected:
                problems.append(f"{batch.kind}.{name} has dtype {column.dtype}, not {expected}")
            elif column.dtype == np.float64 and not np.isfinite(column).all():
                problems.append(f"{batch.kind}.{name} holds a non-finite accepted value")
    for r in decoded.rejects:
        if not r.reason or not r.detail:
            problems.append(f"reject without reason or detail: {r!r}")
        positions.append(int(r.index))  # type: ignore[arg-type]  # no whole-message reject here
    if sorted(positions) != list(range(decoded.total)):
        seen = Counter(positions)
        twice = sorted(p for p, c in seen.items() if c > 1)[:5]
        outside = sorted(p for p in seen if not 0 <= p < decoded.total)[:5]
        missing = sorted(set(range(decoded.total)) - set(seen))[:5]
        problems.append(
            f"positions do not cover 0..{decoded.total - 1} once: twice {twice}, outside {outside}, missing {missing}"
        )
    return problems


# ---- the script -----------------------------------------------------------------------------------------


@dataclass
class Tally:
    messages: int = 0
    samples: int = 0
    accepted: int = 0
    rejected: Counter[str] = field(default_factory=Counter)  # samples, by reason
    whole: Counter[str] = field(default_factory=Counter)  # whole messages, by reason
    exceptions: Counter[str] = field(default_factory=Counter)  # by type and where it was raised
    violations: Counter[str] = field(default_factory=Counter)  # messages, by the kind of problem
    broken: int = 0  # messages with an exception or a violation
    native: int = 0  # messages the native decoder answered (each compared with the Python decoder)
    smallest: dict[str, tuple[bytes, str]] = field(default_factory=dict)  # per kind of failure: shortest input

    def failed(self, kind: str, raw: bytes, detail: str) -> None:
        best = self.smallest.get(kind)
        if best is None or len(raw) < len(best[0]):
            self.smallest[kind] = (raw, detail)

    def exception(self, raw: bytes, exc: Exception) -> None:
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        kind = f"{type(exc).__name__} in {frame.name} ({frame.filename.rsplit('/', 2)[-1]}:{frame.lineno})"
        self.exceptions[kind] += 1
        self.broken += 1
        self.failed(kind, raw, f"{type(exc).__name__}: {exc}")

    def violation(self, raw: bytes, problems: list[str]) -> None:
        self.broken += 1
        for problem in problems:
            kind = re.sub(r"-?\d+", "N", problem.split(":")[0])
            self.violations[kind] += 1
            self.failed(kind, raw, problem)


def decoded_differences(got: Decoded, want: Decoded) -> list[str]:
    """How two decodings of one message differ (columns compared bit for bit); empty when they are the same."""
    if (got.source, got.seq, got.total, got.rejects) != (want.source, want.seq, want.total, want.rejects):
        return [f"envelope or rejects differ: {got.rejects[:3]} against {want.rejects[:3]}"]
    if [(b.kind, b.index.tolist(), list(b.columns)) for b in got.batches] != [
        (b.kind, b.index.tolist(), list(b.columns)) for b in want.batches
    ]:
        return ["batches differ in kind, positions or fields"]
    return [
        f"{a.kind}.{name} differs"
        for a, b in zip(got.batches, want.batches, strict=True)
        for name, column in a.columns.items()
        if column.dtype != b.columns[name].dtype
        or (
            column.tolist() != b.columns[name].tolist()
            if column.dtype == object
            else column.tobytes() != b.columns[name].tobytes()
        )
    ]


def native_differences(raw: bytes) -> list[str] | None:
    """None when the native decoder leaves the message to the Python decoder; else how its answer differs from
    the Python decoder's (empty: not at all)."""
    if decode_native(raw) is None:
        return None
    with mock.patch.object(envelope, "decode_native", lambda raw: None):
        want = decode_telemetry(raw)
    return [f"native decoder: {d}" for d in decoded_differences(decode_telemetry(raw), want)]


def fuzz_telemetry(rng: random.Random, knobs: Knobs, messages: int) -> Tally:
    gen = Gen(rng, knobs)
    tally = Tally()
    for _ in range(messages):
        msg = gen.message()
        tally.messages += 1
        tally.samples += msg.samples
        try:
            decoded = decode_telemetry(msg.raw)
        except Exception as exc:
            tally.exception(msg.raw, exc)
            continue
        tally.accepted += decoded.count()
        for r in decoded.rejects:
            (tally.whole if r.index is None else tally.rejected)[r.reason] += 1
        problems = accounting_violations(decoded)
        native = native_differences(msg.raw)
        tally.native += native is not None
        problems += native or []
        if problems:
            tally.violation(msg.raw, problems)
    return tally


def fuzz_decisions(rng: random.Random, knobs: Knobs, decisions: int) -> Tally:
    gen = Gen(rng, knobs)
    tally = Tally()
    names = {rule.name for rule in decision_rules()}
    for _ in range(decisions):
        msg = gen.decision()
        tally.messages += 1
        try:
            decision, reject = decode_decision(msg.raw)
        except Exception as exc:
            tally.exception(msg.raw, exc)
            continue
        if decision is not None and reject is None and set(decision) == names:
            tally.accepted += 1
        elif decision is None and reject is not None and reject.index is None and reject.reason:
            tally.whole[reject.reason] += 1
        else:
            tally.violation(msg.raw, [f"result ({decision!r}, {reject!r}) is not (decision, None) or (None, reject)"])
    return tally


def _counts(title: str, counts: Counter[str], total: int | None = None) -> None:
    print(f"  {title:<24}{sum(counts.values()) if total is None else total:>10,}")
    for key, count in sorted(counts.items()):
        print(f"    {key:<22}{count:>10,}" if len(key) <= 22 else f"    {key}  {count:,}")


def _report(title: str, t: Tally, elapsed: float, samples: bool) -> None:
    print(title)
    print(f"  {'messages':<24}{t.messages:>10,}")
    if samples:
        print(f"  {'samples generated':<24}{t.samples:>10,}")
        print(f"  {'samples accepted':<24}{t.accepted:>10,}")
        _counts("samples rejected", t.rejected)
        _counts("whole-message rejects", t.whole)
        print(f"  {'native decoder answered':<24}{t.native:>10,}  (compared with the Python decoder)")
    else:
        print(f"  {'accepted':<24}{t.accepted:>10,}")
        _counts("rejected", t.whole)
    _counts("exceptions", t.exceptions)
    _counts("invariant violations", t.violations, total=t.broken - sum(t.exceptions.values()))
    print(f"  {'elapsed':<24}{elapsed:>10.1f} s ({t.messages / max(elapsed, 1e-9):,.0f} messages/s)")


def _reproducers(t: Tally) -> None:
    for kind, (raw, detail) in sorted(t.smallest.items()):
        shown = raw if len(raw) <= 400 else raw[:400] + b"..."
        print(f"\n{kind}\n  {detail[:300]}\n  smallest input ({len(raw)} bytes): {shown!r}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000, help="telemetry messages to generate")
    parser.add_argument("--decisions", type=int, default=10_000, help="decision messages to generate")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--skip-known-bugs", action="store_true", help="do not generate the inputs of the known product bugs"
    )
    args = parser.parse_args(argv)
    knobs = FUZZ
    if args.skip_known_bugs:
        knobs = replace(FUZZ, **KNOWN_BUGS_OFF)
    started = time.perf_counter()
    t = fuzz_telemetry(random.Random(args.seed), knobs, args.messages)
    telemetry_elapsed = time.perf_counter() - started
    d = fuzz_decisions(random.Random(args.seed + 1), knobs, args.decisions)
    elapsed = time.perf_counter() - started

    _report(f"telemetry (seed {args.seed}{', known bugs skipped' if args.skip_known_bugs else ''})", t,
            telemetry_elapsed, samples=True)  # fmt: skip
    _report("decisions", d, elapsed - telemetry_elapsed, samples=False)
    print(f"elapsed in all {elapsed:.1f} s")
    _reproducers(t)
    _reproducers(d)
    return 1 if t.broken or d.broken else 0


if __name__ == "__main__":
    sys.exit(main())
