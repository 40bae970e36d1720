import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from streams.cli import cli
from tests.unit.test_docs import command_paths


@pytest.mark.parametrize("path", command_paths(cli))
def test_every_command_has_help(path: str) -> None:
    args = path.split()[1:]
    result = CliRunner().invoke(cli, [*args, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output
    assert len(result.output.splitlines()) > 2


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run(
        [sys.executable, "-m", "streams.cli", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        check=False,
        timeout=60,
    )


def test_domain_error_is_one_line_and_exit_1(tmp_path: Path) -> None:
    proc = run("query", "--db", str(tmp_path / "missing.duckdb"), "SELECT 1")
    assert proc.returncode == 1
    assert proc.stderr.strip().count("\n") == 0
    assert proc.stderr.startswith("driftlog: error: no audit store")


def test_invalid_setting_is_a_clear_error() -> None:
    proc = run("query", "SELECT 1", env={"DRIFTLOG_TOPIC_PARTITIONS": "lots"})
    assert proc.returncode == 1
    assert "DRIFTLOG_TOPIC_PARTITIONS" in proc.stderr or "topic_partitions" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_no_broker_configured_says_what_to_do(tmp_path: Path) -> None:
    proc = run("topics", "create", env={"KAFKA_BOOTSTRAP_SERVERS": "", "DRIFTLOG_HOME": str(tmp_path)})
    assert proc.returncode == 1
    assert "driftlog kafka start" in proc.stderr


def test_query_prints_json(tmp_path: Path) -> None:
    from audit.duckdb_store import DuckDBStore

    DuckDBStore(tmp_path / "a.duckdb").close()
    proc = run(
        "query",
        "--db",
        str(tmp_path / "a.duckdb"),
        "--format",
        "json",
        "SELECT version, name FROM schema_migrations",
    )
    assert proc.returncode == 0, proc.stderr
    assert '"name": "audit_log"' in proc.stdout
