"""Control storm: an autoscaler, a power manager, a scheduler and retry logic acting on the same nodes.

A serving job runs replicas (2 accelerators each, at most 4 per node) on the service nodes of one rack;
the rack's last node runs a batch job. One window is one control interval (``window_s``). Per window:

- **Load**: fresh requests at a daily-shaped rate with a surge from ``surge_at``, plus client retries
  (``streams.sim.queueing.retry_flow``; a preempted replica's requests fail and are retried too).
- **Serving**: each replica is a ``streams.sim.queueing`` replica whose service time is divided by its
  node's clock fraction ``f``; latency quantiles from a fixed number of draws per replica.
- **Power**: an accelerator draws ``IDLE_W``, or with a replica on it ``BASE_W + DYN_W`` × utilisation
  (at full clocks). A node capped below its demand slows its clocks to the fraction ``f`` at which the
  power above idle, which scales with f², fits the cap (at least ``MIN_CLOCK``): the work takes 1/f as
  long, so latency rises while power stays at the cap.

Controllers, each acting at most once per its cooldown (``cooldown``, windows):

- **autoscaler** (``hpa/<job>``, layer autoscaler): p99 above ``target_p99_s`` → one replica more, on the
  service node with the fewest replicas (tainted nodes excluded); p99 under ``scale_in_below`` × target
  for 3 windows running → one fewer, from the node with the most.
- **power manager** (``power-manager/rack0``, layer power): rack power above ``budget_w`` → cap every node
  above the fair share (budget / nodes) at the fair share (with ``spare_service``, only nodes that serve
  nothing); after ``cap_hold`` windows, or once the rack is under 85% of the budget, lift every cap.
- **scheduler** (``k8s-scheduler``, layer scheduler): from ``reserve_at`` node ``reserved`` belongs to a
  high-priority job; any serving replica found there is preempted (if it is the batch node, its job is
  preempted once).
- **retry tuner** (``retry-tuner/<job>``, layer retry): once, after the first preemption's error spike,
  raises the clients' attempts from 2 to 3 (when ``retry_tuner``).
- **policy gate** (``policy-gate/rack0``, layer policy): at ``taint_at`` taints the reserved node, so the
  autoscaler stops placing there (when ``taint_at`` ≥ 0).

With a tight budget the autoscaler and the power manager fight: a cap raises latency, the autoscaler adds
a replica, which adds power, which brings the next cap; as caps are lifted latency falls and replicas are
removed again (an energy feedback loop that oscillates with the power manager's cycle). With the reserved
node among the service nodes, the autoscaler keeps placing replicas on the node the scheduler keeps
emptying; each preemption fails requests, whose retries raise the load, which calls for another replica.

Each decision records ``caused_by``, the decision that provoked it against its controller's goal, from
the simulation itself: a scale_out by the latest power cap when the p99 at full clocks would have been
within target; by a preemption in the last 3 windows otherwise; a power cap by the latest scale_out still
running when the rack without that replica's power would have been within budget and the cap lands on a
serving node; a preemption by the scale_out that placed the replica it removes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from streams.sim.queueing import Array, Served, latency, lognormal_mean, retry_flow, serve

GPUS_PER_NODE, GPUS_PER_REPLICA, REPLICAS_PER_NODE = 8, 2, 4
IDLE_W, BASE_W, DYN_W = 90.0, 250.0, 450.0  # per accelerator: no replica; replica idle; more at full use
MIN_CLOCK = 0.5  # the lowest clock fraction a power cap can impose


@dataclass
class Decision:
    window: int  # taken at the end of this window (a preemption: at its start)
    id: str
    controller: str
    layer: str
    action: str
    targets: list[str]
    parameters: dict[str, Any]
    reason: str
    expected_effect: dict[str, str]
    caused_by: str | None = None  # the decision whose effect provoked this one (they conflict), if any


@dataclass
class Window:
    """What the job and the rack looked like in one window."""

    replicas: dict[int, int]  # replica id -> node
    fresh: float
    offered: float
    retries: float
    good: float
    failed: float
    p50_s: float
    p99_s: float
    util: float  # mean over replicas
    node_power_w: Array
    caps_w: Array  # inf when uncapped


@dataclass
class ControlPlane:
    seed: int
    nodes: int  # service nodes, then the batch node (the last)
    job: str = "agent"
    window_s: float = 10.0
    load: float = 0.55  # fresh requests / capacity of the initial replicas (one per service node)
    surge_at: int = -1
    surge: float = 1.3
    slots: int = 4
    median_s: float = 0.45
    sigma: float = 0.2
    timeout_s: float = 5.0
    max_backlog_s: float = 2.0  # queue room per replica in seconds of its nominal work (admission control)
    target_p99_s: float = 1.0
    scale_in_below: float = 0.8  # of the target p99: the autoscaler removes a replica after 3 windows under it
    budget_w: float = float("inf")
    cap_hold: int = 4  # windows a cap lasts before the power manager lifts it to measure again
    spare_service: bool = False  # the power manager caps only nodes without serving replicas
    batch_w: float = 8 * 600.0  # the batch node's demand
    reserve_at: int = -1
    reserved: int = 0
    taint_at: int = -1
    retry_tuner: bool = False
    cooldown: dict[str, int] = field(default_factory=lambda: {"autoscaler": 3, "power": 4})
    draws: int = 128

    @property
    def service_nodes(self) -> int:
        return self.nodes - 1

    def run(self, windows: int) -> tuple[list[Window], list[Decision]]:
        return _Run(self).go(windows)


def _rate(p: ControlPlane) -> float:
    """Requests/s one replica serves at full clocks."""
    return p.slots / lognormal_mean(p.median_s, p.sigma)


@dataclass
class _Run:
    """The state of one run; ``go`` steps it window by window."""

    plane: ControlPlane
    replicas: dict[int, int] = field(default_factory=dict)  # replica id -> node
    backlog: dict[int, float] = field(default_factory=dict)
    placed_by: dict[int, str] = field(default_factory=dict)  # replica -> the scale_out that placed it
    caps: Array = field(default_factory=lambda: np.zeros(0))
    cap_decision: str | None = None
    capped_at: int = 0
    tainted: set[int] = field(default_factory=set)
    attempts: int = 2
    retry_in: Array = field(default_factory=lambda: np.zeros(4))
    last: dict[str, int] = field(default_factory=dict)
    low_for: int = 0
    next_id: int = 0
    decisions: list[Decision] = field(default_factory=list)

    def go(self, windows: int) -> tuple[list[Window], list[Decision]]:
        p = self.plane
        self.replicas = {i: i for i in range(p.service_nodes)}
        self.backlog = dict.fromkeys(self.replicas, 0.0)
        self.next_id = p.service_nodes
        self.caps = np.full(p.nodes, np.inf)
        return [self._window(w) for w in range(windows)], self.decisions

    def _window(self, w: int) -> Window:
        p = self.plane
        rng = np.random.default_rng([p.seed, w])
        swing = (1 + 0.1 * math.sin(2 * math.pi * w / 90)) * (p.surge if 0 <= p.surge_at <= w else 1.0)
        fresh = float(p.load * p.service_nodes * _rate(p) * p.window_s * swing * (1 + 0.03 * rng.normal()))
        z = rng.standard_normal((p.service_nodes * REPLICAS_PER_NODE, p.draws))
        e = rng.exponential(size=z.shape)
        offered = self.retry_in.copy()
        offered[1] = fresh
        offered[self.attempts + 1 :] = 0.0
        lost = self._preempt(w) if 0 <= p.reserve_at <= w else 0.0
        if not self.replicas:  # everything was preempted: the autoscaler starts one on a free node
            self.replicas[self.next_id], self.backlog[self.next_id] = self._free_nodes()[0], 0.0
            self.next_id += 1
        ids = sorted(self.replicas)
        nodes = np.array([self.replicas[i] for i in ids], dtype=int)
        total = float(offered.sum())
        arrivals = np.full(len(ids), total / max(len(ids), 1))
        clock, power = self._power(nodes, arrivals)
        uncapped = None
        if (clock < 1).any():  # what the latency would have been without the caps (to tell who provoked whom)
            full = self._serve(ids, arrivals, np.ones(len(ids)), z, e, commit=False)[0]
            uncapped = float(np.quantile(full, 0.99))
        lat, win, late = self._serve(ids, arrivals, clock, z, e)
        timeouts = float(win.rejected.sum() + (win.admitted * late).sum()) + lost
        self.retry_in, failed = retry_flow(offered, timeouts, self.attempts)
        p50, p99 = (float(np.quantile(lat, q)) for q in (0.5, 0.99))
        window = Window(dict(self.replicas), fresh, total, total - fresh, float((win.admitted * (1 - late)).sum()),
                        failed, p50, p99, float(win.util.mean()), power, self.caps.copy())  # fmt: skip
        self._autoscale(w, window, uncapped)
        self._power_manager(w, window, arrivals[0] if ids else 0.0)
        if p.retry_tuner and lost and self.attempts == 2:
            self._decide(w, f"retry-policy-{p.job}-{w}", f"retry-tuner/{p.job}", "retry", "retry_policy",
                         [f"service:{p.job}"], {"max_attempts": 3, "previous_max_attempts": 2},
                         "error rate spiked: one more attempt per request",
                         {"metric": "goodput", "direction": "up"})  # fmt: skip
            self.attempts = 3
        if w == p.taint_at:
            self.tainted.add(p.reserved)
            self._decide(w, f"taint-n{p.reserved}-{w}", "policy-gate/rack0", "policy", "taint",
                         [f"node:n{p.reserved}"], {"taint": "reserved=llm-pretrain:NoSchedule"},
                         "keep serving replicas off the node reserved for training",
                         {"metric": "preemptions", "direction": "down"})  # fmt: skip
        return window

    def _autoscale(self, w: int, window: Window, uncapped_p99: float | None) -> None:
        p = self.plane
        self.low_for = self.low_for + 1 if window.p99_s < p.scale_in_below * p.target_p99_s else 0
        if w - self.last.get("autoscaler", -(10**9)) < p.cooldown["autoscaler"]:
            return
        count = np.bincount(list(self.replicas.values()), minlength=p.nodes)
        if window.p99_s > p.target_p99_s:
            free = self._free_nodes()
            if not free:
                return
            node = free[0]
            rid, self.next_id = self.next_id, self.next_id + 1
            cause = self.cap_decision if uncapped_p99 is not None and uncapped_p99 <= p.target_p99_s else None
            recent = [d for d in self.decisions if d.action == "preempt" and w - d.window <= 3]
            decision_id = f"hpa-{p.job}-{w}-out"
            self._decide(w, decision_id, f"hpa/{p.job}", "autoscaler", "scale_out",
                         [f"service:{p.job}", f"node:n{node}"], {"replicas": len(self.replicas) + 1,
                         "replica": f"replica:{p.job}/{rid}"}, f"p99 {window.p99_s:.2f}s above {p.target_p99_s}s",
                         {"metric": "latency_p99_s", "direction": "down"},
                         cause or (recent[-1].id if recent else None))  # fmt: skip
            self.replicas[rid], self.backlog[rid], self.placed_by[rid] = node, 0.0, decision_id
        elif self.low_for >= 3 and len(self.replicas) > 1:
            node = max(range(p.service_nodes), key=lambda n: (count[n], n))
            rid = max(i for i, n in self.replicas.items() if n == node)
            spill = self.backlog.pop(rid) / (len(self.replicas) - 1)
            del self.replicas[rid]
            for i in self.backlog:
                self.backlog[i] += spill
            self._decide(w, f"hpa-{p.job}-{w}-in", f"hpa/{p.job}", "autoscaler", "scale_in",
                         [f"service:{p.job}", f"node:n{node}"], {"replicas": len(self.replicas),
                         "replica": f"replica:{p.job}/{rid}"}, f"p99 {window.p99_s:.2f}s well under target",
                         {"metric": "replicas", "direction": "down"})  # fmt: skip
            self.low_for = 0

    def _free_nodes(self) -> list[int]:
        """Service nodes with room for a replica, fewest replicas first (where the autoscaler places)."""
        p = self.plane
        count = np.bincount(list(self.replicas.values()), minlength=p.nodes)
        free = [n for n in range(p.service_nodes) if n not in self.tainted and count[n] < REPLICAS_PER_NODE]
        return sorted(free, key=lambda n: (count[n], n))

    def _power_manager(self, w: int, window: Window, per_replica: float) -> None:
        p = self.plane
        rack = float(window.node_power_w.sum())
        if w - self.last.get("power", -(10**9)) < p.cooldown["power"]:
            return
        if rack > p.budget_w:
            fair = p.budget_w / p.nodes
            serving = set(self.replicas.values()) if p.spare_service else set()
            capped = [n for n in range(p.nodes)
                      if window.node_power_w[n] > fair and self.caps[n] > fair and n not in serving]  # fmt: skip
            if not capped:
                return
            self.caps[capped] = fair
            decision_id = f"power-cap-{w}"
            self._decide(w, decision_id, "power-manager/rack0", "power", "power_cap",
                         [f"node:n{n}" for n in capped], {"cap_w": round(fair, 1)},
                         f"rack at {rack:.0f} W, budget {p.budget_w:.0f} W", {"metric": "power_w", "direction": "down"},
                         self._added_power(rack, per_replica, capped))  # fmt: skip
            self.cap_decision, self.capped_at = decision_id, w
        elif np.isfinite(self.caps).any() and (rack < 0.85 * p.budget_w or 0 < p.cap_hold <= w - self.capped_at):
            lifted = np.flatnonzero(np.isfinite(self.caps)).tolist()
            self.caps[:] = np.inf
            why = "well under budget" if rack < 0.85 * p.budget_w else f"cap held {p.cap_hold} windows: measuring again"
            self._decide(w, f"power-uncap-{w}", "power-manager/rack0", "power", "power_uncap",
                         [f"node:n{n}" for n in lifted], {}, f"rack at {rack:.0f} W, {why}",
                         {"metric": "latency_p99_s", "direction": "down"})  # fmt: skip
            self.cap_decision = None

    def _added_power(self, rack: float, per_replica: float, capped: list[int]) -> str | None:
        """The scale_out whose replica alone pushed the rack over budget (the latest one still running), when
        the cap lands on nodes that serve (so it works against the autoscaler's goal)."""
        p = self.plane
        if not set(capped) & set(self.replicas.values()):
            return None
        util = min(1.0, per_replica / (_rate(p) * p.window_s))
        added = GPUS_PER_REPLICA * (BASE_W - IDLE_W + DYN_W * util)
        live = [self.placed_by[i] for i in sorted(self.replicas) if i in self.placed_by]
        return live[-1] if live and rack - added <= p.budget_w else None

    def _decide(self, w: int, id: str, controller: str, layer: str, action: str, targets: list[str],
                parameters: dict[str, Any], reason: str, effect: dict[str, str], caused_by: str | None = None,
                at_start: bool = False) -> None:  # fmt: skip
        self.last[layer] = w
        self.decisions.append(Decision(w - 1 if at_start else w, id, controller, layer, action, targets, parameters,
                                       reason, effect, caused_by))  # fmt: skip

    def _preempt(self, w: int) -> float:
        """The scheduler empties the reserved node; returns the requests that failed with its replicas."""
        p = self.plane
        gone = sorted(i for i, n in self.replicas.items() if n == p.reserved)
        if w == p.reserve_at and p.reserved == p.service_nodes:  # the batch node: its job makes room
            self._decide(w, f"preempt-n{p.reserved}-{w}", "k8s-scheduler", "scheduler", "preempt",
                         [f"node:n{p.reserved}", "job:batch-etl"], {"for_job": "llm-pretrain", "priority": 1000},
                         f"node n{p.reserved} is reserved for llm-pretrain",
                         {"metric": "pending_s", "direction": "down"}, at_start=True)  # fmt: skip
        if not gone:
            return 0.0
        lost = sum(self.backlog.pop(i) for i in gone) + p.slots * len(gone)  # the queue and what was running
        culprit = next((self.placed_by[i] for i in reversed(gone) if i in self.placed_by), None)
        for i in gone:
            del self.replicas[i]
        self._decide(w, f"preempt-n{p.reserved}-{w}", "k8s-scheduler", "scheduler", "preempt",
                     [f"node:n{p.reserved}", *(f"replica:{p.job}/{i}" for i in gone)],
                     {"for_job": "llm-pretrain", "priority": 1000}, f"node n{p.reserved} is reserved for llm-pretrain",
                     {"metric": "pending_s", "direction": "down"}, culprit, at_start=True)  # fmt: skip
        return lost

    def _power(self, nodes: Array, arrivals: Array) -> tuple[Array, Array]:
        """(clock fraction per replica, power per node): demand at full clocks, clamped by the caps."""
        p = self.plane
        util = np.minimum(1.0, arrivals / (_rate(p) * p.window_s))
        idle = GPUS_PER_NODE * IDLE_W
        above = np.bincount(nodes, weights=GPUS_PER_REPLICA * (BASE_W - IDLE_W + DYN_W * util), minlength=p.nodes)
        above[-1] = p.batch_w - idle
        share = np.maximum(0.0, self.caps - idle) / np.maximum(above, 1e-9)
        clock = np.clip(np.sqrt(np.minimum(1.0, share)), MIN_CLOCK, 1.0)
        return clock[nodes], idle + above * clock**2

    def _serve(self, ids: list[int], arrivals: Array, clock: Array, z: Array, e: Array,
               commit: bool = True) -> tuple[Array, Served, Array]:  # fmt: skip
        """(latency draws, the window, share of each replica's requests past the client timeout)."""
        p = self.plane
        mean = lognormal_mean(p.median_s, p.sigma) / clock
        backlog = np.array([self.backlog[i] for i in ids])
        room = np.full(len(ids), p.max_backlog_s * _rate(p))
        win = serve(backlog, arrivals, p.slots / mean, mean, p.slots, math.exp(p.sigma**2) - 1, room, p.window_s)
        if commit:
            self.backlog.update(zip(ids, win.backlog.tolist(), strict=True))
        n = len(ids)
        lat = latency(win.queued_s[:, None], win.mgc_s[:, None], (p.median_s / clock)[:, None], p.sigma, z[:n], e[:n])
        return lat, win, (lat > p.timeout_s).mean(axis=1)
