"""What production does to the sink: the broker goes away and comes back (a restart of the local broker keeps
its data and port), SIGTERM while it is away, the audit topic recreated under a DuckDB file.

The outage tests stop and start a broker of their own (never the shared one); the sink runs as a child
process, as in production, so that exit codes, exit times and what it prints are the real ones.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from audit.checkpoint import public_key_path
from audit.query import run_query
from audit.verify import verify
from streams.config import Settings, load, to_env
from streams.demo import namespaced, produce
from streams.kafka.admin import delete_topics, ensure_topics
from streams.kafka.launcher import LocalKafka
from streams.supervise import Child
from tests.integration.test_sink_exactly_once import audit_records

pytestmark = pytest.mark.integration
OUTAGE_S = 12.0  # longer than the health limit below, short enough for CI


def _settings(bootstrap: str, tmp_path: Path, name: str) -> Settings:
    base = load(kafka_bootstrap_servers=bootstrap, home=tmp_path / "home", topic_partitions=2)
    return namespaced(base, f"{name}-{os.urandom(4).hex()}", tmp_path / "audit.duckdb").model_copy(
        update={"sink_batch_max": 300, "checkpoint_interval_s": 0.5, "health_broker_timeout_s": 3.0}
    )


def health(port: int) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def wait_for(what: str, check: Callable[[], bool], child: Child | None, timeout: float = 90.0) -> float:
    started = time.monotonic()
    while not check():
        if child is not None:
            child.check_alive()
        if time.monotonic() - started > timeout:
            raise AssertionError(f"{what}: not within {timeout:.0f}s\n{'' if child is None else child.tail()}")
        time.sleep(0.2)
    return time.monotonic() - started


def sigterm(child: Child) -> tuple[int, float]:
    started = time.monotonic()
    code = child.stop(grace=30)
    return code, time.monotonic() - started


def test_the_sink_rides_out_a_broker_outage_and_loses_nothing(own_broker: LocalKafka, tmp_path: Path) -> None:
    state = own_broker.start()
    cfg = _settings(state.bootstrap, tmp_path, "outage")
    first, second = audit_records(6_000), audit_records(9_000)[6_000:]
    asyncio.run(ensure_topics(cfg.kafka_bootstrap_servers, cfg.all_topics, cfg.topic_partitions))
    asyncio.run(produce(cfg.kafka_bootstrap_servers, cfg.audit_topic, first))
    sink = Child(["sink"], to_env(cfg), tmp_path / "sink.log")
    try:
        sink.wait_healthy(cfg.sink_http_port)
        wait_for("some records stored", lambda: health(cfg.sink_http_port)[1]["rows_written"] > 0, sink)
        assert own_broker.stop()  # mid-stream: records wait in the topic, the sink is writing them
        down = time.monotonic()
        wait_for("503 while the broker is away", lambda: health(cfg.sink_http_port)[0] == 503, sink, timeout=20)
        body = health(cfg.sink_http_port)[1]
        assert any("broker unreachable" in r for r in body["reasons"]), body
        time.sleep(max(0.0, OUTAGE_S - (time.monotonic() - down)))
        sink.check_alive()  # it rode the outage out
        restarted = own_broker.start()
        assert restarted.port == state.port  # a restart, not a new broker: same address, same data
        asyncio.run(produce(cfg.kafka_bootstrap_servers, cfg.audit_topic, second))
        n = len(first) + len(second)
        wait_for("every record stored", lambda: health(cfg.sink_http_port)[1]["rows_written"] >= n, sink, 120)
        wait_for("200 again", lambda: health(cfg.sink_http_port)[0] == 200, sink, 30)
        code, took = sigterm(sink)
    finally:
        sink.stop(grace=0, sig=signal.SIGKILL)
    log = sink.log_path.read_text()
    assert code == 0 and took < 10, (code, took, log[-2000:])
    assert "Traceback" not in log
    assert len([line for line in log.splitlines() if "broker" in line]) < 50, "the outage flooded the log"
    rows = run_query(cfg.db_path, 'SELECT count(*), count(DISTINCT ("partition", "offset")) FROM audit_log').rows
    assert rows == [(n, n)]
    report = verify(cfg.db_path, cfg.checkpoint_path, public_key_path(cfg.signing_key_path))
    assert report.problems == []


def test_sigterm_during_an_outage_exits_within_10s_without_a_traceback(own_broker: LocalKafka, tmp_path: Path) -> None:
    state = own_broker.start()
    cfg = _settings(state.bootstrap, tmp_path, "term")
    asyncio.run(ensure_topics(cfg.kafka_bootstrap_servers, cfg.all_topics, cfg.topic_partitions))
    asyncio.run(produce(cfg.kafka_bootstrap_servers, cfg.audit_topic, audit_records(500)))
    sink = Child(["sink"], to_env(cfg), tmp_path / "sink.log")
    try:
        sink.wait_healthy(cfg.sink_http_port)
        own_broker.stop()
        try:
            wait_for("503 while the broker is away", lambda: health(cfg.sink_http_port)[0] == 503, sink, timeout=20)
        except AssertionError as exc:
            raise AssertionError(f"{health(cfg.sink_http_port)}") from exc
        code, took = sigterm(sink)
    finally:
        sink.stop(grace=0, sig=signal.SIGKILL)
        own_broker.start()
    log = sink.log_path.read_text()
    assert code == 0 and took < 10, (code, took, log[-2000:])
    assert "Traceback" not in log


@pytest.mark.parametrize(("again", "why"), [
    (3, "ends before the offsets this DuckDB file already stored"),  # fewer records than stored
    (400, "no longer holds the records this DuckDB file stored"),  # more: told by content
])  # fmt: skip
def test_a_recreated_audit_topic_is_refused_not_skipped(
    kafka_bootstrap: str, tmp_path: Path, again: int, why: str
) -> None:
    cfg = _settings(kafka_bootstrap, tmp_path, "recreated")
    asyncio.run(ensure_topics(cfg.kafka_bootstrap_servers, cfg.all_topics, cfg.topic_partitions))
    asyncio.run(produce(cfg.kafka_bootstrap_servers, cfg.audit_topic, audit_records(200)))
    sink = Child(["sink"], to_env(cfg), tmp_path / "sink1.log")
    sink.wait_healthy(cfg.sink_http_port)
    wait_for("all stored", lambda: health(cfg.sink_http_port)[1]["rows_written"] >= 200, sink)
    assert sink.stop() == 0
    asyncio.run(delete_topics(cfg.kafka_bootstrap_servers, [cfg.audit_topic]))
    time.sleep(1.0)
    asyncio.run(ensure_topics(cfg.kafka_bootstrap_servers, cfg.all_topics, cfg.topic_partitions))
    asyncio.run(produce(cfg.kafka_bootstrap_servers, cfg.audit_topic, audit_records(again)))
    sink = Child(["sink"], to_env(cfg), tmp_path / "sink2.log")
    try:
        wait_for("503 with the reason", lambda: why in str(_body(cfg.sink_http_port)), sink, timeout=60)
        status, body = health(cfg.sink_http_port)
        assert status == 503 and why in body["reasons"][0], body
        code, _ = sigterm(sink)
    finally:
        sink.stop(grace=0, sig=signal.SIGKILL)
    out = sink.log_path.read_text()
    errors = [line for line in out.splitlines() if line.startswith("driftlog: error:")]
    assert code == 1 and len(errors) == 1 and "README" in errors[0], out[-2000:]
    assert "Traceback" not in out
    assert run_query(cfg.db_path, "SELECT count(*) FROM audit_log").rows == [(200,)]  # nothing added or skipped


def _body(port: int) -> dict[str, Any]:
    try:
        return health(port)[1]
    except (urllib.error.URLError, OSError):
        return {}


def test_a_write_that_fails_is_on_health_then_stops_the_sink(fresh_settings: Settings) -> None:
    from audit.sink import AuditSink
    from audit.store import MemoryStore
    from streams.errors import StoreError

    class FullDisk(MemoryStore):
        def commit(self, prepared: Any) -> None:
            raise StoreError("writing 5 audit records failed, nothing was stored: No space left on device")

    cfg = fresh_settings.model_copy(update={"sink_http_port": 0, "sink_batch_wait_ms": 20})
    asyncio.run(ensure_topics(cfg.kafka_bootstrap_servers, cfg.all_topics, cfg.topic_partitions))
    asyncio.run(produce(cfg.kafka_bootstrap_servers, cfg.audit_topic, audit_records(5)))

    async def main() -> tuple[int, dict[str, Any], BaseException | None]:
        sink = AuditSink(cfg, FullDisk())
        sink.fault_hold_s = 2.0
        task = asyncio.ensure_future(sink.run())
        while sink.status.fault is None and not task.done():
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.2)
        ok, body = sink.health()
        code = 200 if ok else 503
        assert not task.done()  # still answering /health with the fault
        error = None
        try:
            await task
        except StoreError as exc:
            error = exc
        return code, body, error

    code, body, error = asyncio.run(main())
    assert code == 503 and body["reasons"] == [
        "writing 5 audit records failed, nothing was stored: No space left on device"
    ]
    assert isinstance(error, StoreError)


def test_dead_letters_of_what_the_contract_admits_are_delivered(fresh_settings: Settings) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    from streams.contract.envelope import MAX_MESSAGE_BYTES
    from streams.kafka.limits import PRODUCER_MAX_REQUEST_BYTES, TOPIC_MAX_BYTES

    cfg = fresh_settings
    asyncio.run(ensure_topics(cfg.kafka_bootstrap_servers, cfg.all_topics, 1))
    sizes = [1_100_000, 2 * 1024 * 1024, MAX_MESSAGE_BYTES]

    async def main() -> tuple[str, list[int]]:
        admin = AIOKafkaAdminClient(bootstrap_servers=cfg.kafka_bootstrap_servers)
        await admin.start()
        try:
            described = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, cfg.dead_letter_topic)])
        finally:
            await admin.close()
        entries = described[0].to_object()["resources"][0]["config_entries"]
        limit = next(e["config_value"] for e in entries if e["config_names"] == "max.message.bytes")
        producer = AIOKafkaProducer(
            bootstrap_servers=cfg.kafka_bootstrap_servers, max_request_size=PRODUCER_MAX_REQUEST_BYTES
        )
        await producer.start()
        try:
            for size in sizes:
                await producer.send_and_wait(cfg.dead_letter_topic, b"x" * size, headers=[("driftlog.reason", b"r")])
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(cfg.dead_letter_topic, bootstrap_servers=cfg.kafka_bootstrap_servers,
                                    auto_offset_reset="earliest", fetch_max_bytes=16 * 1024 * 1024,
                                    max_partition_fetch_bytes=16 * 1024 * 1024)  # fmt: skip
        await consumer.start()
        got: list[int] = []
        try:
            while len(got) < len(sizes):
                batch = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), 30)
                got += [len(m.value or b"") for msgs in batch.values() for m in msgs]
        finally:
            await consumer.stop()
        return limit, got

    limit, got = asyncio.run(main())
    assert limit == str(TOPIC_MAX_BYTES)
    assert got == sizes  # delivered / sent: 3 / 3, the largest the contract admits among them
