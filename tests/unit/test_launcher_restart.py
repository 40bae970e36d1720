"""A local broker keeps its ports across restarts; a port taken meanwhile is a one-line error naming the way
out; wiping forgets them. (No broker is started: the port bookkeeping is checked on its own.)"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from streams.errors import LauncherError
from streams.kafka.launcher import LocalKafka


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
