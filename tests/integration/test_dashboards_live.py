"""The Grafana dashboard's queries, run for real: a worker and a sink on the broker, the distribution's
Prometheus scraping them with docker/prometheus/prometheus.yml (targets rewritten to the local ports), a small
scenario produced, then every PromQL expression of docker/grafana/dashboards/driftlog.json evaluated through
Prometheus' HTTP API. Grafana itself is not run (not packaged by Debian, and there is no Docker engine here).

Skipped with the reason where ``prometheus``/``promtool`` are not installed, unless
``DRIFTLOG_REQUIRE_PROMETHEUS=1`` (``.ci/run`` installs the package and sets it), where that fails."""

from __future__ import annotations

import asyncio
import math
import os
import time
from pathlib import Path

import pytest
import yaml

from streams.config import Settings
from streams.demo import produce, start_services, wait_drained
from streams.kafka.admin import ensure_topics
from streams.synthetic import SyntheticJob
from tests import prometheus as prom

pytestmark = pytest.mark.integration

SCRAPE_S = 1
RATE_INTERVAL = f"{4 * SCRAPE_S}s"  # Grafana's $__rate_interval at its floor: four scrape intervals
BAD = [b"{truncated", b'{"schema": "driftlog.telemetry/7", "samples": []}']


@pytest.fixture(autouse=True)
def prometheus_installed() -> None:
    why = prom.missing()
    if why is not None:
        if os.environ.get("DRIFTLOG_REQUIRE_PROMETHEUS") == "1":  # CI installs it (.ci/run)
            pytest.fail(f"no Prometheus while DRIFTLOG_REQUIRE_PROMETHEUS=1: {why}")
        pytest.skip(f"no Prometheus: {why}")


def wait_for(check: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.5)


def finite(series: list[dict[str, object]]) -> int:
    return sum(1 for s in series for _, v in s["values"] if math.isfinite(float(v)))  # type: ignore[attr-defined]


def test_promtool_accepts_the_compose_config_and_its_local_form(tmp_path: Path) -> None:
    assert prom.check_config(prom.SCRAPE_CONFIG).returncode == 0
    local = tmp_path / "prometheus.yml"
    local.write_text(yaml.safe_dump(prom.local_config({"worker": 6066, "sink": 6067}, SCRAPE_S)))
    proc = prom.check_config(local)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_dashboard_query_returns_data(fresh_settings: Settings, tmp_path: Path) -> None:
    cfg = fresh_settings
    asyncio.run(ensure_topics(cfg.kafka_bootstrap_servers, cfg.all_topics, cfg.topic_partitions))
    children = start_services(cfg, tmp_path / "logs")
    try:
        config = prom.local_config({"worker": cfg.worker_http_port, "sink": cfg.sink_http_port}, SCRAPE_S)
        with prom.Prometheus(config) as p:
            assert prom.check_config(p.config_path).returncode == 0
            wait_for(lambda: set(p.targets_up().values()) == {"up"}, 30, f"targets not up: {p.targets_up()}")
            began = time.time()
            job = SyntheticJob()
            asyncio.run(produce(cfg.kafka_bootstrap_servers, cfg.telemetry_topic, [*job.messages(), *BAD],
                                key=job.job.encode()))  # fmt: skip
            asyncio.run(wait_drained(cfg, children, 120, print))
            time.sleep(6 * SCRAPE_S)  # the last counts scraped, and a rate window past them
            ended = time.time()

            scraped = set(p.api("label/__name__/values"))
            exprs = prom.dashboard_exprs(RATE_INTERVAL)
            used = set().union(*(prom.metric_names(e) for _, e in exprs))
            assert used <= scraped, f"the dashboard uses series neither service exports: {used - scraped}"
            by_job = {
                name: {s["metric"]["job"] for s in p.api("query", query=f"count by (job) ({name})")["result"]}
                for name in used
            }
            assert all(jobs <= {"driftlog-worker", "driftlog-sink"} and jobs for jobs in by_job.values()), by_job

            empty = []
            for title, expr in exprs:
                series = p.query_range(expr, began - 2, ended, SCRAPE_S)
                if finite(series) == 0:
                    empty.append(f"{title}: {expr} -> {series[:2]}")
            assert not empty, "dashboard queries without data:\n" + "\n".join(empty)

            # the scenario is what the panels show: its dead letters and its finding, by their labels
            reasons = p.api("query", query="sum by (reason) (driftlog_dead_letters_total)")["result"]
            assert {r["metric"]["reason"] for r in reasons} == {"malformed_json", "unknown_schema"}
            kinds = p.api("query", query="sum by (kind) (driftlog_findings_total)")["result"]
            assert "step_time_drift" in {k["metric"]["kind"] for k in kinds}
    finally:
        codes = [c.stop() for c in children]
    assert codes == [0, 0], [c.tail() for c in children]
