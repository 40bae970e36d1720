"""Decode + validate throughput of telemetry envelopes, row-wise and columnar, on one core, in CPU time.

    .venv/bin/python bench/bench_decode.py [--samples-per-message 5000] [--messages 40] [--repeats 5]

Prints samples/CPU-s and CPU µs/sample (medians over repeats) for each form and each decoder, measured
interleaved in one run: the native core's decoder (native/src/decode.rs, the default when it is built) and
the Python one it stands in for (msgspec, then the precise path), and the ratio to the goals of issue 3
(row-wise >= 300k samples/s, columnar >= 1M samples/s). Op spans are the heaviest kind (15 fields).

Beside them, interleaved too, a library's parse alone: ``orjson.loads`` (Python objects, no checks, no
columns), the floor for any decoder that reads the same JSON. (sonic-rs in place of serde_json inside the
native decoder, measured in s7 on the simulator's 64-rank messages: 1.25x faster parse, but it reads
``-0.0`` as 0.0 and crashed on 200,000-deep nesting (tests/unit/test_contract_edges.py), so it is not used.)
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from unittest import mock

import orjson

from streams.contract import envelope, native_decode
from streams.contract.envelope import decode_telemetry
from streams.contract.schema import TELEMETRY_SCHEMA


def op_rows(n: int, step: int) -> list[dict[str, object]]:
    return [
        {
            "kind": "op", "job": "llm-70b", "step": step, "rank": r % 1024, "dp": r % 16, "pp": (r // 16) % 8,
            "tp": r % 8, "op": ("forward", "backward", "allreduce", "send")[r % 4],
            "op_class": ("compute", "compute", "comm", "comm")[r % 4], "start": 1_767_225_600.0 + r * 1e-3,
            "duration": 0.0123 + (r % 7) * 1e-4, "microbatch": r % 8, "group": f"dp-{r % 8}", "seq": r // 8,
            "peer": -1,
        }
        for r in range(n)
    ]  # fmt: skip


def row_message(n: int, step: int) -> bytes:
    return orjson.dumps({"schema": TELEMETRY_SCHEMA, "source": "bench", "seq": step, "samples": op_rows(n, step)})


def columnar_message(n: int, step: int) -> bytes:
    rows = op_rows(n, step)
    data = {k: [r[k] for r in rows] for k in rows[0] if k not in ("kind", "job", "step")}
    data.update(job="llm-70b", step=step)  # constant columns as scalars
    return orjson.dumps({"schema": TELEMETRY_SCHEMA, "source": "bench", "seq": step,
                         "columns": [{"kind": "op", "n": n, "data": data}]})  # fmt: skip


def measure(messages: list[bytes], per_message: int) -> float:
    """CPU seconds to decode every message once."""
    started = time.process_time()
    total = 0
    for m in messages:
        decoded = decode_telemetry(m)
        total += decoded.count()
    elapsed = time.process_time() - started
    assert total == len(messages) * per_message, (total, decoded.rejects[:3])
    return elapsed


def parse_only(messages: list[bytes]) -> float:
    """CPU seconds for ``orjson.loads`` of every message once (the library's parse, nothing else)."""
    started = time.process_time()
    for m in messages:
        orjson.loads(m)
    return time.process_time() - started


def python_only() -> contextlib.AbstractContextManager[object]:
    """The Python decoder (as without the native core)."""
    return mock.patch.object(envelope, "decode_native", lambda raw: None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples-per-message", type=int, default=5000)
    parser.add_argument("--messages", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    n = args.samples_per_message
    forms = {"row-wise": [row_message(n, s) for s in range(args.messages)],
             "columnar": [columnar_message(n, s) for s in range(args.messages)]}  # fmt: skip
    goals = {"row-wise": 300_000, "columnar": 1_000_000}
    decoders = {"native": contextlib.nullcontext, "python": python_only} if native_decode.available else {}
    decoders = decoders or {"python": python_only}
    cpu: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.repeats):  # interleaved: the machine's load falls on every decoder alike
        for form, messages in forms.items():
            for name, context in decoders.items():
                with context():
                    cpu.setdefault((form, name), []).append(measure(messages, n))
            cpu.setdefault((form, "orjson"), []).append(parse_only(messages))
    print(f"op spans, {n} per message, {args.messages} messages, CPU time, median of {args.repeats}")
    for (form, name), values in cpu.items():
        rate = len(forms[form]) * n / statistics.median(values)
        if name == "orjson":
            print(f"  {form} orjson.loads alone (no checks, no columns): {rate:>12,.0f} samples/CPU-s")
            continue
        print(f"  {form} {name:>6}: {rate:>12,.0f} samples/CPU-s, {1e6 / rate:5.3f} CPU µs/sample "
              f"({rate / goals[form]:.2f}x the goal)  bytes/sample {len(forms[form][0]) / n:.0f}")  # fmt: skip
    if len(decoders) == 2:
        for form in forms:
            ratio = statistics.median(cpu[(form, "python")]) / statistics.median(cpu[(form, "native")])
            print(f"  {form}: native {ratio:.2f}x the python decoder")


if __name__ == "__main__":
    main()
