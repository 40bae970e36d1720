"""The ceiling for the sink on this machine: DuckDB alone inserting audit_log-shaped rows (no hashing, no
JSON parsing), per transaction size and value type.

    .venv/bin/python bench/bench_duckdb_ceiling.py [--records 300000]

Compare with bench/bench_audit.py's sink figure: what the sink adds on top, and how far the 400k rows/s
goal of issue 4 is from what DuckDB itself does with ~300-byte records here.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import duckdb
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.integration.test_sink_exactly_once import audit_records


def insert_rate(values: list[bytes], batch: int, value_type: str) -> float:
    con = duckdb.connect(str(Path(tempfile.mkdtemp()) / "x.duckdb"))
    con.execute("SET wal_autocheckpoint = '256MB'")  # as the sink sets it
    con.execute(
        f"CREATE TABLE log (topic VARCHAR, p INTEGER, o BIGINT, ts BIGINT, key BLOB, value {value_type},"
        " record_type VARCHAR, record_id VARCHAR, chain_hash BLOB)"
    )
    started = time.perf_counter()
    for i in range(0, len(values), batch):
        chunk = values[i : i + batch]
        n = len(chunk)
        value = pa.array(chunk, pa.binary()) if value_type == "BLOB" else pa.array([c.decode() for c in chunk])
        table = pa.table({
            "topic": ["audit"] * n, "p": [0] * n, "o": list(range(i, i + n)), "ts": [0] * n,
            "key": pa.array([b"k"] * n), "value": value, "record_type": ["finding"] * n,
            "record_id": [str(j) for j in range(i, i + n)], "chain_hash": pa.array([b"0" * 32] * n),
        })  # fmt: skip
        con.register("t", table)
        con.execute("BEGIN")
        con.execute("INSERT INTO log SELECT * FROM t")
        con.execute("COMMIT")
    con.close()
    return len(values) / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=300_000)
    args = parser.parse_args()
    values = audit_records(args.records)
    print(
        f"{args.records:,} rows of ~{sum(map(len, values)) / len(values):.0f}-byte values, DuckDB insert + commit only"
    )
    for batch in (10_000, 50_000):
        for value_type in ("BLOB", "VARCHAR"):
            rate = insert_rate(values, batch, value_type)
            print(f"  {batch:>6,} per transaction, value {value_type:<7}: {rate:>9,.0f} rows/s")


if __name__ == "__main__":
    main()
