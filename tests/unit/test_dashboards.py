"""docker/compose.yaml's Prometheus and Grafana, checked without a Docker engine: the files parse, the
scrape targets are the worker's and the sink's metrics ports, and every dashboard query uses only series
and labels that driftlog exports (streams/ops.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.metrics import MetricWrapperBase

from streams import ops
from streams.config import Settings

DOCKER = Path(__file__).resolve().parents[2] / "docker"
DASHBOARD = DOCKER / "grafana" / "dashboards" / "driftlog.json"
PROMQL_WORDS = {"sum", "by", "rate", "increase", "histogram_quantile", "le", "without", "avg", "max", "min"}


def exported() -> dict[str, set[str]]:
    """Series name -> its labels, as the Prometheus client exposes them."""
    out: dict[str, set[str]] = {}
    for metric in vars(ops).values():
        if not isinstance(metric, MetricWrapperBase):
            continue
        [family] = metric.describe()
        labels = set(metric._labelnames)
        if family.type == "counter":
            out[f"{family.name}_total"] = labels
        elif family.type == "histogram":
            out.update({f"{family.name}_{s}": labels | {"le"} for s in ("bucket", "sum", "count")})
        else:
            out[family.name] = labels
    return out


def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    return data


def test_prometheus_and_grafana_mount_files_that_exist() -> None:
    services = compose()["services"]
    for name in ("prometheus", "grafana"):
        for volume in services[name]["volumes"]:
            source = volume.split(":")[0]
            if source.startswith("./"):
                assert (DOCKER / source).exists(), f"{name} mounts missing {source}"
    assert "prometheus" in services["grafana"]["depends_on"]


def test_prometheus_scrapes_the_worker_and_the_sink() -> None:
    config = yaml.safe_load((DOCKER / "prometheus" / "prometheus.yml").read_text())
    targets = {t for job in config["scrape_configs"] for c in job["static_configs"] for t in c["targets"]}
    defaults = Settings()
    assert targets == {f"worker:{defaults.worker_http_port}", f"sink:{defaults.sink_http_port}"}
    assert all(job["metrics_path"] == "/metrics" for job in config["scrape_configs"])


def test_the_dashboard_queries_only_what_driftlog_exports() -> None:
    series = exported()
    dashboard = json.loads(DASHBOARD.read_text())
    datasource = yaml.safe_load((DOCKER / "grafana" / "provisioning" / "datasources" / "prometheus.yaml").read_text())
    uid = datasource["datasources"][0]["uid"]
    used = set()
    for panel in dashboard["panels"]:
        assert panel["datasource"]["uid"] == uid
        for target in panel["targets"]:
            expr = re.sub(r"\$__\w+", "", target["expr"])
            names = list(re.findall(r"\b(driftlog_\w+)", expr))
            assert names, target["expr"]
            for name in names:
                assert name in series, f"{name} is not exported"
                used.add(name)
            for group in re.findall(r"by \(([^)]*)\)", expr):
                for label in (g.strip() for g in group.split(",")):
                    assert any(label in series[n] for n in names), f"{label} is not a label of {names}"
            for label in re.findall(r"\{\{(\w+)\}\}", target.get("legendFormat", "")):
                assert any(label in series[n] for n in names), label
    wanted = {
        "driftlog_samples_total",
        "driftlog_consumer_lag",
        "driftlog_dead_letters_total",
        "driftlog_findings_total",
        "driftlog_sink_commit_seconds_bucket",
    }
    assert wanted <= used


def test_panels_do_not_overlap() -> None:
    cells: set[tuple[int, int]] = set()
    for panel in json.loads(DASHBOARD.read_text())["panels"]:
        g = panel["gridPos"]
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not cells & mine, panel["title"]
        assert g["x"] + g["w"] <= 24
        cells |= mine


def test_the_dashboard_is_well_formed_grafana() -> None:
    """What Grafana's file provisioning needs to load the dashboard: a uid and title, a schema version,
    panels with unique ids, a known panel type, a title and a grid position, the provisioned datasource
    (by uid) on the panel and on each target, and each target a unique refId and an expression."""
    dashboard = json.loads(DASHBOARD.read_text())
    datasource = yaml.safe_load((DOCKER / "grafana" / "provisioning" / "datasources" / "prometheus.yaml").read_text())
    [source] = datasource["datasources"]
    assert (source["type"], source["uid"]) == ("prometheus", "driftlog-prometheus")
    provider = yaml.safe_load((DOCKER / "grafana" / "provisioning" / "dashboards" / "driftlog.yaml").read_text())
    mounted = compose()["services"]["grafana"]["volumes"]
    assert f"./grafana/dashboards:{provider['providers'][0]['options']['path']}:ro" in mounted
    assert dashboard["uid"] and dashboard["title"] and isinstance(dashboard["schemaVersion"], int)
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids)) and all(isinstance(i, int) for i in ids)
    for panel in dashboard["panels"]:
        assert panel["type"] in {"timeseries", "stat", "table", "bargauge", "gauge"} and panel["title"]
        assert {"x", "y", "w", "h"} <= set(panel["gridPos"])
        assert panel["datasource"] == {"type": "prometheus", "uid": source["uid"]}
        assert panel["targets"], panel["title"]
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs))
        for target in panel["targets"]:
            assert target["datasource"] == panel["datasource"]
            assert isinstance(target["expr"], str) and target["expr"].strip()
