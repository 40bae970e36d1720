"""Shared fixtures. Integration tests get one real Apache Kafka broker per test run:

1. ``KAFKA_BOOTSTRAP_SERVERS`` set → that cluster, nothing started;
2. else a Docker engine answers → testcontainers ``apache/kafka``;
3. else the project's own launcher (Maven-fetched Apache Kafka on loopback), stopped at the end.

If none can be had the integration tests are skipped with the reason, unless ``DRIFTLOG_REQUIRE_BROKER=1``
(CI), where that is a failure.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from streams.config import Settings, load

if TYPE_CHECKING:
    from streams.kafka.launcher import LocalKafka

REQUIRE_BROKER = os.environ.get("DRIFTLOG_REQUIRE_BROKER") == "1"
BROKER: dict[str, str] = {}  # what the integration tests talked to, for the summary


def _docker_answers() -> bool:
    try:
        import docker

        docker.from_env(timeout=3).ping()
        return True
    except Exception:
        return False


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    configured = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "")
    if configured:
        BROKER["version"] = f"external cluster at {configured} (version not reported by the protocol)"
        yield configured
        return
    if _docker_answers():
        from testcontainers.kafka import KafkaContainer

        with KafkaContainer("apache/kafka:3.9.1").with_kraft() as container:
            BROKER["version"] = "Apache Kafka 3.9.1 (testcontainers apache/kafka)"
            yield container.get_bootstrap_server()
        return
    from streams.errors import LauncherError
    from streams.kafka.launcher import LocalKafka

    settings = load()
    broker = LocalKafka(settings.kafka_home, settings.kafka_version, name=f"pytest-{os.getpid()}")
    try:
        state = broker.start()
    except LauncherError as exc:
        if REQUIRE_BROKER:
            pytest.fail(f"no Kafka broker for the integration tests: {exc}")
        pytest.skip(f"no Kafka broker for the integration tests: {exc}")
    BROKER["version"] = f"Apache Kafka {state.version} (local launcher, {state.bootstrap})"
    try:
        yield state.bootstrap
    finally:
        broker.wipe()  # stop keeps a broker's data for a restart; a test broker is not restarted


@pytest.fixture
def fresh_settings(kafka_bootstrap: str, tmp_path: Path) -> Settings:
    """Settings with this test's own topics, groups, DuckDB file and free ports."""
    from streams.demo import namespaced

    run = f"t-{uuid.uuid4().hex[:10]}"
    base = load(kafka_bootstrap_servers=kafka_bootstrap, home=tmp_path / "home", topic_partitions=2)
    return namespaced(base, run, tmp_path / "audit.duckdb")


@pytest.fixture(scope="module")
def own_broker() -> Iterator[LocalKafka]:
    """A local broker of the module's own, for tests that stop and start it (never the shared one)."""
    from streams.errors import LauncherError
    from streams.kafka.launcher import LocalKafka

    settings = load()
    broker = LocalKafka(
        settings.kafka_home, settings.kafka_version, name=f"outage-{os.getpid()}-{uuid.uuid4().hex[:4]}"
    )
    try:
        broker.start()
    except LauncherError as exc:
        if REQUIRE_BROKER:
            pytest.fail(f"no local broker for the outage tests: {exc}")
        pytest.skip(f"no local broker for the outage tests: {exc}")
    try:
        yield broker
    finally:
        broker.wipe()


def pytest_report_header() -> str:
    return f"driftlog: DRIFTLOG_REQUIRE_BROKER={'1' if REQUIRE_BROKER else '0'}"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if "version" in BROKER:
        terminalreporter.write_line(f"driftlog integration broker: {BROKER['version']}")
    skipped = terminalreporter.stats.get("skipped", [])
    if REQUIRE_BROKER and any("integration" in getattr(r, "keywords", {}) for r in skipped):
        terminalreporter.write_line("FAIL: integration tests were skipped while DRIFTLOG_REQUIRE_BROKER=1")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter is not None else []
    if REQUIRE_BROKER and any("integration" in getattr(r, "keywords", {}) for r in skipped):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def require_native() -> None:
    """Skip a native-only test where the extension is not built, or fail under ``DRIFTLOG_REQUIRE_NATIVE=1``."""
    import audit.native

    if audit.native.core is None:
        if os.environ.get("DRIFTLOG_REQUIRE_NATIVE") == "1":
            pytest.fail("DRIFTLOG_REQUIRE_NATIVE=1 but driftlog_native is not built (make builds it with cargo)")
        pytest.skip("driftlog_native is not built (no cargo) or DRIFTLOG_NATIVE=0: only the Python chain is tested")


@pytest.fixture(params=["native", "python"])
def chain_impl(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a test with the native core (driftlog_native: hash chain, classification fast path) and again
    with the definitions, the Python chain and the SQL classification (in this process and, through
    ``DRIFTLOG_NATIVE=0``, in the worker processes verify starts)."""
    import audit.native

    if request.param == "python":
        monkeypatch.setattr(audit.native, "core", None)
        monkeypatch.setenv("DRIFTLOG_NATIVE", "0")
    else:
        require_native()
    return str(request.param)
