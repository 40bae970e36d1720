"""The ``driftlog`` command. Domain errors become one line on stderr and exit code 1, never a traceback.

Commands live beside this module by subject (services, data, audit, simulation); importing the package
registers them all on :data:`cli`.
"""

from __future__ import annotations

import signal
import sys

import click
from pydantic import ValidationError

from streams import config
from streams.errors import ConfigError, DriftlogError
from streams.kafka.launcher import LocalKafka
from streams.logs import configure


def settings_of(ctx: click.Context) -> config.Settings:
    return ctx.find_root().obj  # type: ignore[no-any-return]


def exit_on_sigterm_until_running() -> None:
    """SIGTERM before the service has installed its own handler (during imports, connecting): nothing has
    been consumed yet, so stopping at once is the clean shutdown."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))


def with_broker(settings: config.Settings) -> config.Settings:
    """Settings with a bootstrap address: the configured cluster, else the running local broker."""
    if settings.kafka_bootstrap_servers:
        return settings
    state = LocalKafka(settings.kafka_home, settings.kafka_version, settings.kafka_name).state()
    if state is None:
        others = LocalKafka.running(settings.kafka_home, settings.kafka_version)
        if len(others) > 1:
            names = ", ".join(b.name for b in others)
            raise ConfigError(
                f"local broker {settings.kafka_name!r} is not running and several others are ({names}): "
                "set DRIFTLOG_KAFKA_NAME to one of them, or KAFKA_BOOTSTRAP_SERVERS"
            )
        state = others[0].state() if others else None
    if state is None:
        raise ConfigError("no Kafka configured: set KAFKA_BOOTSTRAP_SERVERS, or run `driftlog kafka start`")
    return settings.model_copy(update={"kafka_bootstrap_servers": state.bootstrap})


@click.group(context_settings={"help_option_names": ["-h", "--help"]}, invoke_without_command=True)
@click.version_option(package_name="driftlog", prog_name="driftlog")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """driftlog: which structure and which control decision made the job slower, and what it cost.

    Settings come from the environment (see README.md, "Settings"); KAFKA_BOOTSTRAP_SERVERS selects the
    cluster, otherwise the local broker of `driftlog kafka start` is used.
    """
    if ctx.invoked_subcommand is None:  # bare `driftlog`: what it can do
        click.echo(ctx.get_help())
        ctx.exit(0)
    try:
        ctx.obj = config.load()
    except ValidationError as exc:
        raise ConfigError(settings_problem(exc)) from exc
    configure(ctx.obj.log_level, ctx.obj.log_format)


def settings_problem(exc: ValidationError) -> str:
    """A settings error in the environment's words: the variable, the value given and what it must be."""
    env_of = dict(zip(config.Settings.model_fields, config.env_names(), strict=True))
    problems = []
    for error in exc.errors():
        field = str(error["loc"][0]) if error["loc"] else ""
        name = env_of.get(field, field)
        given = error.get("input")
        problems.append(f"{name}={given!r}: {error['msg']}" if isinstance(given, (str, int, float)) else
                        f"{name}: {error['msg']}")  # fmt: skip
    return "invalid setting " + "; ".join(problems) + " (see README.md, Settings)"


def main() -> None:
    from aiokafka.errors import KafkaError

    try:
        cli(standalone_mode=True)
    except DriftlogError as exc:
        click.echo(f"driftlog: error: {exc}", err=True)
        sys.exit(1)
    except KafkaError as exc:
        click.echo(
            f"driftlog: error: Kafka: {' '.join(str(exc).split())}; check KAFKA_BOOTSTRAP_SERVERS "
            "(or `driftlog kafka status`)",
            err=True,
        )
        sys.exit(1)
