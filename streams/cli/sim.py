"""Simulation, evaluation and the demo."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import click
import orjson

from streams import config
from streams.cli.root import cli, settings_of, with_broker
from streams.errors import ConfigError

# the scenario names, without importing the simulator (numpy) for every command's start-up
SCENARIO_NAMES = (
    "training-fabric", "training-fabric-healthy", "training-slow-stage", "training-slow-link",
    "training-imbalanced-dp", "training-cascade", "training-sync-loss", "training-restart",
    "inference-sla", "inference-sla-healthy", "control-storm", "control-storm-healthy",
    "serving-saturation", "serving-saturation-healthy",
)  # fmt: skip


@cli.command()
@click.option("--scenario", "name", required=True, type=click.Choice(sorted(SCENARIO_NAMES)),
              help="Which scenario.")  # fmt: skip
@click.option("--seed", default=0, show_default=True, help="Same seed, same data (deterministic).")
@click.option("--ranks", default=64, show_default=True, help="Accelerators: training ranks (a multiple of pp*tp = "
              "16), serving accelerators (inference: 4 per replica; control: 8 per node, 32 to 256).")  # fmt: skip
@click.option("--steps", default=300, show_default=True, help="Training steps, or time windows (inference: 1 s, "
              "control: 10 s).")  # fmt: skip
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
    """Generate a labelled scenario: telemetry, control decisions and the ground truth (injected causes, expected
    findings, the true counterfactual)."""
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
        s = with_broker(settings_of(ctx))
        asyncio.run(_ensure(s))
        topics = {"telemetry": s.telemetry_topic, "decisions": s.decisions_topic}
        counts = run_to_kafka(scenario, seed, s.kafka_bootstrap_servers, topics, truth, progress)
        where = f"{s.telemetry_topic}, {s.decisions_topic} (ground truth: {truth})"
    click.echo(f"{name} seed {seed}: {ranks} ranks, {steps} steps: {counts['telemetry']:,} telemetry and "
               f"{counts['decisions']:,} decision messages -> {where}")  # fmt: skip


@cli.command("eval")
@click.option("--scenario", "names", multiple=True, type=click.Choice(sorted(SCENARIO_NAMES)),
              help="Scenarios (repeatable; default: all).")  # fmt: skip
@click.option("--seeds", default="1,2,3,4,5", show_default=True, help="Comma-separated seeds.")
@click.option("--ranks", default=64, show_default=True)
@click.option("--steps", default=300, show_default=True)
@click.option("--json", "json_path", type=click.Path(path_type=Path), help="Also write the table as JSON here.")
def eval_command(names: tuple[str, ...], seeds: str, ranks: int, steps: int, json_path: Path | None) -> None:
    """Score driftlog's detectors and two baselines (fixed threshold, river ADWIN) on simulated scenarios."""
    from streams.sim.evaluate import run_scenario, score, table

    try:
        seed_list = [int(s) for s in seeds.split(",") if s.strip()]
    except ValueError as exc:
        raise ConfigError(f"--seeds takes comma-separated integers: {exc}") from exc
    chosen = list(names) or sorted(SCENARIO_NAMES)
    jobs = [(name, seed) for name in chosen for seed in seed_list]
    runs, started = [], time.monotonic()
    try:
        for i, (name, seed) in enumerate(jobs, 1):  # progress on stderr: a full run takes minutes
            click.echo(f"[{i}/{len(jobs)}] {name} seed {seed} ({time.monotonic() - started:.0f}s)", err=True)
            runs.append(run_scenario(name, seed, ranks, steps))
        rows = score(runs)
    except ValueError as exc:  # a scenario that cannot be built at this size
        raise ConfigError(str(exc)) from exc
    click.echo(f"scenarios {', '.join(chosen)}; seeds {seed_list}; {ranks} ranks, {steps} steps")
    click.echo(table(rows))
    if json_path is not None:
        json_path.write_bytes(orjson.dumps(rows, option=orjson.OPT_INDENT_2))


async def _ensure(s: config.Settings) -> None:
    from streams.kafka.admin import ensure_topics

    await ensure_topics(s.kafka_bootstrap_servers, s.all_topics, s.topic_partitions)


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
    """End to end on a real broker: a simulated training job (a straggler, then a power cap on its node) → the
    story from SQL: what degraded, which element and which decision, what it cost."""
    from streams.demo import run_demo

    run_demo(settings_of(ctx), db_path, click.echo)
