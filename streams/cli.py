"""The ``driftlog`` command. Domain errors become one line on stderr and exit code 1, never a traceback."""

from __future__ import annotations

import asyncio
import csv
import signal
import sys
from pathlib import Path
from typing import Any

import click
import orjson

from streams import config
from streams.errors import ConfigError, DriftlogError
from streams.kafka.launcher import LocalKafka
from streams.logs import configure


def _settings(ctx: click.Context) -> config.Settings:
    return ctx.find_root().obj  # type: ignore[no-any-return]


def _exit_on_sigterm_until_running() -> None:
    """SIGTERM before the service has installed its own handler (during imports, connecting): nothing has
    been consumed yet, so stopping at once is the clean shutdown."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))


def with_broker(settings: config.Settings) -> config.Settings:
    """Settings with a bootstrap address: the configured cluster, else the running local broker."""
    if settings.kafka_bootstrap_servers:
        return settings
    state = LocalKafka(settings.kafka_home, settings.kafka_version).state()
    if state is None:
        raise ConfigError("no Kafka configured: set KAFKA_BOOTSTRAP_SERVERS, or run `driftlog kafka start`")
    return settings.model_copy(update={"kafka_bootstrap_servers": state.bootstrap})


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.pass_context
def cli(ctx: click.Context) -> None:
    """driftlog: which structure and which control decision made the job slower, and what it cost.

    Settings come from the environment (see README.md, "Settings"); KAFKA_BOOTSTRAP_SERVERS selects the
    cluster, otherwise the local broker of `driftlog kafka start` is used.
    """
    try:
        ctx.obj = config.load()
    except ValueError as exc:
        raise ConfigError(f"invalid setting: {exc}") from exc
    configure(ctx.obj.log_level, ctx.obj.log_format)


@cli.group()
def kafka() -> None:
    """Run a local single-node Apache Kafka broker (KRaft) without Docker, fetched with Maven."""


_name_option = click.option("--name", default="default", show_default=True, help="Broker instance name.")


def _local(ctx: click.Context, name: str) -> LocalKafka:
    s = _settings(ctx)
    return LocalKafka(s.kafka_home, s.kafka_version, name)


@kafka.command("start")
@_name_option
@click.pass_context
def kafka_start(ctx: click.Context, name: str) -> None:
    """Start the broker (idempotent) and print its bootstrap address once it accepts produce/consume."""
    s = _settings(ctx)
    if s.kafka_bootstrap_servers:
        click.echo(f"KAFKA_BOOTSTRAP_SERVERS is set ({s.kafka_bootstrap_servers}); not starting a local broker")
        return
    state = _local(ctx, name).start()
    click.echo(f"KAFKA_BOOTSTRAP_SERVERS={state.bootstrap}")


@kafka.command("stop")
@_name_option
@click.pass_context
def kafka_stop(ctx: click.Context, name: str) -> None:
    """Stop the broker and every process it started."""
    click.echo("stopped" if _local(ctx, name).stop() else "not running")


@kafka.command("status")
@_name_option
@click.pass_context
def kafka_status(ctx: click.Context, name: str) -> None:
    """Print whether the broker runs, and where. Exit code 3 when it does not."""
    state = _local(ctx, name).state()
    if state is None:
        click.echo("not running")
        ctx.exit(3)
    click.echo(f"running: pid {state.pid}, Apache Kafka {state.version}, KAFKA_BOOTSTRAP_SERVERS={state.bootstrap}")


@cli.group()
def topics() -> None:
    """Manage driftlog's Kafka topics."""


@topics.command("create")
@click.pass_context
def topics_create(ctx: click.Context) -> None:
    """Create the telemetry, decisions, audit and dead-letter topics if they do not exist."""
    from streams.kafka.admin import ensure_topics

    s = with_broker(_settings(ctx))
    asyncio.run(ensure_topics(s.kafka_bootstrap_servers, s.all_topics, s.topic_partitions))
    click.echo("topics ready: " + ", ".join(s.all_topics))


@cli.command()
@click.pass_context
def worker(ctx: click.Context) -> None:
    """Run the Faust worker: telemetry → engine → audit and dead-letter topics (until SIGTERM)."""
    _exit_on_sigterm_until_running()
    from streams.kafka.admin import ensure_topics
    from streams.worker import run

    s = with_broker(_settings(ctx))
    asyncio.run(ensure_topics(s.kafka_bootstrap_servers, s.all_topics, s.topic_partitions))
    run(s)


@cli.command()
@click.option("--db", "db_path", type=click.Path(path_type=Path), help="DuckDB file (default: DRIFTLOG_DB_PATH).")
@click.pass_context
def sink(ctx: click.Context, db_path: Path | None) -> None:
    """Run the audit sink: audit topic → DuckDB, exactly once (until SIGTERM)."""
    _exit_on_sigterm_until_running()
    from audit.duckdb_store import DuckDBStore
    from audit.sink import run
    from audit.sql_service import require_token_off_loopback
    from streams.kafka.admin import ensure_topics

    s = with_broker(_settings(ctx))
    if db_path is not None:
        s = s.model_copy(update={"db_path": db_path})
    require_token_off_loopback(s.http_host, s.sql_token)  # before anything is opened
    asyncio.run(ensure_topics(s.kafka_bootstrap_servers, s.all_topics, s.topic_partitions))
    run(s, DuckDBStore(s.db_path))


@cli.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--map", "renames", multiple=True, metavar="OLD=NEW", help="Rename a column (repeatable).")
@click.option("--scale", "scales", multiple=True, metavar="NAME=FACTOR", help="Multiply a numeric column.")
@click.option("--set", "constants", multiple=True, metavar="NAME=VALUE", help="Add a constant column.")
@click.option("--kind", type=click.Choice(["op", "metric", "step", "topology", "decision"]),
              help="Kind of rows that have no kind column.")  # fmt: skip
@click.option("--source", help="Producer name stamped on the messages (default: produce:<first file>).")
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
    """Push JSONL or Parquet files of samples and decisions to the telemetry and decisions topics."""
    from streams.client import AsyncProducer
    from streams.produce import Mapping, constant, parse_pairs, produce_files

    s = with_broker(_settings(ctx))
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

    async def run() -> None:
        producer = AsyncProducer(
            s.kafka_bootstrap_servers, source=source or f"produce:{files[0].name}",
            telemetry_topic=s.telemetry_topic, decisions_topic=s.decisions_topic, max_samples=batch,
        )  # fmt: skip
        await producer.start()
        try:
            report = await produce_files(list(files), producer, mapping, lambda m: click.echo(m, err=True))
        finally:
            await producer.stop()
        counts = ", ".join(f"{n:,} {k}" for k, n in sorted(report.samples.items())) or "no samples"
        click.echo(f"sent {counts} and {report.decisions:,} decisions")
        if report.unreadable_count:
            click.echo(f"skipped {report.unreadable_count:,} unreadable rows, e.g.:", err=True)
            for where in report.unreadable:
                click.echo(f"  {where}", err=True)

    asyncio.run(run())


@cli.command()
@click.option("--db", "db_path", type=click.Path(path_type=Path), help="DuckDB file (default: DRIFTLOG_DB_PATH).")
@click.option("--checkpoints", "checkpoint_file", type=click.Path(path_type=Path),
              help="Signed checkpoint file (default: DRIFTLOG_CHECKPOINT_FILE).")  # fmt: skip
@click.option(
    "--public-key", type=click.Path(path_type=Path), help="Public key (default: DRIFTLOG_SIGNING_KEY + .pub)."
)
@click.pass_context
def verify(ctx: click.Context, db_path: Path | None, checkpoint_file: Path | None, public_key: Path | None) -> None:
    """Check the hash chains, offsets, signed checkpoints and derived tables; name the first mismatch.

    Exit code 0 when everything matches, 2 when something does not."""
    from audit.checkpoint import public_key_path
    from audit.verify import verify as run_verify

    s = _settings(ctx)
    if db_path is not None:
        s = s.model_copy(update={"db_path": db_path})
    report = run_verify(
        s.db_path, checkpoint_file or s.checkpoint_path, public_key or public_key_path(s.signing_key_path)
    )
    click.echo(
        f"{report.records:,} records in {report.partitions} partitions, {report.checkpoints} signed checkpoints, "
        f"{report.seconds:.2f}s ({report.rate:,.0f} records/s)"
    )
    if report.ok:
        click.echo("OK: the audit trail matches its hash chains, offsets, checkpoints and derived tables")
        return
    for problem in report.problems:
        click.echo(f"MISMATCH: {problem}")
    ctx.exit(2)


EXPORT_TABLES = (
    "audit_log", "findings", "attributions", "decisions", "graph_snapshots", "metrics_rollup", "dead_letters",
    "checkpoints", "sink_offsets",
)  # fmt: skip


@cli.command()
@click.option("--out", "out_dir", type=click.Path(path_type=Path), required=True, help="Directory for the files.")
@click.option("--format", "fmt", type=click.Choice(["parquet"]), default="parquet", show_default=True)
@click.option("--table", "tables", multiple=True, type=click.Choice(EXPORT_TABLES), help="Only these (repeatable).")
@click.option("--db", "db_path", type=click.Path(path_type=Path), help="DuckDB file (default: DRIFTLOG_DB_PATH).")
@click.option("--url", help="SQL endpoint of a running sink (default: http://127.0.0.1:DRIFTLOG_SINK_HTTP_PORT/sql).")
@click.option("--max-rows", default=50_000_000, show_default=True, help="Refuse tables larger than this.")
@click.pass_context
def export(
    ctx: click.Context, out_dir: Path, fmt: str, tables: tuple[str, ...], db_path: Path | None, url: str | None,
    max_rows: int,
) -> None:  # fmt: skip
    """Export audit tables as Parquet files for external tools (one file per table)."""
    import pyarrow.parquet as pq

    from audit.query import Endpoint, fetch_arrow

    s = _settings(ctx)
    endpoint = Endpoint(url or f"http://127.0.0.1:{s.sink_http_port}/sql", s.sql_token)
    out_dir.mkdir(parents=True, exist_ok=True)
    for table in tables or EXPORT_TABLES:
        data = fetch_arrow(db_path or s.db_path, f"SELECT * FROM {table}", max_rows=max_rows, endpoint=endpoint)
        target = out_dir / f"{table}.{fmt}"
        partial = target.with_name(target.name + ".partial")
        pq.write_table(data, partial)
        partial.replace(target)
        click.echo(f"{target}: {data.num_rows:,} rows")


@cli.command()
@click.option("--scenario", "name", required=True, type=click.Choice(["training-fabric", "training-fabric-healthy"]),
              help="Which scenario.")  # fmt: skip
@click.option("--seed", default=0, show_default=True, help="Same seed, same data (deterministic).")
@click.option("--ranks", default=64, show_default=True, help="Ranks (a multiple of pp*tp = 16).")
@click.option("--steps", default=300, show_default=True, help="Training steps.")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), help="Write telemetry.jsonl, decisions.jsonl "
              "and ground_truth.json here.")  # fmt: skip
@click.option("--kafka", "to_kafka", is_flag=True, help="Produce to the telemetry and decisions topics instead.")
@click.option("--truth", type=click.Path(path_type=Path), default=Path("ground_truth.json"), show_default=True,
              help="With --kafka: where the ground truth goes.")  # fmt: skip
@click.pass_context
def simulate(
    ctx: click.Context, name: str, seed: int, ranks: int, steps: int, out_dir: Path | None, to_kafka: bool,
    truth: Path,
) -> None:  # fmt: skip
    """Generate a labelled scenario: telemetry, control decisions and the ground truth (causes, counterfactual
    step times)."""
    from streams.sim.output import run_to_kafka, to_directory
    from streams.sim.scenarios import SCENARIOS

    if (out_dir is None) == (not to_kafka):
        raise ConfigError("give exactly one of --out DIR or --kafka")
    try:
        scenario = SCENARIOS[name](seed, ranks, steps)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc

    def progress(message: str) -> None:
        click.echo(message, err=True)

    if out_dir is not None:
        counts = to_directory(scenario, seed, out_dir, progress)
        where = str(out_dir)
    else:
        s = with_broker(_settings(ctx))
        asyncio.run(_ensure(s))
        topics = {"telemetry": s.telemetry_topic, "decisions": s.decisions_topic}
        counts = run_to_kafka(scenario, seed, s.kafka_bootstrap_servers, topics, truth, progress)
        where = f"{s.telemetry_topic}, {s.decisions_topic} (ground truth: {truth})"
    click.echo(f"{name} seed {seed}: {ranks} ranks, {steps} steps: {counts['telemetry']:,} telemetry and "
               f"{counts['decisions']:,} decision messages -> {where}")  # fmt: skip


@cli.command("eval")
@click.option("--scenario", "names", multiple=True, type=click.Choice(["training-fabric", "training-fabric-healthy"]),
              help="Scenarios (repeatable; default: all).")  # fmt: skip
@click.option("--seeds", default="1,2,3,4,5", show_default=True, help="Comma-separated seeds.")
@click.option("--ranks", default=64, show_default=True)
@click.option("--steps", default=300, show_default=True)
@click.option("--json", "json_path", type=click.Path(path_type=Path), help="Also write the table as JSON here.")
def eval_command(names: tuple[str, ...], seeds: str, ranks: int, steps: int, json_path: Path | None) -> None:
    """Score driftlog's detectors and two baselines (fixed threshold, river ADWIN) on simulated scenarios."""
    from streams.sim.evaluate import evaluate, score, table

    try:
        seed_list = [int(s) for s in seeds.split(",") if s.strip()]
    except ValueError as exc:
        raise ConfigError(f"--seeds takes comma-separated integers: {exc}") from exc
    chosen = list(names) or ["training-fabric", "training-fabric-healthy"]
    rows = score(evaluate(chosen, seed_list, ranks, steps))
    click.echo(f"scenarios {', '.join(chosen)}; seeds {seed_list}; {ranks} ranks, {steps} steps")
    click.echo(table(rows))
    if json_path is not None:
        json_path.write_bytes(orjson.dumps(rows, option=orjson.OPT_INDENT_2))


async def _ensure(s: config.Settings) -> None:
    from streams.kafka.admin import ensure_topics

    await ensure_topics(s.kafka_bootstrap_servers, s.all_topics, s.topic_partitions)


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


@cli.command()
@click.argument("sql", required=False)
@click.option("--name", help="Run a named query from sql/queries instead of SQL text.")
@click.option("--param", "params", multiple=True, metavar="KEY=VALUE", help="A named query's parameter (repeatable).")
@click.option("--list", "list_queries", is_flag=True, help="List the named queries and their parameters.")
@click.option("--db", "db_path", type=click.Path(path_type=Path), help="DuckDB file (default: DRIFTLOG_DB_PATH).")
@click.option("--url", help="SQL endpoint of a running sink (default: http://127.0.0.1:DRIFTLOG_SINK_HTTP_PORT/sql).")
@click.option("--format", "fmt", type=click.Choice(["table", "json", "csv"]), default="table", show_default=True)
@click.option("--max-rows", default=10_000, show_default=True, help="Refuse results larger than this.")
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
    max_rows: int,
) -> None:
    """Run a read-only SQL query (or a named one) over the audit trail, also while the sink runs.

    Without a running sink the DuckDB file is opened read-only; while the sink holds it, the query goes to
    the sink's SQL endpoint and sees every committed record."""
    from audit.queries import library, named
    from audit.query import Endpoint, run_query
    from streams.produce import parse_pairs

    if list_queries:
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
    s = _settings(ctx)
    endpoint = Endpoint(url or f"http://127.0.0.1:{s.sink_http_port}/sql", s.sql_token)
    assert sql is not None
    result = run_query(db_path or s.db_path, sql, bound, max_rows=max_rows, endpoint=endpoint)
    if fmt == "json":
        click.echo(orjson.dumps(result.records(), default=str, option=orjson.OPT_INDENT_2).decode())
    elif fmt == "csv":
        out = csv.writer(sys.stdout)
        out.writerow(result.columns)
        out.writerows(result.rows)
    else:
        _print_table(result.columns, result.rows)


def _print_table(columns: list[str], rows: list[tuple[Any, ...]]) -> None:
    cells = [[("NULL" if v is None else str(v)) for v in row] for row in rows]
    widths = [max([len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(columns)]
    click.echo("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)))
    click.echo("  ".join("-" * w for w in widths))
    for r in cells:
        click.echo("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)))
    click.echo(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")


@cli.command()
@click.option(
    "--db",
    "db_path",
    type=click.Path(path_type=Path),
    default=Path("driftlog-demo.duckdb"),
    show_default=True,
    help="DuckDB file the demo writes (replaced on each run).",
)
@click.pass_context
def demo(ctx: click.Context, db_path: Path) -> None:
    """End to end on a real broker: a synthetic job with an injected slowdown → findings via SQL."""
    from streams.demo import run_demo

    run_demo(_settings(ctx), db_path, click.echo)


def main() -> None:
    try:
        cli(standalone_mode=True)
    except DriftlogError as exc:
        click.echo(f"driftlog: error: {exc}", err=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
