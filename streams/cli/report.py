"""``driftlog report``: the post-mortem page."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import click

from streams.cli.root import cli, settings_of
from streams.errors import ConfigError


def event_time(text: str | None, option: str) -> float | None:
    """Seconds since the epoch, from a number or an ISO 8601 date/time (UTC unless it says otherwise)."""
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        pass
    try:
        parsed = dt.datetime.fromisoformat(text)
    except ValueError:
        raise ConfigError(f"{option} takes seconds since the epoch or an ISO 8601 time, got {text!r}") from None
    return (parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)).timestamp()


@cli.command()
@click.option("--db", "db_path", type=click.Path(path_type=Path), help="DuckDB file (default: DRIFTLOG_DB_PATH).")
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    default=Path("report.html"),
    show_default=True,
    help="HTML file to write (replaced).",
)
@click.option("--url", help="SQL endpoint of a running sink (default: http://127.0.0.1:DRIFTLOG_SINK_HTTP_PORT/sql).")
@click.option("--job", help="Job to report on (default: the job with the most roll-ups).")
@click.option("--from", "start", metavar="TIME", help="Event time the report starts (epoch s or ISO 8601, UTC).")
@click.option("--to", "end", metavar="TIME", help="Event time the report ends (epoch s or ISO 8601, UTC).")
@click.pass_context
def report(
    ctx: click.Context,
    db_path: Path | None,
    out: Path,
    url: str | None,
    job: str | None,
    start: str | None,
    end: str | None,
) -> None:
    """Write one self-contained HTML page (opens offline) with the job's figures: step time with findings
    and decisions, blocking slowdown, waste by cause, cost and energy per output, the operator graph with
    the attributed elements, the control-coherence timeline and the ranked causes; under each figure the
    named SQL queries that reproduce it."""
    from audit.query import Endpoint
    from audit.report import build_report

    s = settings_of(ctx)
    endpoint = Endpoint(url or f"http://127.0.0.1:{s.sink_http_port}/sql", s.sql_token)
    window = event_time(start, "--from"), event_time(end, "--to")
    r = build_report(db_path or s.db_path, out, job, *window, endpoint=endpoint)
    empty = [f.key for f in r.figures if f.marks == 0]
    click.echo(
        f"wrote {r.path}: job {r.job}, {len(r.figures)} figures, {r.size_bytes / 1024:,.0f} KiB, "
        f"{r.seconds:.2f}s" + (f" (no data for: {', '.join(empty)})" if empty else "")
    )
