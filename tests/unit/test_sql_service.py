"""The sink's SQL endpoint: nothing served can change the store, queries are bounded, tokens are strict."""

from __future__ import annotations

import asyncio
import hashlib
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb
import orjson
import pytest

from audit.duckdb_store import DuckDBStore
from audit.query import Endpoint, fetch_over_http
from audit.serve import SqlServing
from audit.snapshot import open_snapshot
from audit.sql_guard import check_read_only
from audit.sql_run import Limits, batches
from audit.sql_service import authorized, require_token_off_loopback
from audit.store import RawRecord
from streams import ops
from streams.config import Settings
from streams.errors import ConfigError, QueryError
from tests.hidden_writes import HIDDEN_WRITES, corpus

TOKEN = "s3cret-token"
SLOW = "SELECT count(*) FROM range(100000000000) a"


def finding(i: int) -> bytes:
    return orjson.dumps({"v": 1, "type": "finding", "id": f"f{i}", "body": {"kind": "k", "start": i}})


@pytest.fixture
def store(tmp_path: Path) -> Iterator[DuckDBStore]:
    s = DuckDBStore(tmp_path / "a.duckdb")
    s.write([RawRecord("audit", i % 2, i // 2, 1000 + i, None, finding(i)) for i in range(400)])
    yield s
    s.close()


def fingerprint(store: DuckDBStore) -> tuple[bytes, Any]:
    """The store's bytes (file and WAL) and its chain heads as stored."""
    digest = hashlib.sha256()
    for path in sorted(store.path.parent.glob(store.path.name + "*")):
        if path.is_file():
            digest.update(path.name.encode() + path.read_bytes())
    heads = store.con.cursor().execute("SELECT * FROM sink_offsets ORDER BY ALL").fetchall()
    return digest.digest(), heads


@contextmanager
def serving(store: DuckDBStore, **settings: Any) -> Iterator[int]:
    """The sink's SQL serving (publisher + service) on a free port, in a thread with its own loop."""
    cfg = Settings(db_path=store.path, sql_token=TOKEN, sql_snapshot_interval_s=0.05, **settings)
    sql = SqlServing(cfg, store)
    loop = asyncio.new_event_loop()
    ready: dict[str, Any] = {}

    def run() -> None:
        asyncio.set_event_loop(loop)
        ready["runner"], ready["port"] = loop.run_until_complete(
            ops.start_http("127.0.0.1", 0, lambda: (True, {}), sql.routes())
        )
        loop.run_forever()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    while "port" not in ready or sql.current() is None:
        time.sleep(0.01)
    try:
        yield int(ready["port"])
    finally:
        asyncio.run_coroutine_threadsafe(ready["runner"].cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        sql.stop()


def post(port: int, body: dict[str, Any] | bytes, token: str | None = TOKEN) -> tuple[int, bytes]:
    data = body if isinstance(body, bytes) else orjson.dumps(body)
    request = urllib.request.Request(f"http://127.0.0.1:{port}/sql", data=data, method="POST")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


@pytest.mark.parametrize("sql", HIDDEN_WRITES)
def test_the_guard_refuses_every_hidden_write(sql: str, store: DuckDBStore) -> None:
    with pytest.raises(QueryError):
        check_read_only(store.con.cursor(), corpus(str(store.path))[HIDDEN_WRITES.index(sql)])


def test_every_hidden_write_is_refused_over_http_and_nothing_changes(store: DuckDBStore) -> None:
    before = fingerprint(store)
    with serving(store) as port:
        statuses = [post(port, {"sql": sql}) for sql in corpus(str(store.path))]
        assert post(port, {"sql": "SELECT count(*) AS n FROM findings"}) == (200, b'{"columns":["n"],"rows":[[400]]}')
    assert [s for s, _ in statuses] == [400] * len(HIDDEN_WRITES)
    assert all(b"error" in body for _, body in statuses)
    assert fingerprint(store) == before
    assert not Path(f"{store.path}.copy").exists()


def test_even_past_the_guard_a_snapshot_cannot_reach_the_store(store: DuckDBStore, tmp_path: Path) -> None:
    """By construction: each form run directly on the snapshot's connection (no guard) fails or changes
    only that in-memory database; the store's bytes and heads stay as they were."""
    with serving(store):
        snapshot = open_snapshot(store.path.with_name(store.path.name + ".sql-snapshot"))
    assert snapshot is not None
    before = fingerprint(store)
    files = sorted(store.path.parent.rglob("*"))
    succeeded = []
    for sql in corpus(str(store.path)):
        try:
            snapshot.con.cursor().execute(sql).fetchall()
            succeeded.append(sql)
        except Exception:  # any refusal will do: what matters is the store afterwards
            continue
    assert fingerprint(store) == before
    assert sorted(store.path.parent.rglob("*")) == files  # not even a new file beside the snapshot
    assert not any(("ATTACH" in s or "read_" in s or "COPY" in s) for s in succeeded), succeeded


def test_a_saturated_endpoint_answers_429_at_once(store: DuckDBStore) -> None:
    with serving(store, query_concurrency=1, query_queue=1, query_timeout_s=3.0) as port, ThreadPoolExecutor(2) as ex:
        slow = [ex.submit(post, port, {"sql": SLOW}) for _ in range(2)]
        time.sleep(0.5)
        started = time.monotonic()
        status, body = post(port, {"sql": "SELECT 1"})
        assert (status, time.monotonic() - started < 2.0) == (429, True), body  # queued, it would wait 3 s
        assert b"retry later" in body
        assert [f.result()[0] for f in slow] == [400, 400]  # stopped at the time limit
        assert post(port, {"sql": "SELECT 1 AS one"})[0] == 200


def test_a_large_result_is_streamed_and_cut_at_the_byte_cap(store: DuckDBStore) -> None:
    wide = "SELECT repeat('x', 100) AS x FROM range(200000)"  # ~21 MB as JSON, in ~0.9 MB batches
    with serving(store, query_max_bytes=4_000_000, query_max_rows=1_000_000) as port:
        status, body = post(port, {"sql": wide})
        assert status == 200 and 2_000_000 < len(body) <= 4_000_200  # streamed, then ended with the error
        assert body.endswith(b'"error":"the result is larger than 4,000,000 bytes (DRIFTLOG_QUERY_MAX_BYTES); '
                             b'select fewer columns or rows"}')  # fmt: skip
        endpoint = Endpoint(f"http://127.0.0.1:{port}/sql", TOKEN)
        with pytest.raises(QueryError, match="larger than 4,000,000 bytes"):
            fetch_over_http(endpoint, wide, None, Limits(1_000_000))
        small = fetch_over_http(endpoint, "SELECT 7 AS n", None, Limits())
        assert small.to_pylist() == [{"n": 7}]
        assert post(port, {"sql": "SELECT repeat('x', 1000) FROM range(100)"})[0] == 200


def test_a_half_sent_body_times_out(store: DuckDBStore) -> None:
    with serving(store, http_read_timeout_s=0.5) as port, socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(
            b"POST /sql HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + TOKEN.encode()
            + b"\r\nContent-Length: 100\r\n\r\n{\"sql\": "
        )  # fmt: skip
        s.settimeout(5)
        started = time.monotonic()
        answer = s.recv(4096)
        assert answer.startswith(b"HTTP/1.1 408") and time.monotonic() - started < 3


@pytest.mark.parametrize(
    "header", ["", "Bearer", "Bearer wrong", f"bearer {TOKEN}", f"Bearer {TOKEN} ", "Bearer s3cret-tökén", "Bäd"]
)
def test_any_header_but_the_exact_token_is_refused(header: str) -> None:
    assert not authorized(header, TOKEN)
    assert authorized(f"Bearer {TOKEN}", TOKEN)


def test_a_non_ascii_authorization_header_gets_401_not_500(store: DuckDBStore) -> None:
    with serving(store) as port, socket.create_connection(("127.0.0.1", port)) as s:
        body = b'{"sql": "SELECT 1"}'
        s.sendall(b"POST /sql HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \xc3\xa4\xff\r\nContent-Length: "
                  + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body)  # fmt: skip
        assert s.recv(4096).startswith(b"HTTP/1.1 401")
        assert post(port, {"sql": "SELECT 1"}, token=None)[0] == 401
        assert post(port, {"sql": "SELECT 1"}, token="wrong")[0] == 401


@pytest.mark.parametrize("token", ["tökén", "has space", "new\nline"])
def test_an_unusable_token_is_refused_at_start(token: str) -> None:
    with pytest.raises(ConfigError, match="DRIFTLOG_SQL_TOKEN has characters"):
        require_token_off_loopback("127.0.0.1", token)


def test_a_timeout_that_lands_while_batches_are_fetched_is_a_timeout() -> None:
    """The interrupt can reach DuckDB inside the Arrow reader, which raises a bare OSError (CI, stop 18)."""
    con = duckdb.connect()
    streamed = "SELECT i, md5(i::VARCHAR) FROM range(100000000) t(i)"  # produced batch by batch, never at once
    with pytest.raises(QueryError, match=r"ran longer than 0.2s and was stopped"):
        for _ in batches(con.cursor(), streamed, None, Limits(max_rows=10**9, timeout_s=0.2)):
            pass


def test_query_on_a_file_honours_the_query_settings(store: DuckDBStore, tmp_path: Path) -> None:
    db = tmp_path / "copy.duckdb"
    store.con.execute("CHECKPOINT")
    db.write_bytes(store.path.read_bytes())
    env = {**os.environ, "DRIFTLOG_QUERY_TIMEOUT_S": "0.5", "DRIFTLOG_QUERY_MAX_ROWS": "3",
           "DRIFTLOG_HOME": str(tmp_path)}  # fmt: skip

    def query(*args: str, timeout_s: str = "30") -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "streams.cli", "query", "--db", str(db), *args]
        run_env = {**env, "DRIFTLOG_QUERY_TIMEOUT_S": timeout_s}
        return subprocess.run(argv, capture_output=True, text=True, env=run_env, check=False, timeout=60)

    slow = query(SLOW, timeout_s="0.5")  # only this one may time out: a loaded machine slows the others too
    assert (slow.returncode, slow.stderr) == (1, "driftlog: error: the query ran longer than 0.5s and was stopped\n")
    many = query("SELECT * FROM audit_log")
    assert many.returncode == 1 and "more than 3 rows" in many.stderr
    few = query("--format", "json", "SELECT 1 AS n")
    assert few.returncode == 0 and orjson.loads(few.stdout) == [{"n": 1}]
