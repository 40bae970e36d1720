"""`analyze` of a Parquet file of sample rows: read by columns (the default for such files) beside read row by
row (the path every other file takes), interleaved, on the simulated training fabric.

    .venv/bin/python bench/bench_analyze.py [--ranks 64] [--steps 300] [--repeats 3] [--root DIR]... [--no-rows]

Prints op spans (and all samples) per second and per CPU-second for each reading. Issue 11's goal: >= 1 M op
spans/s analysing from Parquet. Each ``--root`` (a tree from ``git archive <commit> | tar -x -C /tmp/old``) is
measured too, by columns, interleaved with this tree's runs: before/after in one run. Every reading by columns
runs in a process of its own, this tree's too (one run in the process that wrote the file and read it row by
row measured ~10 % slower than the same code in a fresh one).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pyarrow as pa
import pyarrow.parquet as pq

from streams import analyze
from streams.contract.envelope import decode_telemetry
from streams.sim.scenarios import training_fabric


def write_samples(ranks: int, steps: int, path: Path) -> tuple[int, int]:
    """The scenario's samples as Parquet rows (one column per field, null where a kind lacks it)."""
    columns: dict[str, list[object]] = {}
    n = ops = 0
    for kind, _, value in training_fabric(seed=1, ranks=ranks, steps=steps).run():
        if kind != "telemetry":
            continue
        for batch in decode_telemetry(value).batches:
            size = len(batch)
            for name in columns.keys() - batch.columns.keys() - {"kind"}:
                columns[name].extend([None] * size)
            for name, values in (("kind", [batch.kind] * size), *((k, v.tolist()) for k, v in batch.columns.items())):
                columns.setdefault(name, [None] * n).extend(values)
            n += size
            ops += size if batch.kind == "op" else 0
    pq.write_table(pa.table(columns), path)
    return n, ops


def run(path: Path, columnar: bool) -> tuple[float, float]:
    """(wall s, CPU s) of one analyze."""
    original = analyze.samples_only
    analyze.samples_only = original if columnar else (lambda _: False)  # type: ignore[assignment]
    try:
        started, cpu = time.perf_counter(), time.process_time()
        analyze.analyze_files([path])
        return time.perf_counter() - started, time.process_time() - cpu
    finally:
        analyze.samples_only = original  # type: ignore[assignment]


HERE = Path(__file__).resolve().parents[1]  # this tree


def run_elsewhere(root: Path, path: Path) -> tuple[float, float]:
    """(wall s, CPU s) of one analyze by columns with ``streams`` from another tree (a process of its own),
    after one untimed (as this process's runs are timed warm: imports, schema rules and caches made)."""
    code = (
        f"import sys, time; sys.path.insert(0, {str(root)!r}); from pathlib import Path; from streams import analyze; "
        f"analyze.analyze_files([Path({str(path)!r})]); "
        f"w, c = time.perf_counter(), time.process_time(); analyze.analyze_files([Path({str(path)!r})]); "
        "print(time.perf_counter() - w, time.process_time() - c)"
    )
    wall, cpu = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout.split()
    return float(wall), float(cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--root", type=Path, action="append", default=[], help="another tree to measure")
    parser.add_argument("--no-rows", action="store_true", help="leave out the reading row by row (most of the time)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="driftlog-bench-analyze-") as work:  # (its file deleted at the end)
        measure(args, Path(work) / "samples.parquet")


def measure(args: argparse.Namespace, path: Path) -> None:
    n, ops = write_samples(args.ranks, args.steps, path)
    runs: dict[str, list[tuple[float, float]]] = {"by columns": [], **({} if args.no_rows else {"row by row": []})}
    for _ in range(args.repeats):  # interleaved
        runs["by columns"].append(run_elsewhere(HERE, path))  # (as the other trees: a process of its own)
        if not args.no_rows:
            runs["row by row"].append(run(path, False))
        for root in args.root:
            runs.setdefault(f"{root} by columns", []).append(run_elsewhere(root, path))
    print(f"{args.ranks} ranks x {args.steps} steps: {n:,} samples ({ops:,} op spans), "
          f"{path.stat().st_size / 2**20:.1f} MiB Parquet; median of {args.repeats} interleaved runs")  # fmt: skip
    for name, values in runs.items():
        wall, cpu = statistics.median(v[0] for v in values), statistics.median(v[1] for v in values)
        print(f"  {name:>10}: {ops / wall:>9,.0f} op spans/s, {ops / cpu:>9,.0f} per CPU-s "
              f"({n / cpu:,.0f} samples per CPU-s)")  # fmt: skip


if __name__ == "__main__":
    main()
