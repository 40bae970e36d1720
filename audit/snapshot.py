"""Read-only snapshots the sink publishes for SQL: immutable Parquet files the query side opens in its own
in-memory DuckDB, which never holds a handle on the DuckDB file, so nothing a query does can write to it.

Writer side (:class:`Publisher`, its own thread): every ``interval_s``, when the chain heads moved, the
rows appended to ``audit_log`` since the last publish (by ``rowid``: the table is append-only) are read on
a cursor of the writer's connection and written to a new segment file; the small tables (``sink_offsets``,
``checkpoints``, ``schema_migrations``) are written whole. Eight segments of one level are merged into one
of the next level, so a long run keeps O(log n) files. Every file is written under a temporary name and
renamed; ``manifest.json`` (renamed last) names the current set. A replaced file is deleted only after
``grace_s``, so a query that started on the previous manifest can finish.

Query side (:func:`open_snapshot`): an in-memory DuckDB whose ``audit_log`` and small tables are views over
the manifest's files and whose record views are the migrations' own (a catalog file per version, copied
from one built once per set of migrations), with file access limited to exactly those files
(``allowed_paths``: it cannot even create one beside them) and the configuration locked.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import logging
import os
import re
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from audit.migrations import available

log = logging.getLogger("driftlog.snapshot")
MANIFEST = "manifest.json"
FAN_IN = 8  # segments of one level merged into one of the next
CHUNK_ROWS = 131_072  # rows read from the store and written as one segment at a time
SMALL_TABLES = ("sink_offsets", "checkpoints", "schema_migrations")
CATALOG_PREFIX = "catalog-"  # catalog-<version>.duckdb: the views of one version (built by open_snapshot)
SCHEMA_CATALOG = f"{CATALOG_PREFIX}schema-"  # catalog-schema-<digest>.duckdb: what a version's is copied from
_VIEW = re.compile(r"^\s*CREATE\s+(OR\s+REPLACE\s+)?VIEW\b", re.IGNORECASE)


@dataclass
class _Segment:
    name: str
    level: int
    rows: int


@dataclass
class Manifest:
    version: int = 0
    rows: int = 0  # audit_log rows published
    next_rowid: int = 0  # rowid after the last row published
    last_hash: str = ""  # chain_hash of that row, hex: the same file when resumed
    segments: list[_Segment] = field(default_factory=list)
    tables: dict[str, str] = field(default_factory=dict)
    published_at: float = 0.0

    def dumps(self) -> bytes:
        return orjson.dumps(
            {
                "version": self.version,
                "rows": self.rows,
                "next_rowid": self.next_rowid,
                "last_hash": self.last_hash,
                "published_at": self.published_at,
                "tables": self.tables,
                "segments": [[s.name, s.level, s.rows] for s in self.segments],
            }
        )

    @classmethod
    def load(cls, directory: Path) -> Manifest | None:
        try:
            doc = orjson.loads((directory / MANIFEST).read_bytes())
            return cls(doc["version"], doc["rows"], doc["next_rowid"], doc["last_hash"],
                       [_Segment(*s) for s in doc["segments"]], doc["tables"], doc["published_at"])  # fmt: skip
        except (OSError, ValueError, KeyError, TypeError):
            return None


def _write(directory: Path, name: str, table: pa.Table) -> str:
    partial = directory / f".{name}.partial"
    pq.write_table(table, partial, compression="zstd")
    partial.replace(directory / name)
    return name


class Publisher:
    """Publishes snapshots of the store behind ``cursor`` (a cursor of the writer's connection) into
    ``directory``; :meth:`publish` does one step, :meth:`start` runs it every ``interval_s`` on a thread."""

    def __init__(self, cursor: duckdb.DuckDBPyConnection, directory: Path, interval_s: float, grace_s: float) -> None:
        self.cursor, self.directory, self.interval_s, self.grace_s = cursor, directory, interval_s, grace_s
        directory.mkdir(parents=True, exist_ok=True)
        found = Manifest.load(directory)
        resumable = (
            found is not None
            and found.last_hash == self._hash_before(found.next_rowid)
            and sum(s.rows for s in found.segments) == found.rows
            and all((directory / s.name).exists() for s in found.segments)
        )  # else a manifest of another (or a larger, older) file: publish everything again
        self.manifest = found if found is not None and resumable else Manifest(version=found.version if found else 0)
        remove_stale(directory)
        self.retired: list[tuple[float, str]] = (
            []
            if resumable or found is None
            else [(0.0, n) for n in [*(s.name for s in found.segments), *found.tables.values()]]
        )
        self._seen: set[str] = set()  # catalogs already retired
        self._stop = threading.Event()
        self._due = threading.Event()  # poked: rows were committed since the last publish
        self._thread: threading.Thread | None = None
        self._last: Any = None
        self.failed: BaseException | None = None

    def _hash_before(self, rowid: int) -> str:
        found = self.cursor.execute(
            "SELECT chain_hash FROM audit_log WHERE rowid < $n ORDER BY rowid DESC LIMIT 1", {"n": rowid}
        ).fetchall()
        return bytes(found[0][0]).hex() if found else ""

    def publish(self, marker: Any = None) -> bool:
        """Publish what is new (``marker``: e.g. the chain heads; nothing is done when it did not change)."""
        if marker is not None and marker == self._last:
            return False
        m = self.manifest
        seq = m.version + 1
        for part in itertools.count():  # at most CHUNK_ROWS rows in memory at a time
            new = self.cursor.sql(
                "SELECT rowid AS _rowid, * FROM audit_log WHERE rowid >= $n ORDER BY rowid LIMIT $k",
                params={"n": m.next_rowid, "k": CHUNK_ROWS},
            ).to_arrow_table()
            if new.num_rows:
                m.next_rowid = new.column(0)[-1].as_py() + 1
                m.last_hash = new.column("chain_hash")[-1].as_py().hex()
            new = new.drop_columns(["_rowid"])
            if new.num_rows or not m.segments:
                name = _write(self.directory, f"audit_log-{seq:09d}-{part:04d}-0.parquet", new)
                m.segments.append(_Segment(name, 0, new.num_rows))
                m.rows += new.num_rows
            self._merge(f"{seq:09d}-{part:04d}")
            if new.num_rows < CHUNK_ROWS:
                break
        old_tables = dict(m.tables)
        for table in SMALL_TABLES:
            data = self.cursor.sql(f"SELECT * FROM {table}").to_arrow_table()
            m.tables[table] = _write(self.directory, f"{table}-{seq:09d}.parquet", data)
        m.version, m.published_at = seq, time.time()
        partial = self.directory / f".{MANIFEST}.partial"
        partial.write_bytes(m.dumps())
        partial.replace(self.directory / MANIFEST)
        now = time.monotonic()
        self.retired += [(now, name) for name in old_tables.values()]
        self._delete_retired(now)
        self._last = marker
        return True

    def _merge(self, tag: str) -> None:
        """Merge ``FAN_IN`` segments of a level into one of the next, row group by row group (bounded memory)."""
        segments = self.manifest.segments
        for level in range(64):
            same = [s for s in segments if s.level == level]
            if len(same) < FAN_IN:
                break
            name = f"audit_log-{tag}-{level + 1}.parquet"
            partial = self.directory / f".{name}.partial"
            rows = 0
            with pq.ParquetWriter(partial, pq.read_schema(self.directory / same[0].name), compression="zstd") as out:
                for s in same:
                    source = pq.ParquetFile(self.directory / s.name)
                    for group in range(source.num_row_groups):
                        table = source.read_row_group(group)
                        out.write_table(table)
                        rows += table.num_rows
            partial.replace(self.directory / name)
            keep = [s for s in segments if s.level != level]
            at = segments.index(same[0])  # segments stay in rowid order: a level's run is contiguous
            segments[:] = [*keep[:at], _Segment(name, level + 1, rows), *keep[at:]]
            self.retired += [(time.monotonic(), s.name) for s in same]

    def _delete_retired(self, now: float) -> None:
        for catalog in self.directory.glob(f"{CATALOG_PREFIX}[0-9]*.duckdb"):  # (not the schema's: kept)
            if catalog.name < f"{CATALOG_PREFIX}{self.manifest.version:09d}" and catalog.name not in self._seen:
                self._seen.add(catalog.name)
                self.retired.append((now, catalog.name))  # a version replaced: deleted after the grace period
        due = [name for at, name in self.retired if now - at >= self.grace_s]
        self.retired = [(at, name) for at, name in self.retired if now - at < self.grace_s]
        for name in due:
            (self.directory / name).unlink(missing_ok=True)

    def changes(self) -> Any:
        """What moves when there is something new to publish: the rows and the checkpoints stored."""
        return self.cursor.execute(
            "SELECT (SELECT count(*) FROM audit_log), (SELECT max(seq) FROM checkpoints)"
        ).fetchall()

    def start(self) -> None:
        r"""Publish what changed, until :meth:`stop`: at once when :meth:`poke`\ d (the sink committed rows) and
        ``interval_s`` has passed since the last publish, else once the interval has passed (a poke in the
        meantime waits for it); unpoked, every second interval (checkpoints)."""

        def loop() -> None:
            try:
                self.publish(self.changes())
                last = time.monotonic()
                while not self._stop.wait(max(0.0, last + self.interval_s - time.monotonic())):
                    self._due.wait(self.interval_s)
                    self._due.clear()  # (before publishing: a later commit pokes again)
                    last = time.monotonic()
                    self.publish(self.changes())
                self.publish(self.changes())
            except BaseException as exc:  # reported by the sink's health
                self.failed = exc
                log.error("publishing the SQL snapshot failed", extra={"error": repr(exc)})

        self._thread = threading.Thread(target=loop, name="driftlog-snapshot", daemon=True)
        self._thread.start()

    def poke(self) -> None:
        """Rows were committed: publish them as soon as the interval allows (any thread)."""
        self._due.set()

    def stop(self) -> None:
        self._stop.set()
        self._due.set()
        if self._thread is not None:
            self._thread.join()


@dataclass(frozen=True)
class Snapshot:
    """One published version, open for queries (take a ``cursor()`` per query)."""

    version: int
    published_at: float
    con: duckdb.DuckDBPyConnection


def open_snapshot(directory: Path, memory_limit_mb: int = 512) -> Snapshot | None:
    """The current snapshot (None before the first publish): a small DuckDB file holding only the views
    over the manifest's files (``catalog-<version>.duckdb``, built once), opened **read-only**, so that no
    statement can change it either, able to read those files and nothing else (``allowed_paths``: it
    cannot even create a file beside them), with its configuration locked."""
    m = Manifest.load(directory)
    if m is None:
        return None
    root = directory.resolve()
    segments = [f"'{_quote(str(root / s.name))}'" for s in m.segments]
    tables = {table: f"'{_quote(str(root / name))}'" for table, name in m.tables.items()}
    catalog = root / f"{CATALOG_PREFIX}{m.version:09d}.duckdb"
    if not catalog.exists():
        _build_catalog(catalog, segments, tables)
    con = duckdb.connect(str(catalog), read_only=True, config={"threads": 1, "memory_limit": f"{memory_limit_mb}MB"})
    if not con.execute("SELECT current_setting('lock_configuration')").fetchall()[0][0]:  # (else: the
        # process already has this version open, configured and locked: DuckDB shares the instance)
        con.execute(f"SET allowed_paths = [{', '.join([*segments, *tables.values()])}]")  # these files only
        con.execute("SET enable_external_access = false")
        con.execute("SET lock_configuration = true")
    return Snapshot(m.version, m.published_at, con)


def _build_catalog(catalog: Path, segments: list[str], tables: dict[str, str]) -> None:
    """A version's catalog: a copy of the schema's (built once: the migrations' views) whose views over the
    files are replaced by this version's. (Binding the migrations' views reads the files' footers again and
    again: building every version afresh took 110-370 ms, the copy 40-80 ms; the record views name
    ``audit_log`` and the small tables, which DuckDB binds when queried.)"""
    views = _migration_views()
    digest = hashlib.sha256("\0".join(views).encode()).hexdigest()[:16]  # (another schema: another file)
    schema = catalog.with_name(f"{SCHEMA_CATALOG}{digest}.duckdb")
    if not schema.exists():
        _write_catalog(schema, None, segments, tables, views)
    _write_catalog(catalog, schema, segments, tables, ())


def _write_catalog(
    catalog: Path, copy_of: Path | None, segments: list[str], tables: dict[str, str], views: tuple[str, ...]
) -> None:
    """Write ``catalog`` (under a temporary name, renamed): ``copy_of`` or a new file, with its ``audit_log``
    and small tables' views over ``segments`` and ``tables``, then ``views``."""
    partial = catalog.with_name(f".{catalog.name}.{os.getpid()}-{threading.get_ident()}.partial")  # (its own)
    if copy_of is not None:
        shutil.copyfile(copy_of, partial)
    con = duckdb.connect(str(partial))
    try:
        con.execute(f"CREATE OR REPLACE VIEW audit_log AS SELECT * FROM read_parquet([{', '.join(segments)}])")
        for table, quoted in tables.items():
            con.execute(f"CREATE OR REPLACE VIEW {table} AS SELECT * FROM read_parquet({quoted})")
        for view in views:
            con.execute(view)
    finally:
        con.close()
    partial.replace(catalog)


@functools.cache
def _migration_views() -> tuple[str, ...]:
    """The migrations' ``CREATE VIEW`` statements, in order, without their comment lines."""
    parse = duckdb.connect()
    views: list[str] = []
    for _, _, migration in available():
        for statement in parse.extract_statements(migration.read_text()):
            text = "\n".join(line for line in statement.query.splitlines() if not line.lstrip().startswith("--"))
            if _VIEW.match(text):
                views.append(text)
    parse.close()
    return tuple(views)


def _quote(text: str) -> str:
    return text.replace("'", "''")


def remove_stale(directory: Path) -> None:
    """Delete files of the snapshot that no manifest names (left by a crash between write and rename)."""
    m = Manifest.load(directory)
    named = {MANIFEST} | ({s.name for s in m.segments} | set(m.tables.values()) if m else set())
    for path in directory.glob("*"):
        stale = path.suffix == ".parquet" or path.name.endswith(".partial") or path.name.startswith(CATALOG_PREFIX)
        if path.name not in named and path.is_file() and stale:
            path.unlink(missing_ok=True)
