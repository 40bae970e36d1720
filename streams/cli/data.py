"""Data in: file import and the event contract."""

from __future__ import annotations

import asyncio
from pathlib import Path

import click

from streams.cli.root import cli, settings_of, with_broker
from streams.errors import ConfigError


@cli.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--map", "renames", multiple=True, metavar="OLD=NEW", help="Rename a column (repeatable).")
@click.option("--scale", "scales", multiple=True, metavar="NAME=FACTOR", help="Multiply a numeric column.")
@click.option("--set", "constants", multiple=True, metavar="NAME=VALUE", help="Add a constant column.")
@click.option("--kind", type=click.Choice(["op", "metric", "step", "topology", "decision"]),
              help="Kind of rows that have no kind column.")  # fmt: skip
@click.option(
    "--source",
    help="Producer name stamped on the messages (default: produce:<first file>); a file "
    "sent again needs a new one, else the worker drops it as duplicates (a warning says so).",
)
@click.option("--batch", default=5000, show_default=True, help="Samples per Kafka message.")
@click.pass_context
def produce(
    ctx: click.Context,
    files: tuple[Path, ...],
    renames: tuple[str, ...],
    scales: tuple[str, ...],
    constants: tuple[str, ...],
    kind: str | None,
    source: str | None,
    batch: int,
) -> None:
    """Push JSONL or Parquet files of samples and decisions to the telemetry and decisions topics.

    PyTorch profiler traces (Chrome-trace .json or .json.gz, one per rank) are recognised and converted:
    op spans, steps and process groups (job: --set job=ID, else the traces' directory name)."""
    from streams import produce_log
    from streams.client import AsyncProducer
    from streams.formats.kineto import default_job, is_trace_file, read_trace_files
    from streams.produce import Mapping, constant, must_exist, parse_pairs, produce_files

    must_exist(list(files))  # (the input before the broker: a typo is told whether Kafka is up or not)
    first = files[0].name
    traces = [f for f in files if f.is_file() and is_trace_file(f)]
    files = tuple(f for f in files if f not in traces)
    job = dict(parse_pairs(constants, "--set")).get("job") or (default_job(traces) if traces else "")
    trace_messages = list(read_trace_files(traces, job=job)) if traces else []  # refuses damaged files now
    s = with_broker(settings_of(ctx))
    try:
        factors = {k: float(v) for k, v in parse_pairs(scales, "--scale").items()}
    except ValueError as exc:
        raise ConfigError(f"--scale takes NAME=NUMBER: {exc}") from exc
    mapping = Mapping(
        rename=parse_pairs(renames, "--map"),
        scale=factors,
        constants={k: constant(v) for k, v in parse_pairs(constants, "--set").items()},
        kind=kind,
    )

    name = source or f"produce:{first}"
    before = produce_log.previous(s.home, name)
    if before is not None:
        click.echo(produce_log.warning(name, before), err=True)

    async def run() -> None:
        producer = AsyncProducer(
            s.kafka_bootstrap_servers, source=name,
            telemetry_topic=s.telemetry_topic, decisions_topic=s.decisions_topic, max_samples=batch,
        )  # fmt: skip
        await producer.start()
        try:
            for message in trace_messages:
                await producer.send_envelope(job, message)
            report = await produce_files(list(files), producer, mapping, lambda m: click.echo(m, err=True))
        finally:
            await producer.stop()
        if trace_messages:
            click.echo(f"sent {len(traces)} profiler traces of job {job} as {len(trace_messages):,} messages")
        if files:
            counts = ", ".join(f"{n:,} {k}" for k, n in sorted(report.samples.items())) or "no samples"
            click.echo(f"sent {counts} and {report.decisions:,} decisions")
        if report.unreadable_count:
            click.echo(f"skipped {report.unreadable_count:,} unreadable rows, e.g.:", err=True)
            for where in report.unreadable:
                click.echo(f"  {where}", err=True)
        sent = sum(report.samples.values()) + report.decisions + len(trace_messages)
        if not sent:
            hint = "" if kind else "; rows without a kind column need --kind"
            raise ConfigError(f"nothing was sent: {report.unreadable_count:,} rows were skipped{hint}")
        produce_log.remember(s.home, name, [str(f) for f in (*traces, *files)],
                             producer.batcher.seq + report.decisions)  # fmt: skip

    asyncio.run(run())


@cli.group()
def contract() -> None:
    """The event contract: JSON Schema files and their documentation."""


@contract.command("docs")
def contract_docs() -> None:
    """Print the contract as Markdown (the source of docs/contract.md)."""
    from streams.contract.docs import render

    click.echo(render(), nl=False)


@contract.command("schema")
@click.argument("name", type=click.Choice(["telemetry", "decision"]))
def contract_schema(name: str) -> None:
    """Print a JSON Schema file (telemetry or decision)."""
    from streams.contract.schema import DECISION_SCHEMA, SCHEMA_DIR, SCHEMA_FILES, TELEMETRY_SCHEMA

    schema = TELEMETRY_SCHEMA if name == "telemetry" else DECISION_SCHEMA
    click.echo((SCHEMA_DIR / SCHEMA_FILES[schema]).read_text(), nl=False)
