"""Simulation, evaluation and the demo."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import click
import orjson

from streams import config
from streams.cli.root import cli, settings_of, with_broker
from streams.errors import ConfigError

if TYPE_CHECKING:
    from streams.sim.base import Scenario
    from streams.sim.exporter import Exporter

T = TypeVar("T")

# the scenario names, without importing the simulator (numpy) for every command's start-up
SCENARIO_NAMES = (
    "training-fabric", "training-fabric-healthy", "training-slow-stage", "training-slow-link",
    "training-imbalanced-dp", "training-cascade", "training-sync-loss", "training-restart",
    "inference-sla", "inference-sla-healthy", "control-storm", "control-storm-healthy",
    "serving-saturation", "serving-saturation-healthy",
    "realistic-slow-dp", "realistic-slow-stage", "realistic-slow-rank", "realistic-slow-link", "realistic-spread-dp",
    "realistic-slow-rank-midrun", "realistic-slow-rank-and-link",
    "realistic-slow-rank-and-dp", "realistic-healthy",
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
@click.option("--exporter", "exporter_text", default="", help="Realistic scenarios: the exporter's variation as "
              "key=value,... (see `driftlog eval --help`).")  # fmt: skip
@click.pass_context
def simulate(
    ctx: click.Context, name: str, seed: int, ranks: int, steps: int, out_dir: Path | None, to_kafka: bool,
    truth: Path, exporter_text: str,
) -> None:  # fmt: skip
    """Generate a labelled scenario: telemetry, control decisions and the ground truth (injected causes, expected
    findings, the true counterfactual)."""
    from streams.sim.output import run_to_kafka, to_directory
    from streams.sim.scenarios import SCENARIOS

    if (out_dir is None) == (not to_kafka):
        raise ConfigError("give exactly one of --out DIR or --kafka")
    if exporter_text and not name.startswith("realistic-"):
        raise ConfigError("--exporter applies to the realistic-* scenarios only")
    try:
        if exporter_text:
            from streams.sim.exporter import Exporter
            from streams.sim.realistic import REALISTIC

            scenario: Scenario = REALISTIC[name](seed, ranks, steps, Exporter.parse(exporter_text))
        else:
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
@click.option(
    "--mode",
    type=click.Choice(["ideal", "realistic", "both"]),
    default="both",
    show_default=True,
    help="ideal: the scenarios written beside the engine; realistic: what real exporters send (per-rank "
    "messages, float32 jittered timestamps, blocking batched p2p, sampled steps, causes from step 0).",
)
@click.option("--scenario", "names", multiple=True, type=click.Choice(sorted(SCENARIO_NAMES)),
              help="Scenarios (repeatable; default: all of the chosen mode).")  # fmt: skip
@click.option("--seeds", default="1,2,3,4,5", show_default=True, help="Comma-separated seeds.")
@click.option("--ranks", default=64, show_default=True)
@click.option("--steps", default=300, show_default=True)
@click.option("--exporter", "exporter_text", default="", help="Realistic mode: the exporter's variation as "
              "key=value,... (sample_every, traced_tp (a tensor index or all), jitter_s, resolution_s, float32, "
              "batching rank|stage|step, shuffle, p2p_microbatch, delay).")  # fmt: skip
@click.option("--throughput", "throughput_ranks", default="8,1024", show_default=True,
              help="Realistic mode: engine throughput (spans/s) on realistic input at these rank counts "
              "(comma-separated; empty: skip).")  # fmt: skip
@click.option("--json", "json_path", type=click.Path(path_type=Path), help="Also write the tables as JSON here.")
@click.pass_context
def eval_command(ctx: click.Context, mode: str, names: tuple[str, ...], seeds: str, ranks: int, steps: int,
                 exporter_text: str, throughput_ranks: str, json_path: Path | None) -> None:  # fmt: skip
    """Score driftlog's detectors and two baselines (fixed threshold, river ADWIN) on simulated scenarios, and
    (realistic mode) its structural attribution against both slowdown definitions. The engine runs with the
    DRIFTLOG_* settings, as the worker and analyze do (the non-default ones are printed first)."""
    from streams.sim import evaluate
    from streams.sim.exporter import Exporter

    settings = settings_of(ctx)
    click.echo(f"engine settings: {_changed(settings)}")
    seed_list = _integers("--seeds", seeds)
    try:
        exporter = Exporter.parse(exporter_text)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    realistic = [n for n in SCENARIO_NAMES if n.startswith("realistic-")]
    chosen = list(names) or sorted(SCENARIO_NAMES)
    ideal_names = [n for n in chosen if n not in realistic] if mode != "realistic" else []
    real_names = [n for n in chosen if n in realistic] if mode != "ideal" else []
    doc: dict[str, object] = {}
    started = time.monotonic()
    try:
        if ideal_names:
            runs = _progress([(n, s) for n in ideal_names for s in seed_list], started,
                             lambda n, s: evaluate.run_scenario(n, s, ranks, steps, settings))  # fmt: skip
            rows = evaluate.score(runs)
            click.echo(f"scenarios {', '.join(ideal_names)}; seeds {seed_list}; {ranks} ranks, {steps} steps")
            click.echo(evaluate.table(rows))
            doc["ideal"] = rows
        if real_names:
            doc["realistic"] = _realistic(real_names, seed_list, ranks, steps, exporter, throughput_ranks, started,
                                          settings)  # fmt: skip
    except ValueError as exc:  # a scenario that cannot be built at this size, a bad exporter option
        raise ConfigError(str(exc)) from exc
    if json_path is not None:
        json_path.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))


def _integers(option: str, text: str) -> list[int]:
    try:
        return [int(s) for s in text.split(",") if s.strip()]
    except ValueError as exc:
        raise ConfigError(f"{option} takes comma-separated integers: {exc}") from exc


def _progress(jobs: list[tuple[str, int]], started: float, run: Callable[[str, int], T]) -> list[T]:
    """Run each (scenario, seed), with progress on stderr (a full run takes minutes)."""
    out = []
    for i, (name, seed) in enumerate(jobs, 1):
        click.echo(f"[{i}/{len(jobs)}] {name} seed {seed} ({time.monotonic() - started:.0f}s)", err=True)
        out.append(run(name, seed))
    return out


def _changed(settings: config.Settings) -> str:
    """The engine's and admission's settings that differ from the service's defaults (the worker's with no
    DRIFTLOG_* set), as ``name=value``, or ``defaults``."""
    from dataclasses import asdict

    from streams.pipeline import admission_of, engine_config

    default = config.Settings.model_construct()  # every field at its default, the environment unread
    mine, theirs = asdict(engine_config(settings)), asdict(engine_config(default))
    ours, base = admission_of(settings), admission_of(default)
    mine |= {"allowed_lateness": ours.allowed_lateness, "max_future": ours.max_future}
    theirs |= {"allowed_lateness": base.allowed_lateness, "max_future": base.max_future}
    return ", ".join(f"{k}={v}" for k, v in mine.items() if theirs[k] != v) or "defaults"


def _realistic(names: list[str], seeds: list[int], ranks: int, steps: int, exporter: Exporter,
               throughput_ranks: str, started: float, settings: config.Settings) -> dict[str, object]:  # fmt: skip
    from streams.sim import evaluate_realistic as real
    from streams.sim.evaluate import grid

    runs = _progress([(n, s) for n in names for s in seeds], started,
                     lambda n, s: real.run_realistic(n, s, ranks, steps, exporter, settings))  # fmt: skip
    attribution, jobs = real.score_attribution(runs), real.score_jobs(runs)
    click.echo(f"realistic: scenarios {', '.join(names)}; seeds {seeds}; {ranks} ranks, {steps} steps; {exporter}")
    if attribution:
        click.echo(grid(attribution, list(attribution[0])))
    click.echo(grid(jobs, list(jobs[0])))
    speeds = []
    for n in _integers("--throughput", throughput_ranks):
        click.echo(f"throughput at {n} ranks ({time.monotonic() - started:.0f}s)", err=True)
        speeds.append(real.throughput(n, steps if n > 64 else 10 * steps, exporter, settings=settings))
    if speeds:
        click.echo(grid(speeds, list(speeds[0])))
    return {"attribution": attribution, "jobs": jobs, "throughput": speeds}


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
