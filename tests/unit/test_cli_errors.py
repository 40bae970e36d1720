"""Every error path a new user met (issue 16, point 5): one line `driftlog: error: ...` that says what to do, a
non-zero exit where nothing was done, never a traceback; and the CLI and output a person expects."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

from tests.unit.test_cli import run

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def one_line_error(proc: object, *needles: str) -> None:
    err = proc.stderr  # type: ignore[attr-defined]
    assert proc.returncode == 1, (proc.returncode, err)  # type: ignore[attr-defined]
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("driftlog: error: "), err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


@pytest.fixture
def not_duckdb(tmp_path: Path) -> Path:
    path = tmp_path / "notes.duckdb"
    path.write_text("these are my notes, not a database\n")
    return path


@pytest.mark.parametrize("command", [["query", "SELECT 1"], ["verify"]])
def test_a_file_that_is_not_duckdb(command: list[str], not_duckdb: Path) -> None:
    one_line_error(run(command[0], "--db", str(not_duckdb), *command[1:]), "is not a DuckDB database file", "--db")


@pytest.mark.parametrize("command", [["query", "SELECT 1"], ["verify"]])
def test_db_given_a_directory(command: list[str], tmp_path: Path) -> None:
    one_line_error(run(command[0], "--db", str(tmp_path), *command[1:]), "is a directory", "give a file path")


def test_the_sink_store_on_a_directory_says_so(tmp_path: Path) -> None:
    from audit.duckdb_store import DuckDBStore
    from streams.errors import StoreError

    with pytest.raises(StoreError, match="is a directory"):
        DuckDBStore(tmp_path)


def test_export_to_a_path_that_cannot_be_created(tmp_path: Path) -> None:
    from audit.duckdb_store import DuckDBStore

    DuckDBStore(tmp_path / "a.duckdb").close()
    blocker = tmp_path / "file"
    blocker.write_text("x")
    proc = run("export", "--db", str(tmp_path / "a.duckdb"), "--out", str(blocker / "sub"))
    one_line_error(proc, "--out", "writable directory")


def test_a_port_in_use_is_one_line() -> None:
    from streams.errors import ConfigError
    from streams.ops import start_http

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError, match=f"127.0.0.1:{port}.*DRIFTLOG_SINK_HTTP_PORT"):
            asyncio.run(start_http("127.0.0.1", port, lambda: (True, {})))


def test_settings_errors_name_the_environment_variable() -> None:
    proc = run("query", "SELECT 1", env={"DRIFTLOG_TOPIC_PARTITIONS": "lots"})
    one_line_error(proc, "DRIFTLOG_TOPIC_PARTITIONS='lots'", "valid integer")
    assert "topic_partitions" not in proc.stderr


def test_log_level_in_capitals_is_accepted(tmp_path: Path) -> None:
    proc = run("query", "--db", str(tmp_path / "none.duckdb"), "SELECT 1", env={"DRIFTLOG_LOG_LEVEL": "INFO"})
    one_line_error(proc, "no audit store")  # got past the settings


def test_version_and_bare_driftlog() -> None:
    version = run("--version")
    assert version.returncode == 0 and version.stdout.startswith("driftlog, version ")
    bare = run()
    assert bare.returncode == 0 and "Usage:" in bare.stdout and "query" in bare.stdout


def test_the_readme_examples_of_query_name_a_file_or_endpoint() -> None:
    examples = [line for line in README.splitlines() if line.startswith("driftlog query") and "--name" in line]
    assert examples
    assert all("--db" in line or "--url" in line for line in examples), examples


def _store_with_findings(path: Path) -> None:
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE findings (kind VARCHAR, subjects VARCHAR[], start_time DOUBLE, step DOUBLE)")
    con.execute("INSERT INTO findings VALUES ('straggler', ['rank:j/3', 'node:n1'], 1767225600.5, 12.0)")
    con.close()


def test_table_and_csv_show_lists_as_json_and_times_as_iso(tmp_path: Path) -> None:
    db = tmp_path / "f.duckdb"
    _store_with_findings(db)
    sql = "SELECT kind, subjects, start_time, step FROM findings"
    table = run("query", "--db", str(db), sql)
    assert table.returncode == 0, table.stderr
    assert '["rank:j/3","node:n1"]' in table.stdout and "2026-01-01T00:00:00.500Z" in table.stdout
    assert "12.0" in table.stdout  # not a time column: a number
    csv_out = run("query", "--db", str(db), "--format", "csv", sql)
    assert "2026-01-01T00:00:00.500Z" in csv_out.stdout and "['rank" not in csv_out.stdout
    as_json = json.loads(run("query", "--db", str(db), "--format", "json", sql).stdout)
    assert as_json[0]["start_time"] == 1767225600.5 and as_json[0]["subjects"] == ["rank:j/3", "node:n1"]


def test_duckdb_hints_are_kept(tmp_path: Path) -> None:
    db = tmp_path / "f.duckdb"
    _store_with_findings(db)
    one_line_error(run("query", "--db", str(db), "SELECT * FROM finding"), 'Did you mean "findings"')


def test_query_list_as_json() -> None:
    proc = run("query", "--list", "--format", "json")
    listed = json.loads(proc.stdout)
    window = next(q for q in listed if q["name"] == "findings_in_window")
    assert [p["name"] for p in window["params"]] == ["start", "end"]


def test_param_takes_iso_dates_for_event_times_only() -> None:
    from audit.queries import named
    from streams.errors import QueryError

    bound = named("findings_in_window").bind({"start": "2026-01-01", "end": "2026-01-01T01:00:00Z"})
    assert bound == {"start": 1767225600.0, "end": 1767229200.0}
    assert named("findings_in_window").bind({"start": "1767225600", "end": "1.5"})["end"] == 1.5
    with pytest.raises(QueryError, match="ISO-8601"):
        named("findings_in_window").bind({"start": "yesterday", "end": "1"})
    with pytest.raises(QueryError, match="DOUBLE"):  # a duration is not a date
        named("preceding").bind({"finding_id": "f", "horizon_s": "2026-01-01"})


@pytest.fixture
def remote_sink() -> Iterator[str]:
    """A stand-in for a remote sink's POST /sql: answers every query with one Arrow row."""
    table = pa.table({"answer": [42]})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    body = sink.getvalue().to_pybytes()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()


def test_query_url_reaches_a_remote_sink_without_a_local_file(remote_sink: str, tmp_path: Path) -> None:
    proc = run("query", "--url", remote_sink, "--format", "json", "SELECT 42 AS answer",
               env={"DRIFTLOG_DB_PATH": str(tmp_path / "absent.duckdb")})  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == [{"answer": 42}]


def test_query_url_that_does_not_answer(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    one_line_error(run("query", "--url", f"http://127.0.0.1:{port}", "SELECT 1"), "did not answer")


def test_a_named_local_broker_is_found(tmp_path: Path) -> None:
    from streams.cli.root import with_broker
    from streams.config import load
    from streams.errors import ConfigError

    settings = load(home=tmp_path, kafka_bootstrap_servers="")

    def fake_broker(name: str, port: int) -> None:
        d = settings.kafka_home / "brokers" / name
        d.mkdir(parents=True)
        state = {"pid": os.getpid(), "port": port, "controller_port": port + 1, "version": "3.9.1", "log": ""}
        (d / "state.json").write_text(json.dumps(state))

    fake_broker("ops", 19092)
    assert with_broker(settings).kafka_bootstrap_servers == "127.0.0.1:19092"  # the only one running
    fake_broker("other", 29092)
    with pytest.raises(ConfigError, match="DRIFTLOG_KAFKA_NAME"):
        with_broker(settings)
    chosen = settings.model_copy(update={"kafka_name": "other"})
    assert with_broker(chosen).kafka_bootstrap_servers == "127.0.0.1:29092"


def test_each_process_serves_only_its_own_metrics() -> None:
    from prometheus_client import generate_latest

    from streams.ops import SINK_METRICS, WORKER_METRICS

    worker, sink = generate_latest(WORKER_METRICS).decode(), generate_latest(SINK_METRICS).decode()
    assert "driftlog_samples_total" in worker and "driftlog_sink_rows_total" not in worker
    assert "driftlog_sink_rows_total" in sink and "driftlog_samples_total" not in sink


def test_log_lines_carry_no_terminal_control_codes() -> None:
    import logging

    from streams.logs import JsonFormatter, PlainFormatter

    record = logging.LogRecord("faust", logging.WARNING, __file__, 1, "\x1b[1;32m[^Worker]\x1b[0m ready", (), None)
    for formatter in (JsonFormatter(), PlainFormatter("%(message)s")):
        line = formatter.format(record)
        assert "\x1b" not in line and "\\u001b" not in line and "[^Worker] ready" in line


def test_the_signing_key_belongs_to_the_deployment(tmp_path: Path) -> None:
    from streams.config import load

    settings = load(db_path=tmp_path / "prod" / "audit.duckdb", home=tmp_path / "cache")
    assert settings.signing_key_path == tmp_path / "prod" / "audit.duckdb.signing.pem"
    assert "rotat" in README[README.index("### Signing key") :][:2000]


def test_eval_reports_progress_on_stderr(monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from streams.cli import cli
    from streams.sim import evaluate

    ran: list[tuple[str, int]] = []
    monkeypatch.setattr(evaluate, "run_scenario", lambda name, seed, ranks, steps, settings: ran.append((name, seed)))
    monkeypatch.setattr(evaluate, "score", lambda runs: [{"runs": len(runs)}])
    monkeypatch.setattr(evaluate, "table", lambda rows: f"TABLE {rows}")
    result = CliRunner().invoke(cli, ["eval", "--scenario", "training-fabric", "--seeds", "1,2,3"])
    assert result.exit_code == 0, result.output
    assert ran == [("training-fabric", 1), ("training-fabric", 2), ("training-fabric", 3)]
    assert "[1/3] training-fabric seed 1" in result.stderr and "[3/3] training-fabric seed 3" in result.stderr
    assert "TABLE [{'runs': 3}]" in result.stdout


@pytest.mark.parametrize("command", [["analyze", "--db", "out.duckdb"], ["produce"]])
def test_an_input_file_that_is_not_there(command: list[str], tmp_path: Path) -> None:
    missing = tmp_path / "telemetry.jsonl"
    args = [command[0], str(missing), *command[1:]]
    one_line_error(run(*args), str(missing), "no such file", "check the path")
