"""``driftlog report`` size and render time: for each audit store, the page's size, the median time to
write it (SQL + SVG) and the median time headless Chromium (the distribution's package) takes to load and
lay it out (the navigation's loadEventEnd), over ``--repeat`` runs.

.venv/bin/python bench/bench_report.py --db driftlog-demo.duckdb --db big.duckdb [--repeat 5]
.venv/bin/python bench/bench_report.py --simulate 1024 --steps 200   # builds the store first (broker-free)
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from audit.report import build_report
from tests.audit_db import build_db
from tests.browser import Browser, missing

CHECK = (Path(__file__).resolve().parents[1] / "tests" / "report_check.js").read_text()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, action="append", default=[])
    parser.add_argument("--simulate", type=int, action="append", default=[], metavar="RANKS")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-report-"))
    dbs = list(args.db)
    for ranks in args.simulate:
        started = time.perf_counter()
        dbs.append(build_db(work / f"sim{ranks}.duckdb", ranks=ranks, steps=args.steps))
        print(f"built a {ranks}-rank, {args.steps}-step audit store in {time.perf_counter() - started:.1f}s")
    why = missing()
    browser = Browser() if why is None else None
    try:
        for db in dbs:
            writes, loads, size, figures = [], [], 0, 0
            for i in range(args.repeat):
                r = build_report(db, work / f"{db.stem}-{i}.html")
                writes.append(r.seconds)
                size, figures = r.size_bytes, sum(f.marks > 0 for f in r.figures)
                if browser is not None:
                    browser.open(r.path)
                    result = browser.run(CHECK)
                    assert all(f["drawn"] == f["expected"] for f in result["figures"]), result  # empty: says so
                    loads.append(result["load_ms"])
            load = f"{statistics.median(loads):.0f} ms in Chromium" if loads else f"no browser ({why})"
            print(f"{db}: {size / 1024:,.0f} KiB, {figures}/7 figures with data, written in "
                  f"{statistics.median(writes):.2f}s (median of {args.repeat}), loaded in {load}")  # fmt: skip
    finally:
        if browser is not None:
            browser.close()


if __name__ == "__main__":
    main()
