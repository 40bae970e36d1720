"""The project's own broker launcher: start, status, stop, nothing left behind."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from streams.kafka.launcher import LocalKafka, process_alive

pytestmark = pytest.mark.integration


@pytest.mark.skipif(not (shutil.which("java") and shutil.which("mvn")), reason="needs Java and Maven")
def test_cli_start_status_stop_leaves_no_process(tmp_path: object) -> None:
    name = f"launcher-test-{os.getpid()}"
    env = {k: v for k, v in os.environ.items() if k != "KAFKA_BOOTSTRAP_SERVERS"}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "streams.cli", "kafka", *args, "--name", name],
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )

    started = cli("start")
    assert started.returncode == 0, started.stderr
    assert started.stdout.startswith("KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:")
    again = cli("start")  # idempotent: the same broker
    assert again.stdout == started.stdout
    status = cli("status")
    assert status.returncode == 0 and "Apache Kafka 3.9" in status.stdout
    from streams.config import load

    s = load()
    state = LocalKafka(s.kafka_home, s.kafka_version, name).state()
    assert state is not None
    assert cli("stop").stdout.strip() == "stopped"
    assert cli("status").returncode == 3
    assert not process_alive(state.pid)  # gone (at most an unreaped zombie of the exited CLI)
    restarted = cli("start")  # a restart, not a re-format: same port (and the same data directory)
    assert restarted.returncode == 0 and restarted.stdout == started.stdout, restarted.stderr
    wiped = cli("wipe", "--yes")
    assert wiped.stdout.strip() == "wiped" and cli("status").returncode == 3
    assert not LocalKafka(s.kafka_home, s.kafka_version, name).dir.exists()
