"""``driftlog report``: the page's figures from a simulated job's audit trail, checked in real headless
Chromium (skipped, with the reason, where the distribution's chromium is not installed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from audit.report import build_report
from tests.audit_db import build_db
from tests.browser import Browser, missing

FIGURES = ["step_time", "blocking", "wasted", "economics", "graph", "coherence", "causes"]
CHECK = (Path(__file__).parent.parent / "report_check.js").read_text()


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_db(tmp_path_factory.mktemp("report") / "r.duckdb", ranks=16, steps=300)


def test_every_figure_has_data_and_its_queries(db: Path, tmp_path: Path) -> None:
    r = build_report(db, tmp_path / "r.html")
    assert r.job == "llm-pretrain" and [f.key for f in r.figures] == FIGURES
    assert all(f.marks > 0 for f in r.figures), [(f.key, f.marks) for f in r.figures]
    page = r.path.read_text()
    for f in r.figures:
        for name, _ in f.queries:
            assert f"--name {name}" in page
    assert "<script" not in page and "http://" not in page and "https://" not in page  # nothing to fetch
    again = build_report(db, tmp_path / "again.html")
    assert again.path.read_bytes() == r.path.read_bytes()  # deterministic


def test_the_window_narrows_the_figures(db: Path, tmp_path: Path) -> None:
    whole = build_report(db, tmp_path / "w.html")
    first_windows = build_report(db, tmp_path / "n.html", start=0, end=float("1767225600") + 60)
    marks = {f.key: f.marks for f in first_windows.figures}
    assert marks["step_time"] < {f.key: f.marks for f in whole.figures}["step_time"]


def test_cli_errors_are_one_line(db: Path, tmp_path: Path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "streams.cli", "report", *args],
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )

    proc = run("--db", str(db), "--out", str(tmp_path / "x.html"), "--job", "nope")
    assert proc.returncode == 1 and proc.stderr.startswith("driftlog: error: no job 'nope'")
    proc = run("--db", str(db), "--out", str(tmp_path / "x.html"), "--from", "yesterday")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    proc = run("--db", str(db), "--out", str(tmp_path / "ok.html"), "--from", "2026-01-01T00:00:00")
    assert proc.returncode == 0, proc.stderr
    assert "7 figures" in proc.stdout


def test_every_figure_renders_in_headless_chromium(db: Path, tmp_path: Path) -> None:
    why = missing()
    if why is not None:
        if os.environ.get("DRIFTLOG_REQUIRE_BROWSER") == "1":  # CI installs it (.ci/run)
            pytest.fail(f"no headless browser while DRIFTLOG_REQUIRE_BROWSER=1: {why}")
        pytest.skip(f"no headless browser: {why}")
    r = build_report(db, tmp_path / "report.html")
    with Browser() as browser:
        browser.open(r.path)
        result = browser.run(CHECK)
        browser.resize(1000, int(result["page_height"]) + 150)
        browser.screenshot(tmp_path / "report.png")
    assert result["resources"] == []  # the page fetched nothing
    by_key = {f["key"]: f for f in result["figures"]}
    assert list(by_key) == FIGURES
    for f in by_key.values():
        assert not f["empty"] and f["width"] > 300 and f["height"] > 50, f
        assert f["drawn"] == f["expected"] > 0, f
    assert (tmp_path / "report.png").stat().st_size > 10_000


def test_a_job_without_roll_ups_yet_gets_a_page_that_says_so(tmp_path: Path) -> None:
    from audit.api import write_records
    from audit.records import AuditRecord, SourcePosition

    graph = {"job": "early", "valid_from": 100.0, "digest": "g", "nodes": [{"id": "rank:early/0"}], "edges": []}
    write_records([AuditRecord("graph_snapshot", "g0", SourcePosition("telemetry", 0, 0), graph, "early")],
                  tmp_path / "e.duckdb")  # fmt: skip
    r = build_report(tmp_path / "e.duckdb", tmp_path / "e.html")
    marks = {f.key: f.marks for f in r.figures}
    assert r.job == "early" and marks["graph"] == 1 and marks["step_time"] == 0
    assert "No step-time roll-ups in the audit trail" in r.path.read_text()


def _section(page: str, key: str) -> str:
    start = page.index(f'id="fig-{key}"')
    return page[start : page.index("</section>", start)]


def test_loss_of_control_coherence_is_among_the_ranked_causes_with_its_decisions(tmp_path: Path) -> None:
    from audit.api import AuditDB

    db = build_db(tmp_path / "c.duckdb", scenario="control-storm", seed=0, ranks=64, steps=300)
    r = build_report(db, tmp_path / "c.html")
    table = _section(r.path.read_text(), "causes")
    conflicts = AuditDB(db).sql("SELECT evidence FROM findings WHERE kind = 'control_conflict'").to_pylist()
    assert conflicts and 'data-finding="energy_feedback_loop"' in table
    for row in conflicts:
        ids = dict.fromkeys(d for pair in json.loads(row["evidence"])["pairs"] for d in pair)
        listed = f"{len(ids)} decisions (conflicting pair): " + ", ".join(list(ids)[:12])
        assert listed in table, listed


def test_the_step_figure_marks_only_the_decisions_that_touched_the_job(tmp_path: Path) -> None:
    from audit.api import AuditDB, write_records
    from audit.records import AuditRecord, SourcePosition
    from audit.report.page import job_extent

    db = build_db(tmp_path / "d.duckdb", ranks=16, steps=300)
    first = build_report(db, tmp_path / "first.html")
    t = sum(job_extent(AuditDB(db), first.job)) / 2
    src = SourcePosition("decisions", 0, 0)

    def decision(id_: str, job: str, target: str) -> AuditRecord:
        body = {"id": id_, "time": t, "controller": f"ctl-{id_}", "layer": "scheduler", "action": "act",
                "targets": [target], "parameters": {}, "reason": "", "job": job,
                "expected_effect": {"metric": "step_s", "direction": "down"}}  # fmt: skip
        return AuditRecord("decision", id_, src, body, job)

    [graph] = AuditDB(db).query("graph_at", job=first.job, at=t).to_pylist()
    node = next(n for n in graph["nodes"] if n.startswith("node:"))
    write_records([decision("theirs", "other-job", "node:elsewhere"), decision("shared", "", node),
                   decision("ours", first.job, "node:elsewhere")], db)  # fmt: skip
    step = _section(build_report(db, tmp_path / "r.html").path.read_text(), "step_time")
    assert "ctl-ours" in step and "ctl-shared" in step and "ctl-theirs" not in step
