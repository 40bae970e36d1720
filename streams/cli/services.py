"""Services: the local broker, topics, the worker and the sink."""

from __future__ import annotations

import asyncio
from pathlib import Path

import click

from streams.cli.root import cli, exit_on_sigterm_until_running, settings_of, with_broker
from streams.kafka.launcher import LocalKafka


@cli.group()
def kafka() -> None:
    """Run a local single-node Apache Kafka broker (KRaft) without Docker, fetched with Maven."""


_name_option = click.option(
    "--name",
    help="Broker instance name (default: DRIFTLOG_KAFKA_NAME, else `default`); other commands find it "
    "through DRIFTLOG_KAFKA_NAME, or on their own when it is the only local broker running.",
)


def _local(ctx: click.Context, name: str | None) -> LocalKafka:
    s = settings_of(ctx)
    return LocalKafka(s.kafka_home, s.kafka_version, name or s.kafka_name)


@kafka.command("start")
@_name_option
@click.pass_context
def kafka_start(ctx: click.Context, name: str | None) -> None:
    """Start the broker (idempotent) and print its bootstrap address once it accepts produce/consume.

    After `driftlog kafka stop` this restarts the same broker: same data (topics, records, offsets) and
    same port. `driftlog kafka wipe` deletes it to start afresh. A broker still loading many partitions
    when the wait (90 s) runs out is left running, and the error says so."""
    s = settings_of(ctx)
    if s.kafka_bootstrap_servers:
        click.echo(f"KAFKA_BOOTSTRAP_SERVERS is set ({s.kafka_bootstrap_servers}); not starting a local broker")
        return
    state = _local(ctx, name).start()
    click.echo(f"KAFKA_BOOTSTRAP_SERVERS={state.bootstrap}")


@kafka.command("stop")
@_name_option
@click.pass_context
def kafka_stop(ctx: click.Context, name: str | None) -> None:
    """Stop the broker and every process it started (its data and port are kept for the next start)."""
    click.echo("stopped" if _local(ctx, name).stop() else "not running")


@kafka.command("wipe")
@_name_option
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.pass_context
def kafka_wipe(ctx: click.Context, name: str | None, yes: bool) -> None:
    """Stop the broker and delete its data (every topic and record) and recorded port."""
    broker = _local(ctx, name)
    if not yes:
        click.confirm(f"delete every topic and record of local broker {broker.name!r} ({broker.dir})?", abort=True)
    click.echo("wiped" if broker.wipe() else "nothing to wipe")


@kafka.command("status")
@_name_option
@click.pass_context
def kafka_status(ctx: click.Context, name: str | None) -> None:
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

    s = with_broker(settings_of(ctx))
    asyncio.run(ensure_topics(s.kafka_bootstrap_servers, s.all_topics, s.topic_partitions))
    click.echo("topics ready: " + ", ".join(s.all_topics))


@cli.command()
@click.pass_context
def worker(ctx: click.Context) -> None:
    """Run the Faust worker: telemetry → engine → audit and dead-letter topics (until SIGTERM)."""
    exit_on_sigterm_until_running()
    from streams.worker import run

    run(with_broker(settings_of(ctx)))  # creates the topics (waiting for the broker if it is away)


@cli.command()
@click.option("--db", "db_path", type=click.Path(path_type=Path), help="DuckDB file (default: DRIFTLOG_DB_PATH).")
@click.pass_context
def sink(ctx: click.Context, db_path: Path | None) -> None:
    """Run the audit sink: audit topic → DuckDB, exactly once (until SIGTERM)."""
    exit_on_sigterm_until_running()
    from audit.duckdb_store import DuckDBStore
    from audit.sink import run
    from audit.sql_service import require_token_off_loopback

    s = with_broker(settings_of(ctx))
    if db_path is not None:
        s = s.model_copy(update={"db_path": db_path})
    require_token_off_loopback(s.http_host, s.sql_token)  # before anything is opened
    run(s, DuckDBStore(s.db_path))  # creates the topics (waiting for the broker if it is away)
