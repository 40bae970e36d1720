"""Audit store throughput: sink writes with hash chaining (batch commits), and `verify`.

    .venv/bin/python bench/bench_audit.py [--records 1966080] [--batch 122880] [--fetch 16384] [--repeats 3]
                                          [--compare-classification]

Goals (issue 4): sink >= 400k audit rows/s with hashing, verify >= 300k rows/s. The records are
finding-shaped audit records (~300 bytes) spread over 4 partitions, written through DuckDBStore, the
sink's only write path, as the sink runs it: fetched chunks of ``--fetch`` records are prepared (skip
re-deliveries, hash, Arrow) while DuckDB commits the previous ``--batch`` records (type and id parsed in
the INSERT; rows and offsets in one transaction). The time includes closing the store (its final
checkpoint). The default is 16 transactions, so that the figure is the sustained rate: preparing the first
batch and committing the last do not overlap anything, which weighs on a run of only a few batches.
The chain runs natively when driftlog_native is built (``make``); the first line also times the Python
chain, which driftlog falls back to without it. ``--compare-classification`` also writes, interleaved, with
the native classification fast path off (every value classified by the SQL definition).
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import tempfile
import time
from concurrent.futures import Future, ThreadPoolExecutor
from operator import itemgetter
from pathlib import Path
from typing import Any

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from audit import native
from audit.chain import chain_arrow, chain_run, genesis
from audit.checkpoint import Signer, append_line, public_key_path
from audit.classify import Classifier
from audit.duckdb_store import ROW_GROUP, DuckDBStore, Prepared
from audit.store import RawRecord, Run, runs
from audit.verify import verify
from tests.integration.test_sink_exactly_once import audit_records


def pipelined_write(store: DuckDBStore, chunks: list[list[Run]], batch: int) -> None:
    """As the sink does: prepare fetched chunks while DuckDB commits the previous batch in another thread;
    commit once ``batch`` records are staged (and the previous commit is done)."""
    with ThreadPoolExecutor(1) as pool:
        pending: Future[None] | None = None
        staged: list[Prepared] = []
        for chunk in chunks:
            prepared = store.prepare(chunk)
            if prepared is not None:
                staged.append(prepared)
            if sum(p.table.num_rows for p in staged) >= batch:  # the sink's size condition
                if pending is not None:
                    pending.result()
                pending, staged = pool.submit(store.commit, staged), []
        if pending is not None:
            pending.result()
        store.commit(staged)


def fetched(records: list[RawRecord]) -> list[Run]:
    """Records as one fetch delivers them: per partition, in offset order, as columns, each value a new
    bytes object made in that order (as the Kafka client makes them), so that the values of a fetch lie
    together in memory as they would in the sink."""
    in_order = runs(sorted(records, key=itemgetter(1)))
    return [run._replace(values=[bytes(bytearray(v)) for v in run.values]) for run in in_order]


def timed_write(chunks: list[list[Run]], batch: int, n: int, fast_path: bool = True) -> tuple[Path, float, float, Any]:
    """Write ``chunks`` into a fresh store file: (its directory, rows/s, CPU µs per row, the heads)."""
    work = Path(tempfile.mkdtemp(prefix="driftlog-bench-audit-"))
    store = DuckDBStore(work / "a.duckdb", Classifier(fast_path=fast_path))
    started, cpu = time.perf_counter(), time.process_time()
    pipelined_write(store, chunks, batch)
    heads = store.heads()
    store.close()
    return work, n / (time.perf_counter() - started), (time.process_time() - cpu) / n * 1e6, heads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=16 * ROW_GROUP)
    parser.add_argument("--batch", type=int, default=ROW_GROUP, help="records per transaction")
    parser.add_argument("--fetch", type=int, default=16_384, help="records per fetched chunk")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--compare-classification", action="store_true",
                        help="also write with the native classification fast path off, interleaved")  # fmt: skip
    args = parser.parse_args()
    values = audit_records(args.records)
    raws = [RawRecord("audit", i % 4, i // 4, 1_767_225_600_000 + i, b"job:j", v) for i, v in enumerate(values)]
    # as the sink fetches them: at most --fetch records, never past a full batch; per partition, in offset
    # order, as columns
    cuts = sorted({*range(0, len(raws), args.batch), *(b + f for b in range(0, len(raws), args.batch)
                                                        for f in range(0, args.batch, args.fetch))})  # fmt: skip
    cuts = [c for c in cuts if c < len(raws)] + [len(raws)]
    chunks = [fetched(raws[a:b]) for a, b in itertools.pairwise(cuts)]

    (whole,) = runs(RawRecord("audit", 0, *r[2:]) for r in raws)
    started = time.perf_counter()
    chain_run(genesis("audit", 0), b"audit", 0, *whole[2:])
    python_rate = len(raws) / (time.perf_counter() - started)
    kinds = (pa.int64(), pa.int64(), pa.binary(), pa.binary())
    columns = [pa.array(c, t) for c, t in zip(whole[2:], kinds, strict=True)]
    started = time.perf_counter()
    chain_arrow(genesis("audit", 0), b"audit", 0, *columns)
    arrow_rate = len(raws) / (time.perf_counter() - started)

    write_rates, verify_rates, cpu, sql_only = [], [], [], []
    for _ in range(args.repeats):
        if args.compare_classification:  # interleaved with the run below, so that the ratio is fair
            sql_only.append(timed_write(chunks, args.batch, len(raws), fast_path=False)[1:])
        work, rate, cpu_per_row, heads = timed_write(chunks, args.batch, len(raws))
        write_rates.append(rate)
        cpu.append(cpu_per_row)
        signer = Signer.load_or_create(work / "k.pem")
        append_line(work / "c.jsonl", signer.checkpoint(1, heads))
        report = verify(work / "a.duckdb", work / "c.jsonl", public_key_path(work / "k.pem"))
        assert report.ok and report.records == len(raws), report.problems
        verify_rates.append(report.rate)

    mean_bytes = sum(map(len, values)) / len(values)
    write, check = statistics.median(write_rates), statistics.median(verify_rates)
    print(f"{len(raws):,} audit records (~{mean_bytes:.0f} bytes), {args.batch:,} per transaction, "
          f"prepared in chunks of {args.fetch:,}")  # fmt: skip
    print(
        f"  median of {args.repeats} runs; chain hashing alone: {python_rate:,.0f} rows/s in Python, "
        f"{arrow_rate:,.0f} rows/s over Arrow columns ({'native' if native.core else 'native core not built'})"
    )
    print(f"  sink write (hash; classify, rows + offsets per transaction; close):  {write:>10,.0f} rows/s"
          f"  ({write / 400_000:.2f}x the 400k goal; runs {[f'{r:,.0f}' for r in write_rates]}); "
          f"{statistics.median(cpu):.2f} CPU µs/row")  # fmt: skip
    if sql_only:
        rate, per_row = statistics.median(r for r, _, _ in sql_only), statistics.median(c for _, c, _ in sql_only)
        print(f"  sink write, every value classified by the SQL (no fast path):      {rate:>10,.0f} rows/s"
              f"  (runs {[f'{r:,.0f}' for r, _, _ in sql_only]}); {per_row:.2f} CPU µs/row")  # fmt: skip
    print(f"  verify (chains, offsets, checkpoint, classes and views):           {check:>10,.0f} rows/s"
          f"  ({check / 300_000:.2f}x the 300k goal; runs {[f'{r:,.0f}' for r in verify_rates]})")  # fmt: skip


if __name__ == "__main__":
    main()
