"""The ceiling for the sink on this machine: DuckDB alone inserting audit_log-shaped rows (no hashing), per
transaction size, compression, DuckDB threads and whether the record type and id are parsed from JSON in the
INSERT.

    .venv/bin/python bench/bench_duckdb_ceiling.py [--records 491520] [--repeats 3]

Every run writes a fresh file through the store's schema (migrations) and ends with ``close()``, so the
checkpoint that moves WAL contents into the data file (and compresses them) is part of the time: a sink
that runs for hours pays it too. The configurations run interleaved and each figure is the median of
``--repeats`` runs, so that ratios within one run of this script are comparable on a noisy machine.

What it shows here: a transaction of at least one row group (122,880 rows) is written straight to the data
file instead of the WAL (DuckDB's optimistic writes), so it is not written twice; forcing zstd costs less
CPU than the default compression and gives a smaller file; and classifying in the INSERT (json_transform)
adds ~1 µs per row to the writing thread, which is why the store classifies while it prepares a batch
instead (audit/classify.py). One thread and two insert alike here, with nothing else running; beside the
sink's preparing thread two were worse (audit/duckdb_store.py).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from audit.classify import classify_sql
from audit.migrations import migrate
from tests.integration.test_sink_exactly_once import audit_records

ROW_GROUP = 122_880
_COLUMNS = 'topic, "partition", "offset", kafka_ts_ms, key, value, record_type, record_id, chain_hash'


def audit_table(values: list[bytes]) -> pa.Table:
    """audit_log-shaped rows: 4 partitions, random-looking chain hashes, record types and ids."""
    n = len(values)
    return pa.table({
        "topic": pa.array(["audit"] * n), "partition": pa.array([i % 4 for i in range(n)], pa.int32()),
        "offset": pa.array([i // 4 for i in range(n)], pa.int64()),
        "kafka_ts_ms": pa.array(range(1_767_225_600_000, 1_767_225_600_000 + n), pa.int64()),
        "key": pa.array([b"job:j"] * n, pa.binary()), "value": pa.array(values, pa.binary()),
        "record_type": pa.array(["finding"] * n),
        "record_id": pa.array([hashlib.sha256(v).hexdigest()[:32] for v in values]),
        "chain_hash": pa.array([hashlib.sha256(i.to_bytes(8)).digest() for i in range(n)], pa.binary(32)),
    })  # fmt: skip


def write_run(
    table: pa.Table, batch: int, setting: str | None, sql_classify: bool, threads: int = 1
) -> tuple[float, float, float]:
    """Insert ``table`` in transactions of ``batch`` rows into a fresh store file, then close it.
    Returns (rows/s including the closing checkpoint, CPU µs per row, file MiB)."""
    path = Path(tempfile.mkdtemp(prefix="driftlog-ceiling-")) / "x.duckdb"
    con = duckdb.connect(str(path))
    migrate(con)
    con.execute("SET wal_autocheckpoint = '256MB'")  # as the store sets it
    con.execute(f"SET threads = {threads}")
    if setting:
        con.execute(setting)
    source = f"SELECT {_COLUMNS} FROM ({classify_sql('t')})" if sql_classify else f"SELECT {_COLUMNS} FROM t"
    started, cpu = time.perf_counter(), time.process_time()
    for i in range(0, table.num_rows, batch):
        chunk = table.slice(i, batch)
        con.register("t", chunk.drop_columns(["record_type", "record_id"]) if sql_classify else chunk)
        con.execute("BEGIN")
        con.execute(f"INSERT INTO audit_log ({_COLUMNS}) {source}")
        con.execute("COMMIT")
        con.unregister("t")
    con.close()
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    size = path.stat().st_size / 2**20
    for p in path.parent.iterdir():
        p.unlink()
    path.parent.rmdir()
    return table.num_rows / wall, cpu / table.num_rows * 1e6, size


def parquet_run(table: pa.Table, batch: int) -> tuple[float, float, float]:
    """The store half of the "sealed Parquet segments" design: each batch written as one zstd Parquet
    file (temp name, fsync, os.replace), no DuckDB; for comparison with the rows above."""
    work = Path(tempfile.mkdtemp(prefix="driftlog-ceiling-"))
    started, cpu = time.perf_counter(), time.process_time()
    for n, i in enumerate(range(0, table.num_rows, batch)):
        tmp = work / f"segment-{n:08d}.parquet.tmp"
        pq.write_table(table.slice(i, batch), tmp, compression="zstd", row_group_size=batch)
        with tmp.open("rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, tmp.with_suffix(""))
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    size = sum(p.stat().st_size for p in work.iterdir()) / 2**20
    for p in work.iterdir():
        p.unlink()
    work.rmdir()
    return table.num_rows / wall, cpu / table.num_rows * 1e6, size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=4 * ROW_GROUP)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    values = audit_records(args.records)
    table = audit_table(values)
    zstd = "SET force_compression = 'zstd'"
    configs: dict[str, Callable[[], tuple[float, float, float]]] = {
        " 10,000 rows/txn, zstd, 1 thread,  type+id given": lambda: write_run(table, 10_000, zstd, False),
        "122,880 rows/txn, auto, 1 thread,  type+id given": lambda: write_run(table, ROW_GROUP, None, False),
        "122,880 rows/txn, zstd, 2 threads, type+id given": lambda: write_run(table, ROW_GROUP, zstd, False, 2),
        "122,880 rows/txn, zstd, 1 thread,  type+id given": lambda: write_run(table, ROW_GROUP, zstd, False),
        "122,880 rows/txn, zstd, 1 thread,  classify() in INSERT": lambda: write_run(table, ROW_GROUP, zstd, True),
        f"{ROW_GROUP:,} rows/segment, Parquet file (zstd), no DuckDB": lambda: parquet_run(table, ROW_GROUP),
    }  # fmt: skip
    results: dict[str, list[tuple[float, float, float]]] = {name: [] for name in configs}
    for _ in range(args.repeats):  # interleaved, so that load from other work hits every configuration
        for name, run in configs.items():
            results[name].append(run())
    print(f"{args.records:,} rows of ~{sum(map(len, values)) / len(values):.0f}-byte values into audit_log, "
          f"insert + commit + closing checkpoint; median of {args.repeats} interleaved runs")  # fmt: skip
    for name, runs in results.items():
        rate = statistics.median(r[0] for r in runs)
        cpu = statistics.median(r[1] for r in runs)
        size = statistics.median(r[2] for r in runs)
        print(f"  {name}: {rate:>9,.0f} rows/s  {cpu:5.2f} CPU µs/row  file {size:4.0f} MiB"
              f"  (runs {', '.join(f'{r[0]:,.0f}' for r in runs)})")  # fmt: skip


if __name__ == "__main__":
    main()
