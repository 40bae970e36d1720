"""Named scenarios: ``SCENARIOS[name](seed, ranks, steps)`` builds one (see ``streams.sim.base`` for what
every scenario offers and the keys every ground truth has).

Training fabric (``streams.sim.training``; ``steps`` are training steps, ``ranks`` a multiple of 16):
``training-fabric`` (a straggler rank, then a power cap on its node that makes it worse),
``training-fabric-healthy``, one cause each (``training-slow-stage``, ``training-slow-link``,
``training-imbalanced-dp``), ``training-cascade`` (a straggler whose lateness spreads through its replica;
the ground truth lists the ranks it makes late), ``training-sync-loss`` (a replica falls out of the
all-reduce quorum and drifts apart) and ``training-restart`` (a node fails, the job restarts from its last
checkpoint and runs the lost steps again).

Inference pipeline (``streams.sim.inference_run``; ``steps`` are 1 s windows, ``ranks`` accelerators):
``inference-sla`` (a slow decode replica inflates the p99; a retry storm outlives its trigger) and
``inference-sla-healthy``.

Control storm (``streams.sim.control_run``; ``steps`` are 10 s control windows, ``ranks`` the rack's
accelerators): ``control-storm`` (autoscaler against power manager, an energy feedback loop; scheduler
preemption against autoscaler with retries) and ``control-storm-healthy``.

Realistic training (``streams.sim.realistic``; ``ranks`` a multiple of 8 below 64, of 16 from 64; what a real
exporter sends: per-rank messages, float32 jittered timestamps, blocking batched p2p, sampled steps, one
traced tensor-parallel rank per stage): one cause each from step 0 (``realistic-slow-dp``,
``realistic-slow-stage``, ``realistic-slow-rank``, ``realistic-slow-link``, ``realistic-spread-dp``: an
imbalance spread over every replica), ``realistic-slow-rank-midrun`` (from a third in) and
``realistic-healthy``.

Critical slowing down (``streams.sim.saturation``; ``steps`` are 10 s windows): ``serving-saturation``
(load creeps towards capacity, recovery from bursts slows, then the service tips into overload) and
``serving-saturation-healthy``.
"""

from __future__ import annotations

from collections.abc import Callable

from streams.sim.base import Scenario
from streams.sim.control_run import control_storm
from streams.sim.emit import GPUS_PER_NODE, node_of
from streams.sim.inference_run import inference_sla
from streams.sim.realistic import REALISTIC
from streams.sim.saturation import serving_saturation
from streams.sim.training import Cause, Layout, TrainingFabric
from streams.sim.training_run import Cascade, Restart, TrainingScenario

__all__ = ["SCENARIOS", "Scenario", "TrainingScenario", "training_fabric"]


def training_fabric(seed: int, ranks: int, steps: int, healthy: bool = False) -> TrainingScenario:
    """The distributed-training card: a straggler rank, then a power cap on its node that makes it worse."""
    layout = Layout.for_ranks(ranks)
    fabric = TrainingFabric(layout, seed=seed, thermal_drift=0.0 if healthy else 0.01)
    scenario = TrainingScenario("training-fabric-healthy" if healthy else "training-fabric", fabric, steps)
    if healthy:
        return scenario
    straggler = (seed * 7919 + 5) % layout.ranks
    onset, capped = steps // 3, (2 * steps) // 3
    fabric.causes.append(Cause("straggler_rank", straggler, 1.3, onset, steps))
    cap = Cause("straggler_rank", straggler, 1.25, capped, steps)  # the power cap slows that GPU further
    fabric.causes.append(cap)
    decision_id = f"power-cap-{node_of(straggler)[5:]}-{capped}"
    scenario.decisions.append((capped, {
        "id": decision_id, "controller": "power-manager/rack0", "layer": "power", "action": "power_cap",
        "targets": [node_of(straggler)], "parameters": {"cap_w": 450}, "reason": "rack above its power budget",
        "expected_effect": {"metric": "power_w", "direction": "down"}, "job": scenario.job}))  # fmt: skip
    scenario.decision_causes[decision_id] = cap
    scenario.power_caps.append((straggler // GPUS_PER_NODE, 450.0, capped))
    scenario.expected_findings = [
        "step_time_drift", "straggler", "straggler_cascade", "control_regression", "critical_path_shift"
    ]  # fmt: skip
    return scenario


def single_cause(kind: str, magnitude: float) -> Callable[[int, int, int], TrainingScenario]:
    """A fabric with one injected cause of ``kind`` from a third of the way in (target chosen by seed)."""

    def build(seed: int, ranks: int, steps: int) -> TrainingScenario:
        layout = Layout.for_ranks(ranks)
        fabric = TrainingFabric(layout, seed=seed, thermal_drift=0.01)
        scenario = TrainingScenario(f"training-{kind.replace('_', '-')}", fabric, steps)
        span = {"slow_stage": layout.pp, "slow_link": layout.pp - 1, "imbalanced_dp": layout.dp}[kind]
        fabric.causes.append(Cause(kind, (seed * 7919 + 1) % span, magnitude, steps // 3, steps))
        # a slow replica moves the critical path to another replica, not to another stage or kind of work
        shift = [] if kind == "imbalanced_dp" else ["critical_path_shift"]
        scenario.expected_findings = ["step_time_drift", *shift]
        return scenario

    return build


def training_cascade(seed: int, ranks: int, steps: int) -> TrainingScenario:
    """A straggler in a middle stage, 1.5× compute from a quarter in: its tensor-parallel peers wait at every
    tp_sync, its replica's other stages wait for its sends, the other replicas wait at every all-reduce.
    The ground truth's cause lists the ranks it makes late (``affected``) and those that wait for it
    (``waiting``), both measured on the simulator by healing the root alone."""
    layout = Layout.for_ranks(ranks)
    fabric = TrainingFabric(layout, seed=seed, thermal_drift=0.01)
    scenario = TrainingScenario("training-cascade", fabric, steps)
    replica = (seed * 7919 + 3) % layout.dp
    root = int(layout.rank(replica, layout.pp // 2, seed % layout.tp))
    cause = Cause("straggler_rank", root, 1.5, steps // 4, steps)
    fabric.causes.append(cause)
    scenario.cascade = Cascade(cause)
    scenario.expected_findings = ["step_time_drift", "straggler", "straggler_cascade"]
    return scenario


def training_sync_loss(seed: int, ranks: int, steps: int) -> TrainingScenario:
    """From a third in, one data-parallel replica (compute 1.03×) drops out of the all-reduce quorum and
    runs on its own clock: its phase against the rest grows every step, its gradients no longer count
    (the step summaries' output_units drop by 1/dp), the step time of the rest does not change."""
    layout = Layout.for_ranks(ranks)
    if layout.dp < 2:
        raise ValueError("training-sync-loss needs at least two data-parallel replicas: --ranks 32 or more")
    fabric = TrainingFabric(layout, seed=seed, thermal_drift=0.01)
    scenario = TrainingScenario("training-sync-loss", fabric, steps)
    fabric.causes.append(Cause("sync_loss", (seed * 7919 + 2) % layout.dp, 1.03, steps // 3, steps))
    scenario.expected_findings = ["sync_loss"]
    return scenario


def training_restart(seed: int, ranks: int, steps: int) -> TrainingScenario:
    """A node fails 60% into the step half-way through the run; checkpoints every ``max(2, steps // 10)``
    steps; the job restarts on a spare node 90 s later and runs the lost steps again."""
    layout = Layout.for_ranks(ranks)
    fabric = TrainingFabric(layout, seed=seed, thermal_drift=0.01)
    scenario = TrainingScenario("training-restart", fabric, steps)
    nodes = -(-layout.ranks // GPUS_PER_NODE)
    every = max(2, steps // 10)
    failed = min(steps - 1, steps // 2 + every // 2)  # half-way between two checkpoints
    scenario.restart = Restart(failed, node=(seed * 7919 + 4) % nodes, spare=nodes, checkpoint_every=every)
    scenario.expected_findings = ["restart_rerun"]
    return scenario


SCENARIOS: dict[str, Callable[[int, int, int], Scenario]] = {
    "training-fabric": training_fabric,
    "training-fabric-healthy": lambda seed, ranks, steps: training_fabric(seed, ranks, steps, healthy=True),
    "training-slow-stage": single_cause("slow_stage", 1.3),
    "training-slow-link": single_cause("slow_link", 4.0),
    "training-imbalanced-dp": single_cause("imbalanced_dp", 1.3),
    "training-cascade": training_cascade,
    "training-sync-loss": training_sync_loss,
    "training-restart": training_restart,
    "inference-sla": inference_sla,
    "inference-sla-healthy": lambda seed, ranks, steps: inference_sla(seed, ranks, steps, healthy=True),
    "control-storm": control_storm,
    "control-storm-healthy": lambda seed, ranks, steps: control_storm(seed, ranks, steps, healthy=True),
    "serving-saturation": serving_saturation,
    "serving-saturation-healthy": lambda seed, ranks, steps: serving_saturation(seed, ranks, steps, healthy=True),
    **REALISTIC,
}
