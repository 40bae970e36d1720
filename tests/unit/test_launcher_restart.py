"""A local broker keeps its ports across restarts; a port taken meanwhile is a one-line error naming the way
out; wiping forgets them; one still loading many partitions when its start gives up says so. (No broker is
started: the bookkeeping is checked on its own.)"""

from __future__ import annotations

import dataclasses
import json
import socket
import subprocess
from pathlib import Path

import pytest

from streams.errors import BrokerError, LauncherError
from streams.kafka import launcher
from streams.kafka.launcher import LOADING_PARTITIONS, BrokerState, LocalKafka, partition_dirs, still_loading


def test_ports_are_recorded_once_and_reused(tmp_path: Path) -> None:
    broker = LocalKafka(tmp_path, "3.9.1", "x")
    first = broker._ports()
    assert json.loads((broker.dir / "broker.json").read_text()) == {"port": first[0], "controller_port": first[1]}
    assert broker._ports() == first


def test_a_port_taken_meanwhile_says_how_to_start_afresh(tmp_path: Path) -> None:
    broker = LocalKafka(tmp_path, "3.9.1", "x")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        broker.dir.mkdir(parents=True)
        port = taken.getsockname()[1]
        (broker.dir / "broker.json").write_text(json.dumps({"port": port, "controller_port": port}))
        with pytest.raises(LauncherError, match=f"port {port}.*driftlog kafka wipe --name x"):
            broker._ports()


def test_wipe_forgets_data_and_ports(tmp_path: Path) -> None:
    broker = LocalKafka(tmp_path, "3.9.1", "x")
    broker._ports()
    (broker.dir / "data").mkdir()
    assert broker.wipe() and not broker.dir.exists()
    assert not broker.wipe()


def test_a_broker_still_loading_many_partitions_says_so_and_what_to_do() -> None:
    message = still_loading("dev", 78_000, 90.0)
    assert message.startswith("broker 'dev' is still loading 78,000 partitions after 90s: wait")
    assert "`driftlog kafka start --name dev` again" in message and "`driftlog kafka wipe --name dev`" in message
    assert "\n" not in message


def test_partitions_are_counted_from_the_data_directory(tmp_path: Path) -> None:
    for name in ("bench-1.telemetry-0", "bench-1.telemetry-1", "__consumer_offsets-3", "t-1w-7-2"):
        (tmp_path / name).mkdir()
    (tmp_path / "meta.properties").write_text("")
    (tmp_path / "recovery-point-offset-checkpoint").write_text("")
    (tmp_path / "bootstrap.checkpoint").mkdir()  # (not a partition: no number after its last dash)
    assert partition_dirs(tmp_path) == 4
    assert partition_dirs(tmp_path / "missing") == 0


async def not_ready(bootstrap: str, timeout: float) -> None:
    raise BrokerError(f"Kafka at {bootstrap} did not accept produce/consume within {timeout:.0f}s")


def start_not_ready(broker: LocalKafka, held: int, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Start ``broker`` with ``held`` partitions in its data and a broker that never answers: the error is
    the loading message with many partitions, else the bootstrap error as it was. Whether it was loading."""
    for p in range(held):
        (broker.dir / "data" / f"t-{p}").mkdir(parents=True, exist_ok=True)
    monkeypatch.setattr(launcher, "wait_until_ready", not_ready)
    loading = held >= LOADING_PARTITIONS
    with pytest.raises(BrokerError, match="still loading" if loading else "did not accept") as raised:
        broker.start(timeout=5)
    assert isinstance(raised.value, LauncherError) == loading
    return loading


@pytest.mark.parametrize("held", [LOADING_PARTITIONS - 1, LOADING_PARTITIONS])
def test_start_of_a_running_broker_not_ready_in_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, held: int
) -> None:
    """A running broker that does not answer within the timeout is left running, whatever it holds."""
    broker = LocalKafka(tmp_path, "3.9.1", "x")
    broker.dir.mkdir(parents=True)
    running = subprocess.Popen(["sleep", "60"])  # (the broker's process: one a wrong stop() may kill)
    state = BrokerState(running.pid, 1, 2, "3.9.1", "log")
    (broker.dir / "state.json").write_text(json.dumps(dataclasses.asdict(state)))
    try:
        start_not_ready(broker, held, monkeypatch)
        assert broker.state() == state  # (never stopped: a running broker is left alone)
    finally:
        running.kill()
        running.wait()


@pytest.mark.parametrize("held", [LOADING_PARTITIONS - 1, LOADING_PARTITIONS])
def test_a_broker_just_started_and_still_loading_is_left_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, held: int
) -> None:
    """A broker this start launched that is not ready in time: with many partitions in its data it is left
    running (it comes up once it has loaded them); with fewer it is stopped. (A shell script stands in for
    java: no broker is started.)"""
    java = tmp_path / "java"
    java.write_text("#!/bin/sh\nexec sleep 60\n")
    java.chmod(0o755)
    monkeypatch.setattr(launcher.shutil, "which", lambda name: str(java))
    monkeypatch.setattr(LocalKafka, "ensure_jars", lambda self: tmp_path)
    broker = LocalKafka(tmp_path / "home", "3.9.1", "x")
    (broker.dir / "data").mkdir(parents=True)
    (broker.dir / "data" / "meta.properties").write_text("")
    try:
        loading = start_not_ready(broker, held, monkeypatch)
        assert (broker.state() is not None) == loading
    finally:
        broker.stop()
