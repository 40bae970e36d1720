"""The notebook API: an audit store read as Arrow/pandas tables, and traces analysed from Python."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from audit.api import AuditDB, analyze
from tests.audit_db import build_db
from tests.kineto_traces import write_job


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> AuditDB:
    return AuditDB(build_db(tmp_path_factory.mktemp("api") / "a.duckdb", ranks=16, steps=200))


def test_findings_causes_and_rollups_as_tables(db: AuditDB) -> None:
    assert db.jobs() == ["llm-pretrain"]
    findings = db.findings()
    assert isinstance(findings, pa.Table) and findings.num_rows > 0
    severities = findings.column("severity").to_pylist()
    assert severities == sorted(severities, reverse=True)
    regression = db.findings(kind="control_regression").to_pandas()
    assert len(regression) == 1
    causes = db.causes(regression.id[0]).to_pandas()
    assert causes["rank"].tolist() == sorted(causes["rank"]) and causes.cause_kind[0] == "decision"
    assert causes.cause[0] in set(db.decisions().column("id").to_pylist())
    every = db.causes()
    assert every.num_rows >= len(causes) and set(every.column("finding_id").to_pylist()) <= set(
        findings.column("id").to_pylist()
    )
    steps = db.rollups(job="llm-pretrain", name="step_s").to_pandas()
    assert len(steps) == 4 and (steps.n == 50).all()
    later = db.findings(start=float(findings.column("start_time").to_pylist()[0]) + 1e-3)
    assert later.num_rows < findings.num_rows


def test_named_queries_by_keyword(db: AuditDB) -> None:
    assert "wasted_by_window" in AuditDB.queries()
    wasted = db.query("wasted_by_window", job="llm-pretrain").to_pandas()
    assert set(wasted.cause) >= {"straggler_wait", "pipeline_bubble", "exposed_comm"}
    by_day = db.wasted_by_cause().to_pandas()
    assert by_day.wasted_accel_s.sum() == pytest.approx(wasted.wasted_accel_s.sum())


def test_analyze_traces_from_python(tmp_path: Path) -> None:
    paths = write_job(tmp_path / "traces", world=8, steps=range(30), straggler=2)
    db = analyze(paths, tmp_path / "t.duckdb", job="bert")
    kinds = db.findings().column("kind").to_pylist()
    assert "straggler" in kinds
    assert db.sql("SELECT count(*) FROM audit_log").column(0)[0].as_py() > 0
