"""A real Prometheus (the distribution's ``prometheus`` package, Debian 2.42) on a temporary directory,
scraping loopback targets, queried through its HTTP API with the standard library; and the dashboard's
PromQL as Grafana would send it."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from streams.supervise import free_port

DOCKER = Path(__file__).resolve().parents[1] / "docker"
SCRAPE_CONFIG = DOCKER / "prometheus" / "prometheus.yml"
DASHBOARD = DOCKER / "grafana" / "dashboards" / "driftlog.json"
INSTALL = "apt-get install -y prometheus"


def missing() -> str | None:
    """Why a real Prometheus cannot run here, or None."""
    for tool in ("prometheus", "promtool"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed ({INSTALL})"
    return None


def local_config(hosts: dict[str, int], scrape_interval_s: int) -> dict[str, Any]:
    """docker/prometheus/prometheus.yml with each target ``host:port`` rewritten to ``127.0.0.1:<hosts[host]>``
    (the compose service name -> the local port) and a shorter scrape interval."""
    config: dict[str, Any] = yaml.safe_load(SCRAPE_CONFIG.read_text())
    config["global"]["scrape_interval"] = f"{scrape_interval_s}s"
    for job in config["scrape_configs"]:
        for static in job["static_configs"]:
            static["targets"] = [f"127.0.0.1:{hosts[t.split(':')[0]]}" for t in static["targets"]]
    return config


def check_config(path: Path) -> subprocess.CompletedProcess[str]:
    command = ["promtool", "check", "config", str(path)]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)


def dashboard_exprs(rate_interval: str) -> list[tuple[str, str]]:
    """(panel title, PromQL) for every target of the dashboard, with Grafana's ``$__rate_interval`` filled in."""
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [(p["title"], t["expr"].replace("$__rate_interval", rate_interval)) for p in panels for t in p["targets"]]


def metric_names(expr: str) -> set[str]:
    return set(re.findall(r"\b(driftlog_\w+)", expr))


class Prometheus:
    def __init__(self, config: dict[str, Any]) -> None:
        self.dir = tempfile.TemporaryDirectory(prefix="driftlog-prometheus-")
        self.config_path = Path(self.dir.name) / "prometheus.yml"
        self.config_path.write_text(yaml.safe_dump(config))
        self.port = free_port()
        self.log = Path(self.dir.name) / "prometheus.log"
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [
                    "prometheus",
                    f"--config.file={self.config_path}",
                    f"--storage.tsdb.path={Path(self.dir.name) / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 60
        while not self._ready():
            if self.process.poll() is not None or time.monotonic() > deadline:
                tail = self.tail()
                self.close()
                raise RuntimeError(f"prometheus did not become ready:\n{tail}")
            time.sleep(0.2)

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2) as r:
                return bool(r.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def api(self, path: str, **params: Any) -> Any:
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=30) as r:
            body = json.loads(r.read())
        if body.get("status") != "success":
            raise RuntimeError(f"{path} {params}: {body}")
        return body["data"]

    def targets_up(self) -> dict[str, str]:
        """Scrape job -> health of its target."""
        return {t["labels"]["job"]: t["health"] for t in self.api("targets")["activeTargets"]}

    def query_range(self, expr: str, start: float, end: float, step_s: float) -> list[dict[str, Any]]:
        data = self.api("query_range", query=expr, start=start, end=end, step=step_s)
        result: list[dict[str, Any]] = data["result"]
        return result

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self.dir.cleanup()

    def __enter__(self) -> Prometheus:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
