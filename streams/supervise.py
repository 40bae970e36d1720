"""Start driftlog's own long-running processes (worker, sink) as children and stop them cleanly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from streams.errors import DriftlogError


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
