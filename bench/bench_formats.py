"""Import rates of the format readers: PyTorch profiler traces (files → envelopes, spans/s, gzipped and
plain) and OpenTelemetry metrics (one Collector message → envelopes, data points/s, otlp_json and
otlp_proto); medians of ``--repeat`` runs, each including reading, decoding and encoding the envelopes.
Beside the wall-clock rate, the rate per CPU-second of this process (the machines are shared: under load
the wall-clock rate drops, the CPU rate much less).

.venv/bin/python bench/bench_formats.py [--ranks 16] [--steps 50] [--kernels 500] [--points 20000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import orjson
from google.protobuf.json_format import MessageToJson

from streams.formats.kineto import read_trace_files
from streams.formats.otlp import envelopes
from tests.kineto_traces import write_job
from tests.unit.test_otlp import request


def spans_in(messages: list[bytes]) -> int:
    return sum(b["n"] for m in messages for b in orjson.loads(m)["columns"] if b["kind"] == "op")


def median_rate(run: object, count: int, repeat: int) -> tuple[float, float, float]:
    """(items per wall-clock second, median wall seconds, items per CPU second)."""
    seconds, cpu = [], []
    for _ in range(repeat):
        started, cpu_started = time.perf_counter(), time.process_time()
        run()  # type: ignore[operator]
        seconds.append(time.perf_counter() - started)
        cpu.append(time.process_time() - cpu_started)
    s = statistics.median(seconds)
    return count / s, s, count / statistics.median(cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=16)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--kernels", type=int, default=500, help="compute kernels per rank and step")
    parser.add_argument("--points", type=int, default=20_000, help="GPU power points per OTLP message")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-formats-"))
    for label, gz_every in (("plain .json", 0), ("gzipped .json.gz", 1)):
        paths = write_job(work / label.split()[0], args.ranks, range(args.steps), gz_every=gz_every,
                          kernels=args.kernels)  # fmt: skip
        size = sum(p.stat().st_size for p in paths)
        spans = spans_in(list(read_trace_files(paths)))
        rate, s, cpu = median_rate(lambda paths=paths: list(read_trace_files(paths)), spans, args.repeat)
        print(f"kineto {label}: {args.ranks} files, {size / 2**20:,.1f} MiB, {spans:,} spans in {s:.2f}s: "
              f"{rate:,.0f} spans/s ({cpu:,.0f} per CPU-second)")  # fmt: skip
    req = request(points=args.points)
    for encoding, raw in (("otlp_proto", req.SerializeToString()), ("otlp_json", MessageToJson(req).encode())):
        points = sum(len(orjson.loads(m)["columns"][0]["data"]["value"]) for m in envelopes(raw, encoding))
        rate, s, cpu = median_rate(lambda raw=raw, encoding=encoding: envelopes(raw, encoding), points, args.repeat)
        print(f"{encoding}: one message of {len(raw) / 2**20:,.1f} MiB, {points:,} samples in {s:.3f}s: "
              f"{rate:,.0f} samples/s ({cpu:,.0f} per CPU-second)")  # fmt: skip


if __name__ == "__main__":
    main()
