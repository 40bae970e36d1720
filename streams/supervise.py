"""Start driftlog's own long-running processes (worker, sink) as children and stop them cleanly."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path

from streams.errors import DriftlogError


def free_port() -> int:
    """A loopback port that was free a moment ago, drawn at random below Linux's ephemeral range
    (32768-60999): a port the kernel hands out for port 0 can be taken a moment later as the source port of
    an outgoing connection (a Kafka client's), before the service that was given it binds it."""
    rng = random.SystemRandom()
    for _ in range(200):
        port = rng.randrange(20_000, 32_768)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_free(port: int) -> bool:
    """Whether a loopback port can be bound now (SO_REUSEADDR: a port in TIME_WAIT counts as free)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


class Child:
    """``driftlog <args>`` in a new session; stopped with SIGTERM (then SIGKILL after ``grace`` s)."""

    def __init__(self, args: list[str], env: Mapping[str, str], log_path: Path) -> None:
        self.args = args
        self.log_path = log_path
        self._log = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "streams.cli", *args],
            env={**os.environ, **env},
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )

    def check_alive(self) -> None:
        code = self.proc.poll()
        if code is not None:
            raise DriftlogError(f"`driftlog {' '.join(self.args)}` exited with code {code}:\n{self.tail()}")

    def wait_healthy(self, port: int, timeout: float = 60.0) -> None:
        """Poll ``/health`` on ``port`` until it answers 200 (the service is consuming)."""
        deadline = time.monotonic() + timeout
        while True:
            self.check_alive()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise DriftlogError(
                    f"`driftlog {' '.join(self.args)}` not healthy after {timeout:.0f}s:\n{self.tail()}"
                )
            time.sleep(0.2)

    def tail(self, lines: int = 25) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, grace: float = 30.0, sig: signal.Signals = signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._log.close()
        return self.proc.returncode
