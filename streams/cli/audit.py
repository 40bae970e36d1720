"""The audit trail: query (also while the sink runs), verify, export."""

from __future__ import annotations

import csv
import sys
from pathlib import Path
from typing import Any

import click
import orjson

from streams.cli.root import cli, settings_of
from streams.config import Settings
from streams.errors import ConfigError


@cli.command()
@click.option("--db", "db_path", type=click.Path(path_type=Path), help="DuckDB file (default: DRIFTLOG_DB_PATH).")
@click.option("--checkpoints", "checkpoint_file", type=click.Path(path_type=Path),
              help="Signed checkpoint file (default: DRIFTLOG_CHECKPOINT_FILE).")  # fmt: skip
@click.option(
    "--public-key", type=click.Path(path_type=Path), help="Public key (default: DRIFTLOG_SIGNING_KEY + .pub)."
)
@click.option("--offline", is_flag=True, help="Do not read the checkpoints topic (compare only this host's copies).")
@click.pass_context
def verify(
    ctx: click.Context, db_path: Path | None, checkpoint_file: Path | None, public_key: Path | None, offline: bool
) -> None:
    """Check the hash chains, offsets, signed checkpoints (file, witness, checkpoints topic, table; against
    the pinned key) and schema objects; name the first mismatch.

    Exit code 0 when everything matches, 2 when something does not."""
    from audit.checkpoint import public_key_path
    from audit.checkpoint_topic import read_topic
    from audit.verify import verify as run_verify
    from audit.verify_anchors import Anchors

    s = settings_of(ctx)
    if db_path is not None:
        s = s.model_copy(update={"db_path": db_path})
    anchors = Anchors(
        public_key=s.checkpoint_public_key,
        fingerprint=s.checkpoint_key_fingerprint,
        topic=None if offline else lambda: read_topic(_bootstrap(s), s.checkpoint_topic),
        topic_name=f"checkpoints topic {s.checkpoint_topic}",
        witness=s.checkpoint_witness,
    )
    report = run_verify(
        s.db_path,
        checkpoint_file or s.checkpoint_path,
        public_key or public_key_path(s.signing_key_path),
        anchors=anchors,
    )
    click.echo(
        f"{report.records:,} records in {report.partitions} partitions, {report.checkpoints} signed checkpoints, "
        f"{report.seconds:.2f}s ({report.rate:,.0f} records/s)"
    )
    for note in report.notes:
        click.echo(f"NOTE: {note}")
    if report.ok:
        click.echo("OK: the audit trail matches its hash chains, offsets, checkpoints and schema")
        return
    for problem in report.problems:
        click.echo(f"MISMATCH: {problem}")
    ctx.exit(2)


def _bootstrap(s: Settings) -> str:
    from streams.cli.root import with_broker

    try:
        return with_broker(s).kafka_bootstrap_servers
    except ConfigError:
        return ""


EXPORT_TABLES = (
    "audit_log", "findings", "attributions", "decisions", "graph_snapshots", "metrics_rollup", "dead_letters",
    "checkpoints", "sink_offsets",
)  # fmt: skip
EXPORT_TIMEOUT_S = 600.0


@cli.command()
@click.option("--out", "out_dir", type=click.Path(path_type=Path), required=True, help="Directory for the files.")
@click.option("--format", "fmt", type=click.Choice(["parquet"]), default="parquet", show_default=True)
@click.option("--table", "tables", multiple=True, type=click.Choice(EXPORT_TABLES), help="Only these (repeatable).")
@click.option("--db", "db_path", type=click.Path(path_type=Path), help="DuckDB file (default: DRIFTLOG_DB_PATH).")
@click.option(
    "--url",
    help="SQL endpoint of a running sink, also a remote one (http://host:6067[/sql]; with "
    "DRIFTLOG_SQL_TOKEN); default: the local file, or the local sink while it holds the file.",
)
@click.option("--max-rows", default=50_000_000, show_default=True, help="Refuse tables larger than this.")
@click.pass_context
def export(
    ctx: click.Context, out_dir: Path, fmt: str, tables: tuple[str, ...], db_path: Path | None, url: str | None,
    max_rows: int,
) -> None:  # fmt: skip
    """Export audit tables as Parquet files for external tools (one file per table)."""
    import pyarrow.parquet as pq

    from audit.query import fetch_arrow
    from audit.sql_run import Limits

    s = settings_of(ctx)
    endpoint = _endpoint(s, url)
    limits = Limits(max_rows, max(s.query_timeout_s, EXPORT_TIMEOUT_S), sys.maxsize)  # (the sink caps its own)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create --out {out_dir}: {exc.strerror or exc}; give a writable directory") from exc
    for table in tables or EXPORT_TABLES:
        data = fetch_arrow(db_path or s.db_path, f"SELECT * FROM {table}", limits=limits, endpoint=endpoint)
        target = out_dir / f"{table}.{fmt}"
        partial = target.with_name(target.name + ".partial")
        try:
            pq.write_table(data, partial)
            partial.replace(target)
        except OSError as exc:
            raise ConfigError(f"cannot write {target}: {exc}; give a writable --out directory") from exc
        click.echo(f"{target}: {data.num_rows:,} rows")


def _endpoint(s: Any, url: str | None) -> Any:
    """The sink's SQL endpoint: ``--url`` (then only it is asked, no local file is needed), else the local
    sink's default port (asked when a writer holds the file)."""
    from audit.query import Endpoint

    if url is not None:
        return Endpoint(url if url.rstrip("/").endswith("/sql") else url.rstrip("/") + "/sql", s.sql_token, True)
    return Endpoint(f"http://127.0.0.1:{s.sink_http_port}/sql", s.sql_token)


@cli.command()
@click.argument("sql", required=False)
@click.option("--name", help="Run a named query from sql/queries instead of SQL text.")
@click.option("--param", "params", multiple=True, metavar="KEY=VALUE", help="A named query's parameter (repeatable).")
@click.option("--list", "list_queries", is_flag=True, help="List the named queries and their parameters.")
@click.option("--db", "db_path", type=click.Path(path_type=Path), help="DuckDB file (default: DRIFTLOG_DB_PATH).")
@click.option(
    "--url",
    help="SQL endpoint of a running sink, also a remote one (http://host:6067[/sql]; with "
    "DRIFTLOG_SQL_TOKEN); default: the local file, or the local sink while it holds the file.",
)
@click.option("--format", "fmt", type=click.Choice(["table", "json", "csv"]), default="table", show_default=True)
@click.option("--max-rows", type=int, help="Refuse results larger than this (default: DRIFTLOG_QUERY_MAX_ROWS).")
@click.pass_context
def query(
    ctx: click.Context,
    sql: str | None,
    name: str | None,
    params: tuple[str, ...],
    list_queries: bool,
    db_path: Path | None,
    url: str | None,
    fmt: str,
    max_rows: int | None,
) -> None:
    """Run a read-only SQL query (or a named one) over the audit trail, also while the sink runs.

    Without a running sink the DuckDB file is opened read-only; while the sink holds it, the query goes to
    the sink's SQL endpoint and sees its latest snapshot (DRIFTLOG_SQL_SNAPSHOT_INTERVAL_S behind). Either
    way DRIFTLOG_QUERY_TIMEOUT_S, DRIFTLOG_QUERY_MAX_ROWS and DRIFTLOG_QUERY_MAX_BYTES apply."""
    from audit.queries import library, named
    from audit.query import run_query
    from audit.sql_run import Limits
    from streams.produce import parse_pairs

    if list_queries:
        if fmt == "json":
            click.echo(orjson.dumps([{"name": q.name, "answers": q.answers, "params": [
                {"name": p.name, "type": p.type, "description": p.description} for p in q.params
            ]} for q in library().values()], option=orjson.OPT_INDENT_2).decode())  # fmt: skip
            return
        for q in library().values():
            args = " ".join(f"--param {p.name}=<{p.type}>" for p in q.params)
            click.echo(f"{q.name} {args}\n    {q.answers}")
        return
    if (sql is None) == (name is None):
        raise ConfigError("give either SQL text or --name NAME (see --list)")
    bound: dict[str, object] | None = None
    if name is not None:
        q = named(name)
        sql, bound = q.sql, q.bind(parse_pairs(params, "--param"))
    s = settings_of(ctx)
    assert sql is not None
    limits = Limits(s.query_max_rows, s.query_timeout_s, s.query_max_bytes).narrowed(max_rows)
    result = run_query(db_path or s.db_path, sql, bound, limits=limits, endpoint=_endpoint(s, url))
    if fmt == "json":
        click.echo(orjson.dumps(result.records(), default=str, option=orjson.OPT_INDENT_2).decode())
    elif fmt == "csv":
        out = csv.writer(sys.stdout)
        out.writerow(result.columns)
        out.writerows([_cells(result.columns, row, csv_null="") for row in result.rows])
    else:
        _print_table(result.columns, result.rows)


def _cells(columns: list[str], row: tuple[Any, ...], csv_null: str | None = None) -> list[str]:
    from audit.present import cell

    return [csv_null if v is None and csv_null is not None else cell(c, v) for c, v in zip(columns, row, strict=True)]


def _print_table(columns: list[str], rows: list[tuple[Any, ...]]) -> None:
    cells = [_cells(columns, row) for row in rows]
    widths = [max([len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(columns)]
    click.echo("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)))
    click.echo("  ".join("-" * w for w in widths))
    for r in cells:
        click.echo("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)))
    click.echo(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
