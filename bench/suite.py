"""`make bench`: the throughput figures of issue 15 in one table, and as JSON.

    .venv/bin/python bench/suite.py [--repeats 3] [--json bench-results.json] [--smoke] [--only live,rss]

Figures (each the median of ``--repeats`` runs; runs that are compared run interleaved, one after the other,
in every repeat, so that their ratio is measured side by side):

- **in-process**: the engine over the workload's messages in this process (``streams.testing.run_stream``);
- **raw ceiling**: a bare aiokafka consumer that only ``orjson``-decodes the same messages from the topic;
- **live, N worker(s)**: ``driftlog worker`` ×N and ``driftlog sink`` started on a fresh 4-partition telemetry
  topic; once their group has formed, the workload (several jobs, keyed by job) is produced as the SDK and the
  simulator send it (lz4), held back in one transaction and timed from its commit (the producer is not on
  the workers' cores while they are timed: exporters run on other hosts); to telemetry lag 0 (samples/s, and
  per worker), and to every audit row committed (includes the worker's idle flush); **end to end, idle wait
  excluded**: to every audit row committed, less the time the worker waited idle for its idle flush (its
  ``driftlog_input_end_wait_seconds``): all the engine's work (lag 0 leaves out the epochs the allowed
  lateness holds until the input's end) without the fixed wait, the figure to compare with in-process;
- **workers, balanced jobs**: 1 and 2 workers (each pinned to its own CPU) on four alike jobs keyed to four
  partitions (``Workload.balanced``: the mixed workload above is 99.5% one job, which one worker must carry),
  draining a pre-filled topic: the workload is held back in one producer transaction until the group has
  formed, and timed from its commit (the producer is not on the workers' cores while they are timed); where
  the drain's machine time went (:func:`cpu_accounting`): a worker that waits for a core is not a worker that
  costs more, nor one that waits for its input;
- **replay** of the topics' whole range and **analyze** of the same messages as a JSONL file;
- **sink**: audit records drained from Kafka into DuckDB (``bench_sink_kafka``), beside aiokafka alone;
- **finding latency** p50/p99 of a job whose exporters send ~10 k and ~100 k samples/s **in real time** (each
  message sent once the wall clock has reached its newest event time), to fresh topics while a worker and the
  sink run, under the default settings and a low-latency profile (``PROFILES``); from sending the message a
  finding names as its source to the finding visible to a query through the sink's SQL endpoint;
- **RSS** of the engine (a child process per point) against ranks and the allowed lateness (the event-time
  window that is buffered), with its samples/s and CPU µs per sample.

``--smoke`` is the one-minute form CI runs (small workload, one run, figures printed, nothing asserted).
Uses KAFKA_BOOTSTRAP_SERVERS if set, else starts the local broker (bench/_broker.py); deletes the topics it
creates (each live run's at its end, the rest at the suite's).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import math
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import orjson
from aiokafka import AIOKafkaConsumer

from bench._broker import bench_settings, broker_pid, drop_topics
from streams.config import Settings, to_env
from streams.demo import input_ended
from streams.kafka.admin import GroupLag, ensure_topics, partitions
from streams.kafka.limits import TELEMETRY_COMPRESSION
from streams.sim.scenarios import SCENARIOS
from streams.supervise import Child, free_port
from streams.testing import run_stream, stored_records
from streams.variants import message_time

Item = tuple[str, str, bytes]  # (telemetry | decisions, key, value)
FULL_JOBS = (("training-fabric", 64, 300), ("inference-sla", 16, 80), ("control-storm", 32, 80),
             ("serving-saturation", 16, 100))  # fmt: skip
SMOKE_JOBS = (("training-fabric", 16, 40), ("inference-sla", 16, 40))
# FULL_JOBS' steps times this by default: at 1 (1.16 M samples, drained in ~1 s) a live run measured its start
# and end (end to end, idle wait excluded, 1 worker: 0.23x the in-process engine at 1, 0.60x at 5; medians of 3)
SCALE = 5
# ranks, steps, allowed lateness (s): ranks at a short run; then the buffered window, 30 s against 10 minutes,
# over a run long enough (64 ranks x 300 steps: ~3 min of event time) for the window to matter
FULL_RSS = ((1024, 4, 30.0), (4096, 2, 30.0), (16384, 2, 30.0), (64, 300, 30.0), (64, 300, 600.0))
SMOKE_RSS = ((1024, 2, 30.0),)
HONEST = "end to end, idle wait excluded"
RATES = ("to every message processed", "to lag 0", HONEST)  # live figures compared with the in-process engine
LAG_POLL_S = 0.1  # how often a live run asks the broker for the workers' lag (faster polls take the broker CPU)


@dataclass
class Workload:
    """Several simulated jobs running at once: their messages interleaved in event time, keyed by job."""

    items: list[Item]
    samples: int
    records: int
    findings: int

    @staticmethod
    def of(jobs: tuple[tuple[str, int, int], ...]) -> Workload:
        scenarios = [SCENARIOS[name](seed, ranks, steps) for seed, (name, ranks, steps) in enumerate(jobs, 1)]
        return Workload.interleaved([m for s in scenarios for m in s.run()])

    @staticmethod
    def interleaved(messages: list[Item]) -> Workload:
        """Messages of jobs that run at once, interleaved in event time; counted by the in-process run."""
        keyed = sorted(((message_time((k, v)), n, k, key, v) for n, (k, key, v) in enumerate(messages)),
                       key=lambda m: m[:2])  # fmt: skip
        items = [(k, key, v) for _, _, k, key, v in keyed]
        out = run_stream([(k, v) for k, _, v in items])
        samples = sum(n for kind, n in out.samples_by_kind.items() if kind != "decision")
        findings = sum(1 for r in out.audit if r.type == "finding")
        return Workload(items, samples, len(out.audit), findings)

    @staticmethod
    def balanced(scenario: str, ranks: int, steps: int, partitions: int = 4) -> Workload:
        """``partitions`` jobs of one scenario, alike but for their seed, named so that each is keyed to a
        partition of its own (Kafka's default partitioner): the work spreads over the partitions."""
        from aiokafka.partitioner import murmur2

        names: dict[int, str] = {}
        for i in itertools.count():
            if len(names) == partitions:
                break
            names.setdefault((murmur2(f"{scenario}-{i}".encode()) & 0x7FFFFFFF) % partitions, f"{scenario}-{i}")
        messages = []
        for seed, name in enumerate(sorted(names.values()), 1):
            run = SCENARIOS[scenario](seed, ranks, steps)  # its job's name, everywhere in its messages, renamed
            for k, key, value in run.run():
                renamed = value.replace(run.job.encode(), name.encode())
                if k == "decisions":  # (a decision's id is its identity: the copies' must differ)
                    doc = orjson.loads(renamed)
                    renamed = orjson.dumps({**doc, "id": f"{name}/{doc['id']}"})
                messages.append((k, key.replace(run.job, name), renamed))
        return Workload.interleaved(messages)


@dataclass
class Figures:
    """Per figure, the value of every run (the table shows the median)."""

    runs: dict[str, list[float]] = field(default_factory=dict)
    units: dict[str, str] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)

    def add(self, name: str, value: float, unit: str, note: str = "") -> None:
        self.runs.setdefault(name, []).append(value)
        self.units[name] = unit
        if note:
            self.notes[name] = note

    def median(self, name: str) -> float:
        return statistics.median(self.runs[name])

    def ratio(self, name: str, over: str, unit: str = "x") -> None:
        """A ratio of two figures' medians, both measured in the same repeats."""
        top, bottom = self.runs.get(name), self.runs.get(over)
        if top and bottom:
            key = f"{name} / {over}"
            self.runs[key] = [a / b for a, b in zip(top, bottom, strict=False) if b]
            self.units[key] = unit

    def table(self) -> str:
        width = max(len(n) for n in self.runs)
        lines = [f"{'figure':<{width}}  {'median':>12}  unit        runs"]
        for name, values in self.runs.items():
            runs = ", ".join(_num(v) for v in values)
            note = f"  ({self.notes[name]})" if name in self.notes else ""
            lines.append(f"{name:<{width}}  {_num(self.median(name)):>12}  {self.units[name]:<10}  {runs}{note}")
        return "\n".join(lines)

    def as_json(self) -> dict[str, Any]:
        return {n: {"median": self.median(n), "unit": self.units[n], "runs": v, "note": self.notes.get(n, "")}
                for n, v in self.runs.items()}  # fmt: skip


def _num(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def in_process(w: Workload, figures: Figures) -> None:
    started, cpu = time.perf_counter(), time.process_time()
    run_stream([(k, v) for k, _, v in w.items])
    wall, used = time.perf_counter() - started, time.process_time() - cpu
    figures.add("in-process engine", w.samples / wall, "samples/s")
    figures.add("in-process engine CPU", used / w.samples * 1e6, "CPU µs/sample")


async def _ceiling(cfg: Settings, w: Workload) -> float:
    consumer = AIOKafkaConsumer(bootstrap_servers=cfg.kafka_bootstrap_servers, enable_auto_commit=False,
                                max_partition_fetch_bytes=8 << 20)  # fmt: skip
    await consumer.start()
    try:
        consumer.assign(await partitions(cfg.kafka_bootstrap_servers, [cfg.telemetry_topic]))
        await consumer.seek_to_beginning()
        todo = sum(1 for k, _, _ in w.items if k == "telemetry")
        started = time.perf_counter()
        while todo > 0:
            for messages in (await consumer.getmany(timeout_ms=200, max_records=2000)).values():
                for m in messages:
                    orjson.loads(m.value or b"{}")
                todo -= len(messages)
        return w.samples / (time.perf_counter() - started)
    finally:
        await consumer.stop()


def ceiling(cfg: Settings, w: Workload, figures: Figures) -> None:
    figures.add("raw ceiling (aiokafka + orjson)", asyncio.run(_ceiling(cfg, w)), "samples/s")


def live(
    cfg: Settings,
    w: Workload,
    figures: Figures,
    workers: int,
    logs: Path,
    label: str = "live",
    pin: bool = False,
    prefilled: bool = False,
) -> None:
    """A fresh namespace per run: the workers start on empty topics, and once every one of them holds its
    partitions the workload is produced; measured from the first message sent to telemetry lag 0 (so neither
    the workers' start nor their group's join counts), and the workers' own CPU time from then to the end of
    their input (the idle flush, which emits what the watermark still held). ``pin``: worker ``i`` on CPU
    ``i`` (modulo the CPUs this process may use; the producer, broker and sink are not pinned).
    ``prefilled``: the workload is produced in one transaction and measured from its commit (the workers read
    ``read_committed``: they see all of it at once), so the producer is not on the workers' cores while
    they are timed: a drain of a pre-filled topic by a group already formed."""
    from tests.integration.test_scale_out import wait_for_split

    tag = f"{workers}w-{time.monotonic_ns()}"
    names = ("telemetry_topic", "decisions_topic", "worker_group", "sink_group", "audit_topic", "state_topic",
             "checkpoint_topic", "shared_topic")  # fmt: skip
    update: dict[str, Any] = {n: f"{getattr(cfg, n)}-{tag}" for n in names}
    run = cfg.model_copy(update={**update, "db_path": logs / f"audit-{tag}.duckdb"})
    asyncio.run(ensure_topics(run.kafka_bootstrap_servers, run.all_topics, run.topic_partitions))
    env = to_env(run)
    ports = [run.worker_http_port] + [free_port() for _ in range(workers - 1)]
    sink = Child(["sink"], env, logs / f"sink-{tag}.log")
    children = [Child(["worker"], {**env, "DRIFTLOG_WORKER_HTTP_PORT": str(p)}, logs / f"worker{i}-{tag}.log")
                for i, p in enumerate(ports)]  # fmt: skip
    if pin:
        import os

        cpus = sorted(os.sched_getaffinity(0))
        for i, child in enumerate(children):
            os.sched_setaffinity(child.proc.pid, {cpus[i % len(cpus)]})  # (its threads start later: they inherit)
    broker = broker_pid(run.kafka_bootstrap_servers)
    try:
        sink.wait_healthy(run.sink_http_port)
        for child, port in zip(children, ports, strict=True):
            child.wait_healthy(port, timeout=180)
        if workers > 1:
            wait_for_split(run.telemetry_topic, ports)
        t = timed(run, w, children, sink, ports, broker, prefilled)
    finally:
        for child in [*children, sink]:
            child.stop()
        drop_topics(run.kafka_bootstrap_servers, set(run.all_topics).__contains__)
    name = f"{label}, {workers} worker{'s' * (workers > 1)}"
    since = "from the commit of the transaction holding the workload" if prefilled else "from the first message sent"
    figures.add(
        f"{name}: to every message processed",
        w.samples / (t.processed - t.started),
        "samples/s",
        f"{since}; to the last message a worker processed, by its own clock (lag 0 trails it by the acknowledgements)",
    )
    figures.add(f"{name}: to lag 0", w.samples / (t.drained - t.started), "samples/s",
                f"{since}; a worker that finished its share first may still release epochs it held after lag 0 "
                "(paced by the other's marks): that tail is in neither figure")  # fmt: skip
    if workers > 1 and len(t.done) == workers:  # (every worker processed some of the input)
        figures.add(f"{name}: one worker alone, to lag 0", (t.processed - min(t.done)) / (t.drained - t.started),
                    "share", "from the first worker's last message processed to the last one's")  # fmt: skip
    figures.add(
        f"{name}: producing the workload",
        t.producing,
        "s",
        "before the timing, held back in one transaction" if prefilled else "while the workers consume it",
    )
    figures.add(f"{name}: to lag 0, per worker", w.samples / (t.drained - t.started) / workers, "samples/s")
    figures.add(
        f"{name}: CPU",
        (sum(t.ended.workers) - sum(t.start.workers)) / w.samples * 1e6,
        "CPU µs/sample",
        "the workers' own CPU time to their input's end, idle flush included: "
        "what the work costs whatever the machine's load",
    )
    cpu_accounting(name, t.start, t.drained_cpu, w.samples, figures)
    figures.add(
        f"{name}: to audit rows committed",
        w.samples / (t.committed - t.started),
        "samples/s",
        f"every record in DuckDB (the sink's driftlog_sink_rows_total); includes the wait for the idle flush "
        f"of {run.idle_flush_s:g} s",
    )
    told = math.isfinite(t.waited)  # (a worker without the gauge, an older one: the least it can have waited)
    figures.add(
        f"{name}: {HONEST}",
        w.samples / (t.committed - t.started - (t.waited if told else run.idle_flush_s)),
        "samples/s",
        f"{since}; to the last audit row committed, all the engine's work in it (the epochs the watermark "
        "held until the input's end too), less the time no worker worked before its idle flush "
        f"(driftlog_input_end_wait_seconds: from its last input, {run.idle_flush_s:g} s and up to two state "
        f"intervals{'' if told else '; not told: the idle flush setting'})",
    )
    figures.add(
        f"{name}: records stored / expected",
        len(stored_records(run.db_path)) / w.records,
        "share",
        f"{w.records:,} expected (the in-process run)",
    )


@dataclass(frozen=True)
class Timed:
    """A live run's times (``time.perf_counter``) and its processes' CPU at its start, lag 0 and input's end."""

    producing: float  # seconds
    finished: list[float]  # each worker's last message processed (nan: it processed none)
    drained: float
    committed: float
    start: Cpu
    drained_cpu: Cpu
    ended: Cpu
    waited: float = math.nan  # how long no worker worked before the last idle flush (s; :func:`idle_wait`)

    @property
    def started(self) -> float:
        return self.start.at

    @property
    def done(self) -> list[float]:
        """The last message processed of each worker that processed any."""
        return [f for f in self.finished if math.isfinite(f)]

    @property
    def processed(self) -> float:
        return max(self.done, default=math.nan)


def timed(
    run: Settings,
    w: Workload,
    children: list[Child],
    sink: Child,
    ports: list[int],
    broker: int | None,
    prefilled: bool,
) -> Timed:
    """Produce the workload, then wait for every message processed, lag 0, the input's end and every audit row
    committed (see :func:`live`)."""
    from tests.integration.test_scale_out import produce_keyed

    topics, parts = {"telemetry": run.telemetry_topic, "decisions": run.decisions_topic}, run.topic_partitions
    unix_offset = time.time() - time.perf_counter()  # (the workers tell when they processed their last message)
    held = time.perf_counter()
    start = [Cpu.take(children, sink, broker)]
    if prefilled:  # (the workers idle while it is held back: time and CPU count from the commit)

        def at_commit() -> None:
            start[0] = Cpu.take(children, sink, broker)

        asyncio.run(produce_in_one_transaction(run.kafka_bootstrap_servers, topics, w.items, parts, at_commit))
    else:
        asyncio.run(produce_keyed(run.kafka_bootstrap_servers, topics, w.items))
    producing = time.perf_counter() - held
    drained_cpu = asyncio.run(_drained(run, children, sink, broker, 900))
    messages = sum(1 for k, _, _ in w.items if k == "telemetry")
    _until(lambda: sum(map(processed_messages, ports)) >= messages, children, 60)  # (lag 0: all of them by now)
    finished = [last_message(p) - unix_offset for p in ports]
    _until(lambda: all(input_ended(p) for p in ports), children, 300)
    ended = Cpu.take(children, sink, broker)
    # the rows in DuckDB, as the sink tells them (its group's lag reaches 0 only some idle rounds after: the
    # transaction markers after the last record are reported when it is idle)
    committed = _until(lambda: stored_rows(run.sink_http_port) >= w.records, [sink], 300, poll_s=0.02)
    asyncio.run(_at_lag_zero(run.kafka_bootstrap_servers, run.sink_group, run.audit_topic, [sink], 300))
    waited = idle_wait(ports, start[0].at + unix_offset)
    return Timed(producing, finished, drained_cpu.at, committed, start[0], drained_cpu, ended, waited)


async def _drained(run: Settings, children: list[Child], sink: Child, broker: int | None, timeout_s: float) -> Cpu:
    """Wait for the workers' group to reach telemetry lag 0, as the broker tells it: the CPU then (and when).
    Of the broker alone: a worker that has finished its share while the other works on answers ``/metrics``
    late (a long engine step, its idle flush), which would delay the measured end of the drain, and the other's
    idle share with it."""
    await _at_lag_zero(run.kafka_bootstrap_servers, run.worker_group, run.telemetry_topic, children, timeout_s)
    return Cpu.take(children, sink, broker)


async def _at_lag_zero(bootstrap: str, group: str, topic: str, children: list[Child], timeout_s: float) -> float:
    """When (``time.perf_counter``) ``group``'s lag on ``topic`` was first told 0; asked every ``LAG_POLL_S``
    over the same connections (a poll that opens its clients each time answers a round trip of several
    connections late, and that lateness would count as the run's)."""
    deadline = time.monotonic() + timeout_s
    async with GroupLag(bootstrap, group, [topic]) as lag:
        while sum((await lag()).values()):
            for child in children:
                child.check_alive()
            if time.monotonic() > deadline:
                raise TimeoutError(f"no lag 0 in {timeout_s:.0f}s: {[c.tail()[-500:] for c in children]}")
            await asyncio.sleep(LAG_POLL_S)
        return time.perf_counter()


@dataclass(frozen=True)
class Cpu:
    """The CPU seconds so far of a live run's processes, and when (``time.perf_counter``) they were read."""

    at: float
    workers: list[float]
    loops: list[tuple[float, float]]  # each worker's main thread (its event loop): seconds on a core, waiting for one
    sink: float
    broker: float | None  # (a broker this machine runs, whose process is known)
    bench: float

    @staticmethod
    def take(workers: list[Child], sink: Child, broker: int | None) -> Cpu:
        return Cpu(time.perf_counter(), [cpu_seconds(c.proc.pid) for c in workers],
                   [main_thread(c.proc.pid) for c in workers], cpu_seconds(sink.proc.pid),
                   None if broker is None else cpu_seconds(broker), time.process_time())  # fmt: skip


def cpu_accounting(name: str, start: Cpu, end: Cpu, samples: int, figures: Figures) -> None:
    """Where a drain's machine time went, from ``start`` to ``end`` (lag 0): the workers' CPU over the wall time
    (their threads' too), their event loops' time running, waiting for a core (another process, or one of the
    worker's own threads, had it) and idle (off a core without waiting for one: for the broker's answers, but
    also for the GIL a worker's other thread holds, or in a blocking call), each a share of
    the wall time averaged over the workers; their samples per CPU-second (flat as workers are added: no
    overhead that does not shrink); the cores the broker, the sink and this process (its polling) took."""
    wall, used = end.at - start.at, [b - a for a, b in zip(start.workers, end.workers, strict=True)]
    figures.add(f"{name}: workers busy, to lag 0", sum(used) / wall / len(used), "share",
                "their CPU time (every thread's) over the wall time, each")  # fmt: skip
    running = sum(b[0] - a[0] for a, b in zip(start.loops, end.loops, strict=True)) / wall / len(used)
    waiting = sum(b[1] - a[1] for a, b in zip(start.loops, end.loops, strict=True)) / wall / len(used)
    figures.add(f"{name}: event loops running, to lag 0", running, "share")
    figures.add(f"{name}: event loops waiting for a core, to lag 0", waiting, "share")
    figures.add(f"{name}: event loops idle, to lag 0", max(0.0, 1 - running - waiting), "share")
    figures.add(f"{name}: samples per worker CPU-second, to lag 0", samples / sum(used), "samples/s")
    others = {"broker": (start.broker, end.broker), "sink": (start.sink, end.sink), "bench": (start.bench, end.bench)}
    for who, (a, b) in others.items():
        if a is not None and b is not None:
            figures.add(f"{name}: {who} CPU, to lag 0", (b - a) / wall, "cores")


async def produce_in_one_transaction(
    bootstrap: str, topics: dict[str, str], items: list[Item], parts: int, at_commit: Callable[[], None] = lambda: None
) -> None:
    """``items`` keyed by job, all but each telemetry partition's last message in one producer transaction: a
    ``read_committed`` reader sees none of them until the commit, then all of them (a topic pre-filled under
    the nose of a formed consumer group). The last ones are sent just after the commit: the commit's marker
    takes an offset after a partition's messages, and a worker that never sees a message there would never
    count itself caught up (its idle flush, the end of its input, wait for that); they wait for the markers
    (which the broker writes after it has answered the commit). ``at_commit`` is called once the commit is
    done (the workers' timing starts)."""
    from uuid import uuid4

    from aiokafka import AIOKafkaProducer, TopicPartition
    from aiokafka.partitioner import murmur2

    telemetry = [((murmur2(key.encode()) & 0x7FFFFFFF) % parts, n) for n, (k, key, _) in enumerate(items)
                 if k == "telemetry"]  # fmt: skip
    by_partition = dict(telemetry)  # partition -> its last message
    last = sorted(by_partition.values())
    held_back = {TopicPartition(topics["telemetry"], p): sum(1 for q, _ in telemetry if q == p) for p in by_partition}
    held = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5, max_request_size=8 << 20,
                            transactional_id=f"bench-{uuid4()}", transaction_timeout_ms=300_000,
                            compression_type=TELEMETRY_COMPRESSION)  # fmt: skip
    tail = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", max_request_size=8 << 20,
                            compression_type=TELEMETRY_COMPRESSION)  # fmt: skip
    await held.start()
    await tail.start()
    try:
        async with held.transaction():
            for n, (kind, key, value) in enumerate(items):
                if n not in by_partition.values():
                    await held.send(topics[kind], value, key=key.encode())
        at_commit()
        markers = AIOKafkaConsumer(bootstrap_servers=bootstrap)  # (a partition's end: its messages + 1 marker)
        await markers.start()
        try:
            while any(end < held_back[tp] for tp, end in (await markers.end_offsets(list(held_back))).items()):
                await asyncio.sleep(0.01)
        finally:
            await markers.stop()
        for n in last:
            kind, key, value = items[n]
            await tail.send_and_wait(topics[kind], value, key=key.encode())
    finally:
        await held.stop()
        await tail.stop()


def processed_messages(port: int) -> int:
    """The telemetry messages a worker has processed so far (its ``driftlog_messages_total``)."""
    return sum(int(float(n)) for n in re.findall(r'^driftlog_messages_total\{topic="[^"]*telemetry[^"]*"\} (\S+)$',
                                                 worker_metrics(port), re.MULTILINE))  # fmt: skip


def last_message(port: int) -> float:
    """When a worker last processed a message of its own input (Unix time: its
    ``driftlog_last_message_timestamp_seconds``); nan if it has processed none (the gauge is 0 until then)."""
    value = _gauge(worker_metrics(port), "driftlog_last_message_timestamp_seconds")
    return value if value > 0 else math.nan


def idle_wait(ports: list[int], since: float) -> float:
    """How long no worker did any work, from ``since`` (Unix time: the timing's start) to the end of the last
    round that ended a worker's input. Each worker tells the start of that round
    (``driftlog_input_end_timestamp_seconds``), how long it took (``..._round_seconds``: its idle flushes and
    commits), and, since its last input message, how long it waited (``..._wait_seconds``) and worked
    (``..._work_seconds``). One worker: its wait. Several: their work is taken as running from ``since`` to
    each one's last input plus its work after it, and through its input-end round, and the time none of these
    spans covers is left out, less every worker's work after its last input (which may have fallen anywhere in
    its wait: so a worker's flush inside another's wait is work, and one idle while another drains is not left
    out). A worker that ended no input since ``since`` does not count; nan if none did."""
    told = []
    for port in ports:
        text = worker_metrics(port)
        at, wait, work, took = (_gauge(text, f"driftlog_input_end_{n}_seconds") for n in ("timestamp", "wait",
                                                                                          "work", "round"))  # fmt: skip
        if at > since:  # (a round before the timing: a flush of the empty topics while the group formed)
            told.append((at, wait, work, took))
    spans = [span for at, wait, _, took in told for span in ((since, at - wait), (at, at + took)) if span[1] > span[0]]
    if len(told) <= 1:
        return told[0][1] if told else math.nan
    return max(0.0, uncovered(spans) - sum(work for _, _, work, _ in told))


def _gauge(text: str, name: str) -> float:
    found = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def uncovered(spans: list[tuple[float, float]]) -> float:
    """The length of the gaps between ``(start, end)`` spans, from the first start to the last end: 0 if they
    leave none, nan if there are none."""
    if not spans:
        return math.nan
    gaps, reached = 0.0, min(start for start, _ in spans)
    for start, end in sorted(spans):
        gaps += max(0.0, start - reached)
        reached = max(reached, end)
    return gaps


def worker_metrics(port: int) -> str:
    """A worker's (or the sink's) ``/metrics`` (Prometheus text)."""
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return response.read().decode()  # type: ignore[no-any-return]


def _until(done: Callable[[], bool], children: list[Child], timeout_s: float, poll_s: float = 0.1) -> float:
    deadline = time.monotonic() + timeout_s
    while not done():
        for child in children:
            child.check_alive()
        if time.monotonic() > deadline:
            raise TimeoutError(f"not done in {timeout_s:.0f}s: {[c.tail()[-500:] for c in children]}")
        time.sleep(poll_s)
    return time.perf_counter()


def stored_rows(port: int) -> int:
    """The audit records the sink has committed to DuckDB (its ``driftlog_sink_rows_total``)."""
    return int(_gauge(worker_metrics(port), "driftlog_sink_rows_total"))


def latency(cfg: Settings, job: tuple[str, int, int], profile: str, figures: Figures, logs: Path) -> None:
    """One job produced **in real time** (each message sent once the wall clock has reached its newest event
    time, as an exporter sends what has happened) to fresh topics while a worker and the sink run with the
    settings of ``profile``; each finding's latency: from sending the message it names as its source to the
    finding being visible to a query through the sink's SQL endpoint (polled every 50 ms)."""
    from audit.query import Endpoint, run_query
    from streams.contract.envelope import decode_telemetry
    from streams.pipeline import build_processor

    tag = f"lat-{time.monotonic_ns()}"
    names = ("telemetry_topic", "decisions_topic", "worker_group", "sink_group", "audit_topic", "state_topic",
             "checkpoint_topic", "dead_letter_topic", "shared_topic")  # fmt: skip
    update: dict[str, Any] = {n: f"{getattr(cfg, n)}-{tag}" for n in names}
    run = cfg.model_copy(update={**update, **PROFILES[profile], "db_path": logs / f"audit-{tag}.duckdb"})
    items = [(k, key, v) for k, key, v in SCENARIOS[job[0]](1, job[1], job[2]).run()]
    expected = sum(1 for r in run_stream([(k, v) for k, _, v in items], build_processor(run)).audit
                   if r.type == "finding")  # fmt: skip
    samples = sum(decode_telemetry(v).total for k, _, v in items if k == "telemetry")
    ends = list(itertools.accumulate((message_end(k, v) for k, _, v in items), max))
    offered = samples / max(ends[-1] - ends[0], 1e-9)
    asyncio.run(ensure_topics(run.kafka_bootstrap_servers, run.all_topics, run.topic_partitions))
    children = [Child(["sink"], to_env(run), logs / f"sink-{tag}.log"),
                Child(["worker"], to_env(run), logs / f"worker-{tag}.log")]  # fmt: skip
    sent: dict[tuple[str, int, int], float] = {}
    seen: dict[str, tuple[float, float, float, dict[str, Any]]] = {}  # visible, produced, stored, source
    endpoint = Endpoint(f"http://127.0.0.1:{run.sink_http_port}/sql")
    sql = (
        "SELECT record_id, decode(value), kafka_ts_ms / 1e3, epoch_ms(written_at) / 1e3 FROM audit_log "
        "WHERE record_type = 'finding'"
    )

    def poll() -> None:
        for rid, value, produced, stored in run_query(run.db_path, sql, endpoint=endpoint).rows:
            if rid not in seen:
                source = orjson.loads(value)["source"]
                seen[rid] = (time.time(), float(produced), float(stored), source)

    try:
        children[0].wait_healthy(run.sink_http_port)
        children[1].wait_healthy(run.worker_http_port, timeout=180)
        done = threading.Event()
        poller = threading.Thread(target=polling, args=(poll, done), daemon=True)
        poller.start()  # while the job runs: a finding is seen when it becomes visible, not after the input
        try:
            asyncio.run(in_real_time(run, items, ends, sent))
            deadline = time.monotonic() + 120 + run.allowed_lateness_s + run.idle_flush_s
            while len(seen) < expected and time.monotonic() < deadline and poller.is_alive():
                time.sleep(0.05)
        finally:
            done.set()
            poller.join()
    finally:
        for child in children:
            child.stop()
        drop_topics(run.kafka_bootstrap_servers, set(run.all_topics).__contains__)
    name = f"finding latency, {profile}, {job[1]} ranks in real time"
    figures.add(f"{name}: offered", offered, "samples/s", f"{job[0]}, {samples:,} samples")
    latency_figures(name, run, sent, seen, expected, figures)


def latency_figures(
    name: str,
    run: Settings,
    sent: dict[tuple[str, int, int], float],
    seen: dict[str, tuple[float, float, float, dict[str, Any]]],
    expected: int,
    figures: Figures,
) -> None:
    """p50/p99 of the findings found before the input's end, the median of each stage, and apart those the
    idle flush brought out."""
    # found at the input's end: produced once the worker had been idle for its idle flush after the last message
    ended = sent[next(reversed(sent))] + run.idle_flush_s
    stages = [(visible - sent[key], produced - sent[key], stored - produced, visible - stored, produced >= ended)
              for visible, produced, stored, src in seen.values()
              if (key := (src["topic"], src["partition"], src["offset"])) in sent]  # fmt: skip
    streamed = [s for s in stages if not s[4]]
    if streamed:
        delays = sorted(s[0] for s in streamed)
        settings = ", ".join(f"{k}={getattr(run, k):g}" for k in PROFILE_KEYS)
        figures.add(f"{name}: p50", delays[len(delays) // 2], "s",
                    f"{len(delays)} of {expected} findings, those found before the input's end")  # fmt: skip
        figures.add(f"{name}: p99", delays[min(len(delays) - 1, int(len(delays) * 0.99))], "s", settings)
        for i, part in enumerate(("source sent -> worker produced", "-> sink stored", "-> visible to SQL"), 1):
            figures.add(f"{name}: {part}, median", statistics.median(s[i] for s in streamed), "s")
    if len(streamed) < len(stages):
        at_end = [s[0] for s in stages if s[4]]
        figures.add(f"{name}: found at the input's end, median", statistics.median(at_end), "s",
                    f"{len(at_end)} findings, after the idle flush of {run.idle_flush_s:g} s")  # fmt: skip


def polling(poll: Callable[[], None], done: threading.Event) -> None:
    """``poll`` every 50 ms until ``done``."""
    while not done.wait(0.05):
        poll()


def message_end(kind: str, value: bytes) -> float:
    """The newest event time in a message: when its exporter can send it (a span's end, a sample's time)."""
    doc = orjson.loads(value)
    if kind == "decisions":
        return float(doc["time"])
    ends = [float(s["start"]) + float(s.get("duration", 0.0)) if "start" in s else float(s["time"])
            for s in doc.get("samples", [])]  # fmt: skip
    for batch in doc.get("columns", []):
        data = batch["data"]
        starts = data.get("start", data.get("time"))
        durations = data.get("duration", 0.0)
        n = max((len(v) for v in data.values() if isinstance(v, list)), default=1)
        starts = starts if isinstance(starts, list) else [starts] * n
        durations = durations if isinstance(durations, list) else [durations] * n
        ends.extend(float(t) + float(d) for t, d in zip(starts, durations, strict=True))
    return max(ends, default=-float("inf"))


async def in_real_time(
    run: Settings, items: list[Item], ends: list[float], sent: dict[tuple[str, int, int], float]
) -> None:
    """Produce ``items`` keyed by job, each once the wall clock has come as far past the first as its event
    time (``ends``: the newest event time so far); ``sent``: when each (topic, partition, offset) was sent."""
    from aiokafka import AIOKafkaProducer

    topics = {"telemetry": run.telemetry_topic, "decisions": run.decisions_topic}
    producer = AIOKafkaProducer(bootstrap_servers=run.kafka_bootstrap_servers, acks="all", linger_ms=1,
                                max_request_size=8 << 20, compression_type=TELEMETRY_COMPRESSION)  # fmt: skip
    await producer.start()
    try:
        started = time.perf_counter()
        for (kind, key, value), end in zip(items, ends, strict=True):
            ahead = started + (end - ends[0]) - time.perf_counter()
            if ahead > 0:
                await asyncio.sleep(ahead)
            at = time.time()  # the wall clock: the audit rows' Kafka and sink times are on it too
            meta = await (await producer.send(topics[kind], value, key=key.encode()))
            sent[(meta.topic, meta.partition, meta.offset)] = at
    finally:
        await producer.stop()


def replay_rate(cfg: Settings, w: Workload, figures: Figures) -> None:
    from streams.pipeline import build_processor
    from streams.replay import Range, replay

    topics = {"telemetry": cfg.telemetry_topic, "decisions": cfg.decisions_topic}
    started, cpu = time.perf_counter(), time.process_time()
    asyncio.run(replay(cfg.kafka_bootstrap_servers, topics, Range(0, None), build_processor(cfg)))
    figures.add("replay (whole range)", w.samples / (time.perf_counter() - started), "samples/s")
    figures.add("replay CPU", (time.process_time() - cpu) / w.samples * 1e6, "CPU µs/sample")


def analyze_rate(w: Workload, figures: Figures, work: Path) -> None:
    from streams.analyze import analyze_files

    path = work / "workload.jsonl"
    if not path.exists():
        path.write_bytes(b"".join(v + b"\n" for _, _, v in w.items))
    started, cpu = time.perf_counter(), time.process_time()
    analyze_files([path])
    figures.add("analyze (JSONL of envelopes)", w.samples / (time.perf_counter() - started), "samples/s")
    figures.add("analyze CPU", (time.process_time() - cpu) / w.samples * 1e6, "CPU µs/sample")


def sink_rate(cfg: Settings, records: int, figures: Figures) -> None:
    from bench.bench_sink_kafka import consume_only, sink_drain

    rate, cpu = asyncio.run(consume_only(cfg, records))
    figures.add("aiokafka alone, audit topic", rate, "records/s")
    rate, cpu = asyncio.run(sink_drain(cfg, records))
    figures.add("sink, Kafka -> DuckDB", rate, "rows/s")
    figures.add("sink CPU", cpu, "CPU µs/row")


def rss_point(ranks: int, steps: int, lateness: float, figures: Figures) -> None:
    """The engine in a child process (its peak RSS is its own): ``--rss-child``."""
    cmd = [sys.executable, __file__, "--rss-child", str(ranks), str(steps), str(lateness)]
    out = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.splitlines()[-1])
    name = f"{ranks:,} ranks, lateness {lateness:g} s"
    phases = ", ".join(f"{k} {v:,.0f}" for k, v in out["phases_mb"].items())
    figures.add(f"RSS, {name}", out["rss_mb"], "MB", f"{out['samples']:,} samples; peak MB {phases}")
    figures.add(f"engine, {name}", out["rate"], "samples/s")
    figures.add(f"engine CPU, {name}", out["cpu_us"], "CPU µs/sample")


def rss_child(ranks: int, steps: int, lateness: float) -> None:
    from audit.records import SourcePosition
    from streams.contract.admission import Admission
    from streams.engine.engine import Engine
    from streams.pipeline import Processor

    scenario = SCENARIOS["training-fabric"](1, ranks, steps)
    processor = Processor(Engine(), Admission(allowed_lateness=lateness))
    processor.declare([SourcePosition("telemetry", 0, 0)])
    samples, started, cpu = 0, time.perf_counter(), 0.0
    for offset, (kind, _, value) in enumerate(scenario.run()):  # the sim generates as the engine consumes
        c = time.process_time()
        source = SourcePosition(kind, 0, offset)
        out = processor.telemetry(value, source) if kind == "telemetry" else processor.decision(value, source)
        samples += sum(n for k, n in out.samples_by_kind.items() if k != "decision")
        cpu += time.process_time() - c
    phases = {"reading": peak_rss_mb()}  # peak RSS per phase (the peak is reset between them)
    c = time.process_time()
    reset_peak_rss()
    processor.drain()
    phases["epochs released"] = peak_rss_mb()
    reset_peak_rss()
    processor.flush(SourcePosition("telemetry", 0, 0))  # (nothing left to release: the jobs' ends)
    phases["jobs closed"] = peak_rss_mb()
    cpu += time.process_time() - c
    print(json.dumps({"rss_mb": max(phases.values()), "samples": samples, "rate": samples / cpu,
                      "cpu_us": cpu / samples * 1e6, "wall": time.perf_counter() - started,
                      "phases_mb": phases}))  # fmt: skip


SECTIONS = ("inprocess", "ceiling", "live", "workers", "replay", "analyze", "sink", "rss", "latency")
# 2 workers against 1: jobs alike, one per partition (the FULL_JOBS workload is 99.5% one job, so one partition)
# (600 steps: 4.6 M samples, ~5 s for one worker; at 150 two workers drain their halves in well under a second,
# and what a run costs whatever its length weighs more)
BALANCED = ("training-fabric", 32, 600)
SMOKE_BALANCED = ("training-fabric", 16, 20)
BALANCED_LABEL = "workers, balanced jobs"
# finding latency: jobs whose exporters send about 10 k and 100 k samples/s in real time (training-fabric: ~135
# samples/s per rank), each under the default settings and under a low-latency profile
LATENCY_JOBS = (("training-fabric", 64, 100), ("training-fabric", 768, 150))  # both longer than a 30 s lateness
SMOKE_LATENCY_JOBS = (("training-fabric", 16, 30),)  # low latency only (the defaults wait out 30 s)
PROFILE_KEYS = ("allowed_lateness_s", "epoch_s", "state_interval_s", "sink_batch_wait_ms", "sql_snapshot_interval_s")
PROFILES: dict[str, dict[str, Any]] = {
    "defaults": {},
    # the lateness still covers a step's spread inside one message (an exporter sends a step's spans at its end)
    "low latency": {
        "allowed_lateness_s": 1.0,
        "epoch_s": 0.25,
        "state_interval_s": 0.25,
        "sink_batch_wait_ms": 20,
        "sql_snapshot_interval_s": 0.25,
    },
    # as short as the simulator's exporters allow (a step's spans in one message: with 0.5 s one was late)
    "lower latency": {
        "allowed_lateness_s": 0.75,
        "epoch_s": 0.1,
        "state_interval_s": 0.1,
        "sink_batch_wait_ms": 20,
        "sql_snapshot_interval_s": 0.1,
    },
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, default=Path("bench-results.json"))
    parser.add_argument("--smoke", action="store_true", help="the one-minute form: small workload, one run")
    parser.add_argument("--only", default=",".join(SECTIONS), help=f"comma-separated, of {','.join(SECTIONS)}")
    parser.add_argument("--workers", default="1,2", help="live runs: worker counts, e.g. 1,2")
    parser.add_argument("--balanced-steps", type=int, default=BALANCED[2],
                        help="workers section: steps of each of the four jobs (longer: less of each run is the "
                             "start and end of its drain and the idle flush)")  # fmt: skip
    parser.add_argument("--scale", type=int, default=SCALE,
                        help=f"the mixed workload's steps times this (default {SCALE}; 1 with --smoke): a live run's "
                             "start and end (the first marks of tasks without input, the last epochs, the idle "
                             "flush) weigh less against its throughput the longer it is")  # fmt: skip
    parser.add_argument("--rss-child", nargs=3, metavar=("RANKS", "STEPS", "LATENESS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rss_child:
        rss_child(int(args.rss_child[0]), int(args.rss_child[1]), float(args.rss_child[2]))
        return 0
    only = set(args.only.split(","))
    repeats = 1 if args.smoke else args.repeats
    jobs = SMOKE_JOBS if args.smoke else tuple((name, ranks, steps * args.scale) for name, ranks, steps in FULL_JOBS)
    began = time.monotonic()
    w = Workload.of(jobs) if only - {"rss", "latency", "workers"} else Workload([], 0, 0, 0)
    sized = SMOKE_BALANCED if args.smoke else (*BALANCED[:2], args.balanced_steps)
    balanced = Workload.balanced(*sized) if "workers" in only else None
    print(f"workload: {', '.join(f'{n} {r} ranks x {s} steps' for n, r, s in jobs)}: {w.samples:,} samples in "
          f"{len(w.items):,} messages, {w.records:,} records; {repeats} run(s) each", flush=True)  # fmt: skip
    if balanced is not None:
        print(f"{BALANCED_LABEL}: 4 x {sized[0]} {sized[1]} ranks x {sized[2]} steps: {balanced.samples:,} samples",
              flush=True)  # fmt: skip
    figures = Figures()
    work = Path(tempfile.mkdtemp(prefix="driftlog-bench-suite-"))
    with bench_settings(topic_partitions=4, checkpoint_interval_s=10.0) as cfg:
        asyncio.run(ensure_topics(cfg.kafka_bootstrap_servers, cfg.all_topics, cfg.topic_partitions))
        if only & {"ceiling", "replay"}:
            from tests.integration.test_scale_out import produce_keyed

            topics = {"telemetry": cfg.telemetry_topic, "decisions": cfg.decisions_topic}
            asyncio.run(produce_keyed(cfg.kafka_bootstrap_servers, topics, w.items))
        for r in range(repeats):  # interleaved: every figure once per repeat
            print(f"repeat {r + 1}/{repeats} ...", flush=True)
            one_repeat(cfg, w, figures, only, [int(n) for n in args.workers.split(",")], work, args.smoke)
            for n in (1, 2) if balanced is not None else ():  # pinned, a core each (if the machine has two)
                live(cfg, balanced, figures, n, work, label=BALANCED_LABEL, pin=True, prefilled=True)
        if "sink" in only:
            records = 50_000 if args.smoke else 500_000
            _fill_audit(cfg, records)
            for _ in range(repeats):
                sink_rate(cfg, records, figures)
    if "rss" in only:
        for _ in range(repeats):
            for ranks, steps, lateness in SMOKE_RSS if args.smoke else FULL_RSS:
                rss_point(ranks, steps, lateness, figures)
    ratios(figures)
    print(figures.table())
    machine = {"cpus": _cpus(), "python": platform.python_version(), "load": _load(), "host": platform.node()}
    doc = {"machine": machine, "smoke": args.smoke, "repeats": repeats, "jobs": jobs, "samples": w.samples,
           "seconds": time.monotonic() - began, "figures": figures.as_json()}  # fmt: skip
    args.json.write_text(json.dumps(doc, indent=2))
    print(f"machine: {machine}; {time.monotonic() - began:.0f}s; JSON in {args.json}")
    return 0


def ratios(figures: Figures) -> None:
    """The figures compared: live against in-process, 2 workers against 1."""
    for name in [n for n in figures.runs if re.fullmatch(rf"live, \d+ workers?: ({'|'.join(RATES)})", n)]:
        figures.ratio(name, "in-process engine")
    figures.ratio("live, 2 workers: to lag 0", "live, 1 worker: to lag 0")
    figures.ratio("live, 2 workers: to every message processed", "live, 1 worker: to every message processed")
    figures.ratio(f"live, 2 workers: {HONEST}", f"live, 1 worker: {HONEST}")
    for name in [n for n in figures.runs if n.startswith("live") and n.endswith(": CPU")]:
        figures.ratio(name, "in-process engine CPU")
    figures.ratio("live, 2 workers: CPU", "live, 1 worker: CPU")
    for what in ("to every message processed", "to lag 0", HONEST, "CPU", "samples per worker CPU-second, to lag 0"):
        figures.ratio(f"{BALANCED_LABEL}, 2 workers: {what}", f"{BALANCED_LABEL}, 1 worker: {what}")
    figures.ratio("in-process engine", "raw ceiling (aiokafka + orjson)")


def one_repeat(
    cfg: Settings, w: Workload, figures: Figures, only: set[str], workers: list[int], work: Path, smoke: bool
) -> None:
    if "inprocess" in only:
        in_process(w, figures)
    if "ceiling" in only:
        ceiling(cfg, w, figures)
    if "live" in only:
        for n in workers:
            live(cfg, w, figures, n, work, prefilled=True)
    if "replay" in only:
        replay_rate(cfg, w, figures)
    if "analyze" in only:
        analyze_rate(w, figures, work)
    if "latency" in only:
        for job in SMOKE_LATENCY_JOBS if smoke else LATENCY_JOBS:
            for profile in ["low latency"] if smoke else PROFILES:
                latency(cfg, job, profile, figures, work)


def _fill_audit(cfg: Settings, n: int) -> None:
    from streams.demo import produce
    from tests.integration.test_sink_exactly_once import audit_records

    asyncio.run(produce(cfg.kafka_bootstrap_servers, cfg.audit_topic, audit_records(n)))


def peak_rss_mb() -> float:
    """This process's peak RSS (VmHWM: reset by exec, unlike ru_maxrss, which a child inherits from the
    process it was forked from)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def reset_peak_rss() -> None:
    """Start this process's peak RSS (VmHWM) afresh from its current RSS (Linux: ``/proc/self/clear_refs``)."""
    Path("/proc/self/clear_refs").write_text("5")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far (Linux /proc)."""
    import os

    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main_thread(pid: int) -> tuple[float, float]:
    """Seconds process ``pid``'s main thread has run on a core and waited for one (Linux schedstat)."""
    ran, waited, _ = Path(f"/proc/{pid}/schedstat").read_text().split()
    return int(ran) / 1e9, int(waited) / 1e9


def _cpus() -> int:
    import os

    return len(os.sched_getaffinity(0))


def _load() -> str:
    return Path("/proc/loadavg").read_text().split(" ", 3)[:3].__str__()


if __name__ == "__main__":
    sys.exit(main())
