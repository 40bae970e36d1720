"""Queries cannot starve the sink: commit latency idle vs. under slow-query clients, /health latency,
the largest response served and the sink's peak RSS.

    .venv/bin/python bench/bench_sql_isolation.py [--seconds 15] [--rate 2000] [--clients 16]

Records are produced at a steady ``--rate`` throughout. Phases alternate idle / loaded / idle / loaded
(side by side, so drift on a shared machine hits both); in a loaded phase ``--clients`` threads each send
a slow query (CPU-bound, stopped at ``DRIFTLOG_QUERY_TIMEOUT_S``) again and again, waiting out a 429.
Commit durations come from the sink's own debug log (one line per transaction). Then ``--clients``
threads at once ask for every row of ``audit_log`` (the byte cap decides what is served), and the sink's
peak RSS (VmHWM) is read from /proc. Goal (issue 12): commit p50/p99 loaded within 2x idle.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import orjson
from aiokafka import AIOKafkaProducer

from bench._broker import bench_settings
from streams.config import Settings, to_env
from streams.kafka.admin import ensure_topics
from streams.supervise import Child
from tests.integration.test_sink_exactly_once import audit_records

SLOW = "SELECT sum(hash(a.value, r.range)) FROM audit_log a CROSS JOIN range(1000000) r"


ERRORS: dict[str, int] = {}


def post(url: str, sql: str, timeout: float = 120) -> tuple[int, int]:
    """(status, bytes of the body); the error messages are counted in ``ERRORS``."""
    request = urllib.request.Request(url, data=orjson.dumps({"sql": sql, "max_rows": 10**9}), method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            size = 0
            while chunk := response.read(1 << 20):
                size += len(chunk)
            return response.status, size
    except urllib.error.HTTPError as exc:
        body = exc.read()
        message = str(orjson.loads(body).get("error", ""))[:60] if exc.code != 429 else "429"
        ERRORS[message] = ERRORS.get(message, 0) + 1
        return exc.code, len(body)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1) + 0.5))] if ordered else float("nan")


Phase = tuple[str, float, float]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=15.0, help="per phase (four phases)")
    parser.add_argument("--rate", type=float, default=2000.0, help="records per second produced throughout")
    parser.add_argument("--clients", type=int, default=16)
    args = parser.parse_args()
    log_path = Path(tempfile.mkdtemp()) / "sink.log"
    with bench_settings(log_level="debug", log_format="json", query_max_rows=10**9) as cfg:
        asyncio.run(ensure_topics(cfg.kafka_bootstrap_servers, cfg.all_topics, 1))
        sink = Child(["sink"], to_env(cfg), log_path)
        url = f"http://127.0.0.1:{cfg.sink_http_port}"
        try:
            sink.wait_healthy(cfg.sink_http_port)
            stop_producing = threading.Event()
            producer = threading.Thread(target=asyncio.run, args=(_produce(cfg, args.rate, stop_producing),))
            producer.start()
            time.sleep(3)  # warm up: the sink catches up with the rate
            phases, health, statuses = _phases(url, args.seconds, args.clients)
            stop_producing.set()
            producer.join()
            sizes = _everything_at_once(url, args.clients)
            rows = orjson.loads(
                urllib.request.urlopen(
                    urllib.request.Request(f"{url}/sql", data=b'{"sql": "SELECT count(*) FROM audit_log"}')
                ).read()
            )["rows"][0][0]
            peak_kb = next(
                int(line.split()[1])
                for line in Path(f"/proc/{sink.proc.pid}/status").read_text().splitlines()
                if line.startswith("VmHWM:")
            )
        finally:
            sink.stop()
    print(f"sink commits while {args.rate:g} records/s arrive; {args.clients} clients of slow queries when loaded")
    _report_commits(_commits(log_path), phases, health)
    print(f"slow-query answers by status: {dict(sorted(statuses.items()))}; errors: {ERRORS}")
    served = [size for status, size in sizes if status == 200]
    print(f"{args.clients} x 'SELECT * FROM audit_log' ({rows:,} rows) at once: statuses "
          f"{sorted(s for s, _ in sizes)}; largest response {max(served, default=0):,} bytes "
          f"(DRIFTLOG_QUERY_MAX_BYTES {cfg.query_max_bytes:,})")  # fmt: skip
    print(f"sink peak RSS (VmHWM): {peak_kb / 1024:,.0f} MB")


async def _produce(cfg: Settings, rate: float, stop: threading.Event) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=cfg.kafka_bootstrap_servers, linger_ms=5)
    await producer.start()
    try:
        records, i, tick = audit_records(int(rate * 120)), 0, 0.05
        while not stop.is_set():
            started = time.monotonic()
            for n in range(i, i + int(rate * tick)):
                await producer.send(cfg.audit_topic, records[n % len(records)], partition=0)
            i += int(rate * tick)
            await asyncio.sleep(max(0.0, tick - (time.monotonic() - started)))
        await producer.flush()
    finally:
        await producer.stop()


def _phases(url: str, seconds: float, clients: int) -> tuple[list[Phase], dict[str, list[float]], dict[int, int]]:
    phases: list[Phase] = []
    health: dict[str, list[float]] = {"idle": [], "loaded": []}
    statuses: dict[int, int] = {}

    def client(done: threading.Event) -> None:
        while not done.is_set():
            status, _ = post(f"{url}/sql", SLOW)
            statuses[status] = statuses.get(status, 0) + 1
            if status == 429:
                time.sleep(1.0)

    for phase in ("idle", "loaded", "idle", "loaded"):
        done = threading.Event()
        threads = [threading.Thread(target=client, args=(done,)) for _ in range(clients if phase == "loaded" else 0)]
        for t in threads:
            t.start()
        start = time.time()
        while time.time() - start < seconds:
            t0 = time.perf_counter()
            urllib.request.urlopen(f"{url}/health", timeout=30).read()
            health[phase].append(time.perf_counter() - t0)
            time.sleep(0.2)
        phases.append((phase, start, time.time()))
        done.set()
        for t in threads:
            t.join()
    return phases, health, statuses


def _everything_at_once(url: str, clients: int) -> list[tuple[int, int]]:
    """Every row of audit_log, by all clients at once (the byte cap decides what is served)."""
    sizes: list[tuple[int, int]] = []
    threads = [
        threading.Thread(target=lambda: sizes.append(post(f"{url}/sql", "SELECT * FROM audit_log")))
        for _ in range(clients)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sizes


def _report_commits(commits: list[tuple[float, float]], phases: list[Phase], health: dict[str, list[float]]) -> None:
    print(f"{'phase':<8} {'commits':>8} {'p50 ms':>8} {'p99 ms':>8} {'health p50 ms':>14} {'health max ms':>14}")
    by_phase: dict[str, list[float]] = {"idle": [], "loaded": []}
    for phase, start, end in phases:
        by_phase[phase] += [s for t, s in commits if start <= t < end]
    for phase, values in by_phase.items():
        p50, p99, h = percentile(values, 0.5) * 1000, percentile(values, 0.99) * 1000, health[phase]
        print(f"{phase:<8} {len(values):>8} {p50:>8.2f} {p99:>8.2f}"
              f" {statistics.median(h) * 1000:>14.1f} {max(h) * 1000:>14.1f}")  # fmt: skip
    idle, loaded = by_phase["idle"], by_phase["loaded"]
    print(f"loaded / idle: p50 {percentile(loaded, 0.5) / percentile(idle, 0.5):.2f}x, "
          f"p99 {percentile(loaded, 0.99) / percentile(idle, 0.99):.2f}x (goal: within 2x)")  # fmt: skip


def _commits(log_path: Path) -> list[tuple[float, float]]:
    found: list[tuple[float, float]] = []
    for line in log_path.read_bytes().splitlines():
        try:
            doc: dict[str, Any] = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if doc.get("msg") == "committed":
            found.append((float(doc["ts"]), float(doc["seconds"])))
    return found


if __name__ == "__main__":
    main()
