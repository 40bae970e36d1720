"""Real headless Chromium (the distribution's package, never a downloaded browser) driven through
chromedriver's W3C WebDriver HTTP API with the standard library: open a page, run a script, screenshot."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from streams.supervise import free_port

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--no-first-run", "--window-size=1000,900"]  # fmt: skip


def missing() -> str | None:
    """Why the browser test cannot run here, or None."""
    if not CHROMIUM.exists():
        return f"{CHROMIUM} is not installed (apt-get install -y chromium chromium-driver)"
    if shutil.which("chromedriver") is None:
        return "chromedriver is not installed (apt-get install -y chromium-driver)"
    return None


class Browser:
    def __init__(self) -> None:
        self.port = free_port()
        self.profile = tempfile.TemporaryDirectory(prefix="driftlog-chromium-")
        self.driver = subprocess.Popen(
            ["chromedriver", f"--port={self.port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                if self._call("GET", "/status")["value"]["ready"]:
                    break
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                self.close()
                raise TimeoutError("chromedriver did not start")
            time.sleep(0.1)
        options = {"binary": str(CHROMIUM), "args": [*ARGS, f"--user-data-dir={self.profile.name}"]}
        caps = {"capabilities": {"alwaysMatch": {"browserName": "chrome", "goog:chromeOptions": options}}}
        self.session = self._call("POST", "/session", caps)["value"]["sessionId"]

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=data, method=method)
        request.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(request, timeout=120) as response:
            return json.loads(response.read())

    def open(self, path: Path) -> None:
        self._call("POST", f"/session/{self.session}/url", {"url": path.resolve().as_uri()})

    def run(self, script: str) -> Any:
        return self._call("POST", f"/session/{self.session}/execute/sync", {"script": script, "args": []})["value"]

    def resize(self, width: int, height: int) -> None:
        self._call("POST", f"/session/{self.session}/window/rect", {"width": width, "height": height})

    def screenshot(self, out: Path) -> None:
        out.write_bytes(base64.b64decode(self._call("GET", f"/session/{self.session}/screenshot")["value"]))

    def close(self) -> None:
        try:
            if hasattr(self, "session"):
                self._call("DELETE", f"/session/{self.session}")
        finally:
            self.driver.terminate()
            self.driver.wait(10)
            self.profile.cleanup()

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
