"""Decode + validate throughput of telemetry envelopes, row-wise and columnar, on one core.

    .venv/bin/python bench/bench_decode.py [--samples-per-message 5000] [--messages 40] [--repeats 5]

Prints samples/s (median over repeats) for each form and the ratio to the goals of issue 3
(row-wise >= 300k samples/s, columnar >= 1M samples/s). Op spans are the heaviest kind (15 fields).
"""

from __future__ import annotations

import argparse
import statistics
import time

import orjson

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


def measure(messages: list[bytes], per_message: int, repeats: int) -> float:
    rates = []
    for _ in range(repeats):
        started = time.perf_counter()
        total = 0
        for m in messages:
            decoded = decode_telemetry(m)
            total += decoded.count()
        elapsed = time.perf_counter() - started
        assert total == len(messages) * per_message, (total, decoded.rejects[:3])
        rates.append(total / elapsed)
    return statistics.median(rates)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples-per-message", type=int, default=5000)
    parser.add_argument("--messages", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    n = args.samples_per_message
    rows = [row_message(n, s) for s in range(args.messages)]
    cols = [columnar_message(n, s) for s in range(args.messages)]
    row_rate = measure(rows, n, args.repeats)
    col_rate = measure(cols, n, args.repeats)
    print(f"op spans, {n} per message, {args.messages} messages, median of {args.repeats}")
    print(
        f"  row-wise : {row_rate:>12,.0f} samples/s  ({row_rate / 300_000:.2f}x the 300k goal)"
        f"  bytes/sample {len(rows[0]) / n:.0f}"
    )
    print(
        f"  columnar : {col_rate:>12,.0f} samples/s  ({col_rate / 1_000_000:.2f}x the 1M goal)"
        f"  bytes/sample {len(cols[0]) / n:.0f}"
    )
    print(f"  columnar / row-wise: {col_rate / row_rate:.1f}x")


if __name__ == "__main__":
    main()
