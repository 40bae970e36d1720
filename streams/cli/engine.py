"""The engine offline: ``analyze`` (files) and ``replay`` (a time range of the topics)."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import click

from streams.cli.root import cli, settings_of
from streams.errors import ConfigError


def _summary(records: Counter[str], samples: int, seconds: float, db: Path) -> str:
    kinds = ", ".join(f"{n:,} {k}" for k, n in sorted(records.items())) or "no records"
    return f"{samples:,} samples in {seconds:.1f} s ({samples / max(seconds, 1e-9):,.0f}/s): {kinds} -> {db}"


@cli.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--db", type=click.Path(path_type=Path), required=True, help="New audit DB to write.")
@click.option("--set", "overrides", multiple=True, metavar="SETTING=VALUE", help="Override a setting (repeatable).")
@click.pass_context
def analyze(ctx: click.Context, files: tuple[Path, ...], db: Path, overrides: tuple[str, ...]) -> None:
    """Run the engine over JSONL or Parquet files (telemetry envelopes and decisions as the simulator writes
    them, or one sample or decision per row), in any order, without Kafka; write the audit records, the
    run's settings and a signed checkpoint to a new DuckDB file. Same records as the live service."""
    from streams.analyze import analyze_files
    from streams.offline import ProgressLine, with_overrides, write_run
    from streams.pipeline import build_processor

    s = with_overrides(settings_of(ctx), overrides)
    started = time.monotonic()
    progress = ProgressLine("analyze")
    out = analyze_files(list(files), build_processor(s), progress)
    progress.done()
    write_run(db, out.audit, "analyze", [str(f) for f in files], s)
    samples = sum(n for k, n in out.samples_by_kind.items() if k != "decision")
    click.echo(_summary(Counter(r.type for r in out.audit), samples, time.monotonic() - started, db))


@cli.command()
@click.option("--from", "start", required=True, help="Start of the range: ISO-8601 time or epoch seconds.")
@click.option("--to", "end", help="End of the range (default: the end of the topics as the replay starts).")
@click.option("--job", help="Only the telemetry of this job (messages keyed by it), with every decision.")
@click.option("--db", type=click.Path(path_type=Path), required=True, help="New audit DB to write.")
@click.option("--set", "overrides", multiple=True, metavar="SETTING=VALUE", help="Override a setting (repeatable).")
@click.pass_context
def replay(
    ctx: click.Context, start: str, end: str | None, job: str | None, db: Path, overrides: tuple[str, ...]
) -> None:
    """Replay a time range of the telemetry and decisions topics through the engine (offsets-for-times on
    every partition) and write the audit records, the run's settings and a signed checkpoint to a new
    DuckDB file: a post-mortem with other settings, or a check that the live records hold."""
    import asyncio

    from streams.cli.root import with_broker
    from streams.offline import ProgressLine, parse_time, with_overrides, write_run
    from streams.pipeline import build_processor
    from streams.replay import Range
    from streams.replay import replay as run_replay

    s = with_broker(with_overrides(settings_of(ctx), overrides))
    window = Range(int(parse_time(start, "--from") * 1000), int(parse_time(end, "--to") * 1000) if end else None)
    if window.end_ms is not None and window.end_ms < window.start_ms:
        raise ConfigError("--to is before --from: give the range in time order")
    started = time.monotonic()
    progress = ProgressLine("replay")
    topics = {"telemetry": s.telemetry_topic, "decisions": s.decisions_topic}
    out, offsets = asyncio.run(run_replay(s.kafka_bootstrap_servers, topics, window, build_processor(s), job, progress))
    progress.done()
    inputs = {"topics": topics, "from": start, "to": end, "job": job, "offsets": offsets}
    write_run(db, out.audit, "replay", inputs, s)
    samples = sum(n for k, n in out.samples_by_kind.items() if k != "decision")
    click.echo(_summary(Counter(r.type for r in out.audit), samples, time.monotonic() - started, db))
