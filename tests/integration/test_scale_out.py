"""Scale-out on Kafka's own mechanism: several jobs on a 4-partition telemetry topic, a second worker joining
mid-stream (its partitions' state moves to it): the audit trail equals one uninterrupted in-process run over
the same input, each record once, and every decision reached the jobs it touches wherever they ran."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from audit.query import run_query
from streams.config import Settings, to_env
from streams.demo import input_ended, wait_drained
from streams.kafka.admin import ensure_topics
from streams.kafka.limits import TELEMETRY_COMPRESSION
from streams.sim.scenarios import SCENARIOS
from streams.supervise import Child, free_port
from streams.testing import run_stream, stored_records
from streams.variants import message_time, without_job
from tests.integration.helpers import http_json
from tests.unit.test_same_records import Records, records

pytestmark = pytest.mark.integration

JOBS = (
    ("training-fabric", 16, 80),
    ("inference-sla", 16, 80),
    ("control-storm", 32, 80),
    ("serving-saturation", 16, 100),
)


async def produce_keyed(bootstrap: str, topics: dict[str, str], messages: list[tuple[str, str, bytes]]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5, max_request_size=8 << 20,
                                compression_type=TELEMETRY_COMPRESSION)  # fmt: skip
    await producer.start()
    try:
        for kind, key, value in messages:
            await producer.send(topics[kind], value, key=key.encode())
        await producer.flush()
    finally:
        await producer.stop()


def wait_for_split(topic: str, ports: list[int], timeout: float = 90.0) -> list[list[int]]:
    """The telemetry partitions each worker holds, once every worker holds some (the rebalance is done)."""
    deadline = time.monotonic() + timeout
    while True:
        shares = []
        for port in ports:
            _, health = http_json(port, "/health")
            shares.append(sorted(int(a.rpartition("/")[2]) for a in health.get("assigned", []) if a.startswith(topic)))
        if all(shares) and sum(map(len, shares)) == 4:
            return shares
        assert time.monotonic() < deadline, shares
        time.sleep(0.5)


def keyed_by_time(messages: list[tuple[str, str, bytes]]) -> list[tuple[str, str, bytes]]:
    """Messages of jobs that run at the same time: interleaved in event time (ties in input order)."""
    timed = sorted(((message_time((k, v)), n, k, key, v) for n, (k, key, v) in enumerate(messages)),
                   key=lambda m: m[:2])  # fmt: skip
    return [(k, key, v) for _, _, k, key, v in timed]


def two_workers(cfg: Settings, tmp_path: Path, keyed: list[tuple[str, str, bytes]]) -> Records:
    """``keyed`` produced to a 4-partition telemetry topic, run by two workers (the second joining while the
    first works): the records the sink stored, after checking that each is stored once."""
    asyncio.run(ensure_topics(cfg.kafka_bootstrap_servers, cfg.all_topics, cfg.topic_partitions))
    topics = {"telemetry": cfg.telemetry_topic, "decisions": cfg.decisions_topic}
    asyncio.run(produce_keyed(cfg.kafka_bootstrap_servers, topics, keyed))
    env = to_env(cfg)
    sink = Child(["sink"], env, tmp_path / "sink.log")
    first = Child(["worker"], env, tmp_path / "worker1.log")
    second_port = free_port()
    second = Child(["worker"], {**env, "DRIFTLOG_WORKER_HTTP_PORT": str(second_port)}, tmp_path / "worker2.log")
    workers = [(first, cfg.worker_http_port), (second, second_port)]
    try:
        sink.wait_healthy(cfg.sink_http_port)
        first.wait_healthy(cfg.worker_http_port, timeout=120)
        second.wait_healthy(second_port, timeout=120)
        shares = wait_for_split(cfg.telemetry_topic, [port for _, port in workers])
        deadline = time.monotonic() + 300
        while not all(input_ended(port) for _, port in workers):
            for child, _ in workers:
                child.check_alive()
            assert time.monotonic() < deadline, [c.tail() for c, _ in workers]
            time.sleep(0.5)
        asyncio.run(wait_drained(cfg, [sink], 120, print, worker=False))
    finally:
        codes = [c.stop() for c, _ in workers] + [sink.stop()]
    assert codes == [0, 0, 0], [c.tail() for c, _ in workers]
    assert sorted(p for share in shares for p in share) == [0, 1, 2, 3] and all(shares), shares
    ((total, distinct),) = run_query(cfg.db_path, "SELECT count(*), count(DISTINCT record_id) FROM audit_log").rows
    assert total == distinct, "a record was written twice"
    return stored_records(cfg.db_path)


def test_two_workers_write_the_records_of_one(fresh_settings: Settings, tmp_path: Path) -> None:
    cfg = fresh_settings.model_copy(update={"topic_partitions": 4})
    scenarios = [SCENARIOS[name](seed, ranks, steps) for seed, (name, ranks, steps) in enumerate(JOBS, 1)]
    keyed = keyed_by_time([m for s in scenarios for m in s.run()])
    expected = records(run_stream([(k, v) for k, _, v in keyed]))
    stored = two_workers(cfg, tmp_path, keyed)
    assert stored.keys() == expected.keys()
    assert stored == expected


def test_samples_of_no_job_reach_every_worker(fresh_settings: Settings, tmp_path: Path) -> None:
    """Power and fabric topology sent by exporters that know no job, produced to every partition: the jobs
    and the control plane see them wherever they run (the energy feedback loop needs the power samples)."""
    cfg = fresh_settings.model_copy(update={"topic_partitions": 4})
    messages = []
    for name, seed, ranks, steps in (("control-storm", 1, 32, 80), ("training-fabric", 2, 16, 80),
                                     ("inference-sla", 3, 16, 80)):  # fmt: skip
        for kind, key, value in SCENARIOS[name](seed, ranks, steps).run():
            messages.extend((kind, key, v) for _, v in without_job([(kind, value)]))
    keyed = [(k, f"infra-{n}" if b'"source":"infra:' in v else key, v) for n, (k, key, v) in
             enumerate(keyed_by_time(messages))]  # fmt: skip
    expected = records(run_stream([(k, v) for k, _, v in keyed]))
    assert any(kind == "finding" and b'"energy_feedback_loop"' in body for (kind, _), body in expected.items())
    stored = two_workers(cfg, tmp_path, keyed)
    assert stored.keys() == expected.keys()
    assert stored == expected
