"""Audit store throughput: sink writes with hash chaining (batch commits), and `verify`.

    .venv/bin/python bench/bench_audit.py [--records 400000] [--batch 10000] [--repeats 3]

Goals (issue 4): sink >= 400k audit rows/s with hashing, verify >= 300k rows/s. The records are
finding-shaped audit records (~330 bytes) spread over 4 partitions, written through DuckDBStore.write,
the sink's only write path (chain hashes, raw rows and offsets in one transaction per batch), pipelined
as the sink runs it.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from audit.chain import genesis, link
from audit.checkpoint import Signer, append_line, public_key_path
from audit.duckdb_store import DuckDBStore
from audit.store import RawRecord
from audit.verify import verify
from tests.integration.test_sink_exactly_once import audit_records


def pipelined_write(store: DuckDBStore, batches: list[list[RawRecord]]) -> None:
    """As the sink does: hash and stage batch N+1 while DuckDB commits batch N in another thread."""
    with ThreadPoolExecutor(1) as pool:
        pending = None
        for batch in batches:
            prepared = store.prepare(batch)
            if pending is not None:
                pending.result()
            pending = pool.submit(store.commit, prepared) if prepared is not None else None
        if pending is not None:
            pending.result()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=400_000)
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    values = audit_records(args.records)
    raws = [RawRecord("audit", i % 4, i // 4, 1_767_225_600_000 + i, b"job:j", v) for i, v in enumerate(values)]
    batches = [raws[i : i + args.batch] for i in range(0, len(raws), args.batch)]

    started = time.perf_counter()
    prev = genesis("audit", 0)
    for r in raws:
        prev = link(prev, r)
    hash_rate = len(raws) / (time.perf_counter() - started)

    write_rates, verify_rates = [], []
    for _ in range(args.repeats):
        work = Path(tempfile.mkdtemp(prefix="driftlog-bench-audit-"))
        store = DuckDBStore(work / "a.duckdb")
        started = time.perf_counter()
        pipelined_write(store, batches)
        write_rates.append(len(raws) / (time.perf_counter() - started))
        signer = Signer.load_or_create(work / "k.pem")
        append_line(work / "c.jsonl", signer.checkpoint(1, store.heads()))
        store.close()
        report = verify(work / "a.duckdb", work / "c.jsonl", public_key_path(work / "k.pem"))
        assert report.ok and report.records == len(raws), report.problems
        verify_rates.append(report.rate)

    mean_bytes = sum(map(len, values)) / len(values)
    write, check = statistics.median(write_rates), statistics.median(verify_rates)
    print(f"{len(raws):,} audit records (~{mean_bytes:.0f} bytes), {args.batch:,} per transaction")
    print(f"  median of {args.repeats} runs; chain hashing alone: {hash_rate:,.0f} rows/s")
    print(f"  sink write (hashing, raw rows + offsets per transaction, pipelined): {write:>10,.0f} rows/s"
          f"  ({write / 400_000:.2f}x the 400k goal; runs {[f'{r:,.0f}' for r in write_rates]})")  # fmt: skip
    print(f"  verify (chains, offsets, checkpoint, classes and views):           {check:>10,.0f} rows/s"
          f"  ({check / 300_000:.2f}x the 300k goal; runs {[f'{r:,.0f}' for r in verify_rates]})")  # fmt: skip


if __name__ == "__main__":
    main()
