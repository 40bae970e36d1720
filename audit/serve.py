"""The sink's read-only SQL, assembled: a snapshot publisher on the writer's side and the HTTP service that
queries the latest snapshot (audit/snapshot.py, audit/sql_service.py)."""

from __future__ import annotations

import threading

from aiohttp import web

from audit.duckdb_store import DuckDBStore
from audit.snapshot import Manifest, Publisher, Snapshot, open_snapshot
from audit.sql_run import Limits
from audit.sql_service import ServiceLimits, SqlService, require_token_off_loopback
from streams.config import Settings


class SqlServing:
    def __init__(self, settings: Settings, store: DuckDBStore) -> None:
        require_token_off_loopback(settings.http_host, settings.sql_token)
        self.directory = settings.sql_snapshot_dir
        self.memory_mb = settings.query_memory_mb
        grace = 2 * settings.query_timeout_s + 2 * settings.sql_snapshot_interval_s + 5
        self.publisher = Publisher(store.con.cursor(), self.directory, settings.sql_snapshot_interval_s, grace)
        self.publisher.start()  # (the first publish, of everything stored, on its thread: 503 until then)
        limits = ServiceLimits(
            Limits(settings.query_max_rows, settings.query_timeout_s, settings.query_max_bytes),
            settings.query_concurrency, settings.query_queue, settings.http_read_timeout_s,
        )  # fmt: skip
        self.service = SqlService(self.current, settings.sql_token, limits)
        self._lock = threading.Lock()
        self._open: Snapshot | None = None

    def current(self) -> Snapshot | None:
        """The newest published snapshot, opened once per version."""
        manifest = Manifest.load(self.directory)
        if manifest is None or self.publisher.failed is not None:
            return self._open
        with self._lock:
            if self._open is None or self._open.version != manifest.version:
                self._open = open_snapshot(self.directory, self.memory_mb) or self._open
            return self._open

    def routes(self) -> list[web.RouteDef]:
        return self.service.routes()

    def stop(self) -> None:
        self.publisher.stop()
        self.service.close()
