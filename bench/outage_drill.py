"""Broker outages under a running sink, with a producer writing throughout, and SIGTERM exit times by state.

    .venv/bin/python bench/outage_drill.py --name ops16 --outages 30,60,120
    .venv/bin/python bench/outage_drill.py --name ops16 --outages 30,60,120 --worker

With ``--worker``, each outage is a run of its own with a worker and a sink (tests/integration/
test_worker_outage.py): a scenario is produced, the broker stopped for that long once the worker has begun,
started again; afterwards the audit trail is compared with an uninterrupted in-process run (records lost,
unexpected, stored twice) and verified; then the worker's SIGTERM exit time in each state (idle, writing a
backlog, broker away, during a rebalance, starting while the broker is away) and what a fenced worker does.

Uses (and stops/starts) the local broker named ``--name`` (`driftlog kafka start --name NAME` first; never
the shared one). For each outage: the broker is stopped for that many seconds while a producer keeps
sending audit records (it retries what the broker refused), then started again (same data, same port).
At the end: records acknowledged, stored, lost (acknowledged but not stored) and duplicated; then the
sink's SIGTERM exit time in each state (idle, backlog, broker away, fault held, starting without a broker).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from aiokafka import AIOKafkaProducer

from audit.query import run_query
from streams.config import Settings, load, to_env
from streams.demo import namespaced
from streams.kafka.admin import ensure_topics
from streams.kafka.launcher import LocalKafka
from streams.supervise import Child
from tests.integration.test_sink_exactly_once import audit_records


def status(port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except OSError:
        return 0


class Feeder(threading.Thread):
    """Sends audit records one batch after another; a batch the broker refused is sent again."""

    def __init__(self, bootstrap: str, topic: str, records: list[bytes]) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topic, self.records = bootstrap, topic, records
        self.acked = 0
        self.retries = 0
        self.done = threading.Event()

    def run(self) -> None:
        asyncio.run(self._feed())

    async def _feed(self) -> None:
        producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, acks="all", request_timeout_ms=5000)
        while True:
            try:
                await producer.start()
                break
            except Exception:
                await asyncio.sleep(1)
        batch = 200
        while self.acked < len(self.records):
            chunk = self.records[self.acked : self.acked + batch]
            try:
                futures = [await producer.send(self.topic, r) for r in chunk]
                await asyncio.wait_for(asyncio.gather(*futures), 10)
                self.acked += len(chunk)
            except Exception:
                self.retries += 1
                await asyncio.sleep(0.5)
            await asyncio.sleep(0.05)  # a steady stream, not one burst
        await producer.stop()
        self.done.set()


def sigterm_time(child: Child) -> tuple[int, float]:
    started = time.monotonic()
    code = child.stop(grace=30)
    return code, time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--name", default="ops16")
    parser.add_argument("--outages", default="30,60,120", help="seconds, comma-separated")
    parser.add_argument("--records", type=int, default=60_000)
    parser.add_argument("--worker", action="store_true", help="outages under a worker and a sink (see above)")
    parser.add_argument("--ranks", type=int, default=32, help="--worker: the scenario's ranks")
    parser.add_argument("--steps", type=int, default=200, help="--worker: the scenario's steps")
    args = parser.parse_args()
    if args.worker:
        worker_drill(args)
        return
    logging.basicConfig(level=logging.ERROR)
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)  # the drill's own producer retries quietly
    base = load()
    broker = LocalKafka(base.kafka_home, base.kafka_version, args.name)
    state = broker.start()
    work = Path(tempfile.mkdtemp(prefix="outage-drill-"))
    cfg = namespaced(load(kafka_bootstrap_servers=state.bootstrap, home=work / "home"), f"drill-{os.getpid()}",
                     work / "audit.duckdb").model_copy(update={"health_broker_timeout_s": 10.0})  # fmt: skip
    asyncio.run(ensure_topics(cfg.kafka_bootstrap_servers, cfg.all_topics, cfg.topic_partitions))
    records = audit_records(args.records)
    sink = Child(["sink"], to_env(cfg), work / "sink.log")
    sink.wait_healthy(cfg.sink_http_port)
    feeder = Feeder(cfg.kafka_bootstrap_servers, cfg.audit_topic, records)
    feeder.start()
    survived = 0
    outages = [float(s) for s in args.outages.split(",") if s]
    for seconds in outages:
        time.sleep(3)
        before = feeder.acked
        broker.stop()
        down = time.monotonic()
        saw_503 = False
        while time.monotonic() - down < seconds:
            saw_503 |= status(cfg.sink_http_port) == 503
            time.sleep(1)
        alive = sink.proc.poll() is None
        restarted = broker.start()
        print(f"outage {seconds:.0f}s: sink alive {alive}, /health 503 seen {saw_503}, broker back on the same port "
              f"{restarted.port == state.port}, acked before {before:,}")  # fmt: skip
        survived += alive
    feeder.done.wait(600)
    deadline = time.monotonic() + 300
    while not (_caught_up(cfg) and status(cfg.sink_http_port) == 200) and time.monotonic() < deadline:
        time.sleep(1)
    code, took = sigterm_time(sink)
    rows = run_query(
        cfg.db_path,
        'SELECT count(*), count(DISTINCT ("partition", "offset")), count(DISTINCT record_id) FROM audit_log',
    ).rows[0]
    log = (work / "sink.log").read_text()
    print(f"outages survived {survived}/{len(outages)} ({args.outages} s); producer retries {feeder.retries}")
    lost, doubled = max(0, feeder.acked - rows[2]), rows[0] - rows[1]
    print(f"records acknowledged {feeder.acked:,}, stored {rows[0]:,} (distinct offsets {rows[1]:,}, distinct "
          f"ids {rows[2]:,}); lost {lost:,}; offsets stored twice {doubled:,}")  # fmt: skip
    print(f"sink log lines {len(log.splitlines()):,}, tracebacks {log.count('Traceback')}; SIGTERM (caught up, "
          f"after the drill): exit {code} in {took:.2f}s")  # fmt: skip
    sigterm_by_state(broker, cfg, work)


def _caught_up(cfg: object) -> bool:
    from streams.kafka.admin import group_lag

    lag = asyncio.run(group_lag(cfg.kafka_bootstrap_servers, cfg.sink_group, [cfg.audit_topic]))  # type: ignore[attr-defined]
    return sum(lag.values()) == 0


def sigterm_by_state(broker: LocalKafka, cfg: object, work: Path) -> None:
    from streams.config import Settings

    assert isinstance(cfg, Settings)
    results = []

    def fresh(tag: str) -> tuple[Settings, Child]:
        c = namespaced(cfg, f"{tag}-{os.getpid()}", work / f"{tag}.duckdb").model_copy(
            update={"health_broker_timeout_s": 3.0}
        )
        asyncio.run(ensure_topics(c.kafka_bootstrap_servers, c.all_topics, c.topic_partitions))
        return c, Child(["sink"], to_env(c), work / f"{tag}.log")

    c, child = fresh("idle")
    child.wait_healthy(c.sink_http_port)
    time.sleep(2)
    results.append(("idle, caught up", *sigterm_time(child)))

    c, child = fresh("backlog")
    from streams.demo import produce

    asyncio.run(produce(c.kafka_bootstrap_servers, c.audit_topic, audit_records(200_000)))
    child.wait_healthy(c.sink_http_port)
    time.sleep(1.0)
    results.append(("writing a backlog", *sigterm_time(child)))

    c, child = fresh("away")
    child.wait_healthy(c.sink_http_port)
    broker.stop()
    while status(c.sink_http_port) != 503:
        time.sleep(0.5)
    results.append(("broker away (503)", *sigterm_time(child)))

    child = Child(["sink"], to_env(c), work / "start-away.log")
    time.sleep(4)
    results.append(("starting while the broker is away", *sigterm_time(child)))
    broker.start()
    for state, code, took in results:
        print(f"SIGTERM {state}: exit {code} in {took:.2f}s")
    for log in sorted(work.glob("*.log")):
        text = log.read_text()
        if "Traceback" in text:
            print(f"  {log.name}: has a traceback")


def worker_drill(args: argparse.Namespace) -> None:
    from tests.integration.test_worker_outage import worker_outage_run

    logging.basicConfig(level=logging.ERROR)
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    base = load()
    broker = LocalKafka(base.kafka_home, base.kafka_version, args.name)
    work = Path(tempfile.mkdtemp(prefix="worker-outage-drill-"))
    outages = [float(x) for x in args.outages.split(",") if x]
    runs = []
    for seconds in outages:
        run = worker_outage_run(broker, seconds, work / f"outage-{seconds:.0f}", args.ranks, args.steps)
        runs.append(run)
        print(f"outage {seconds:.0f}s: worker alive {run.worker_alive}, sink alive {run.sink_alive}, worker 503 "
              f"{run.saw_503[:1]}, 200 again {run.back_to_200_s:.1f}s after the broker was back; records expected "
              f"{run.expected}, stored {run.stored}, lost {run.missing}, unexpected {run.unexpected}, stored twice "
              f"{run.doubled}; verify {'OK' if not run.verify_problems else run.verify_problems}; worker log "
              f"{run.worker_log_lines} lines, tracebacks {run.tracebacks}")  # fmt: skip
    survived = sum(r.worker_alive and r.sink_alive and not (r.missing or r.unexpected or r.doubled) for r in runs)
    print(f"worker outages survived {survived}/{len(runs)} ({args.outages} s); records lost "
          f"{sum(r.missing for r in runs)}, duplicated {sum(r.doubled for r in runs)}")  # fmt: skip
    for state, code, took, traceback in WorkerStates(broker, work / "sigterm").run():
        print(f"worker SIGTERM {state}: exit {code} in {took:.2f}s{', TRACEBACK' if traceback else ''}")


class WorkerStates:
    """The worker's exit code and time after SIGTERM in each state, and whether its log holds a traceback."""

    def __init__(self, broker: LocalKafka, work: Path) -> None:
        self.broker, self.work = broker, work
        self.bootstrap = broker.start().bootstrap
        work.mkdir(parents=True, exist_ok=True)
        self.results: list[tuple[str, int, float, bool]] = []

    def started(self, tag: str, healthy: bool = True) -> tuple[Settings, Child]:
        base = load(kafka_bootstrap_servers=self.bootstrap, home=self.work / tag, topic_partitions=2)
        cfg = namespaced(base, f"term-{tag}-{os.getpid()}", self.work / f"{tag}.duckdb")
        cfg = cfg.model_copy(update={"health_broker_timeout_s": 3.0})
        if healthy:
            asyncio.run(ensure_topics(cfg.kafka_bootstrap_servers, cfg.all_topics, cfg.topic_partitions))
        child = Child(["worker"], to_env(cfg), self.work / f"{tag}.log")
        if healthy:
            child.wait_healthy(cfg.worker_http_port, 120)
        return cfg, child

    def record(self, what: str, child: Child, took: float | None = None) -> None:
        code, took = sigterm_time(child) if took is None else (child.proc.returncode, took)
        self.results.append((what, code, took, "Traceback" in child.log_path.read_text(errors="replace")))

    def run(self) -> list[tuple[str, int, float, bool]]:
        from streams.sim.output import to_kafka
        from streams.sim.scenarios import SCENARIOS

        _, child = self.started("idle")
        time.sleep(3)
        self.record("idle", child)

        cfg = namespaced(load(kafka_bootstrap_servers=self.bootstrap), f"term-backlog-{os.getpid()}", self.work / "x")
        asyncio.run(ensure_topics(self.bootstrap, cfg.all_topics, 2))
        topics = {"telemetry": cfg.telemetry_topic, "decisions": cfg.decisions_topic}
        asyncio.run(to_kafka(SCENARIOS["training-fabric"](5, 64, 300), 5, self.bootstrap, topics,
                             self.work / "truth.json", lambda _: None))  # fmt: skip
        _, child = self.started("backlog")
        time.sleep(2)
        self.record("processing a backlog", child)

        cfg, child = self.started("away")
        self.broker.stop()
        while status(cfg.worker_http_port) != 503:
            time.sleep(0.5)
        self.record("broker away (503)", child)
        _, child = self.started("starting-away", healthy=False)
        time.sleep(6)
        self.record("starting while the broker is away", child)
        self.broker.start()

        cfg, child = self.started("rebalance")
        other = Child(["worker"], {**to_env(cfg), "DRIFTLOG_WORKER_HTTP_PORT": "0"}, self.work / "rebalance2.log")
        time.sleep(2.5)  # the group is rebalancing to two members
        self.record("during a rebalance", child)
        self.record("the other worker, after the rebalance", other)

        cfg, child = self.started("fenced")
        started = time.monotonic()
        asyncio.run(fence(self.bootstrap, f"{cfg.worker_group}/p0/worker"))
        try:
            child.proc.wait(60)
            self.record("fenced (no SIGTERM: from the fencing to the exit)", child, time.monotonic() - started)
        except subprocess.TimeoutExpired:
            self.record("fenced, still running after 60 s (then SIGTERM)", child)
        return self.results


async def fence(bootstrap: str, transactional_id: str) -> None:
    """Take a worker task's transactional id over, as another instance would."""
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=transactional_id)
    await producer.start()
    await producer.begin_transaction()
    await producer.abort_transaction()
    await producer.stop()


if __name__ == "__main__":
    main()
