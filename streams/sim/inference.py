"""Inference pipeline under an SLA: router → prefill replicas → decode replicas, one time window at a time.

Fresh requests arrive at a daily-shaped rate (a fraction ``load`` of the decode capacity); the router
spreads every window's requests evenly over the prefill replicas, then over the decode replicas (round
robin). Each stage is a set of replicas of ``streams.sim.queueing`` (M/G/c wait below saturation, a
bounded FIFO backlog above it). A request's latency is router + prefill (wait + service) + decode (wait +
service), drawn for a fixed number of requests per decode replica per window (the same draws with or
without causes: the counterfactual has the same noise).

The client gives up after ``timeout_s`` and, while it has attempts left under the current retry policy
(``max_attempts``), sends the request again in the next window; a rejected request (full backlog) is
retried the same way. The server keeps serving requests whose client has given up. That is the feedback
loop of a retry storm: a trigger (``capacity_drop``: every decode replica's service time × magnitude for a
few windows) fills the backlogs, waits exceed the timeout, retries multiply the offered load, the
backlogs stay full, so waits stay above the timeout after the trigger has ended. Whether the storm
outlives its trigger (metastable) depends on the load and the retry policy: with enough attempts the
retried load alone exceeds the capacity; with few it drains. ``slow_replica`` (one replica's service time
× magnitude) inflates the p99 while the p50 stays where it was.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from streams import fpmath
from streams.sim.queueing import Array, Served, latency, lognormal_mean, retry_flow, serve

QUANTILES = (0.5, 0.99)


@dataclass(frozen=True)
class Slowdown:
    """``kind``: slow_replica (decode replica ``replica``) | capacity_drop (every decode replica); service
    time × ``magnitude`` in windows ``start`` ≤ w < ``end``."""

    kind: str
    magnitude: float
    start: int
    end: int
    replica: int = -1

    def active(self, window: int) -> bool:
        return self.start <= window < self.end


@dataclass
class Stats:
    """One window of the pipeline (counts are requests in the window)."""

    fresh: float
    offered: float  # fresh + retries
    retries: float
    good: float  # answered before the client's timeout
    timeouts: float  # attempts that timed out or were rejected
    failed: float  # requests given up (out of attempts)
    wasted: float  # served after their client had given up
    max_attempts: int
    latency: dict[str, tuple[float, float]]  # stage -> (p50, p99) seconds; stage "e2e" end to end
    backlog: dict[str, Array]  # stage -> per replica
    util: dict[str, Array]


@dataclass
class ServingPipeline:
    seed: int
    prefill: int
    decode: int
    window_s: float = 1.0
    load: float = 0.4  # fresh requests / decode capacity (before the daily swing)
    timeout_s: float = 4.0
    slots: int = 16  # requests a replica serves at once
    decode_median_s: float = 0.8
    prefill_median_s: float = 0.12
    sigma: float = 0.35
    router_s: float = 0.003
    max_backlog_s: float = 8.0  # queue room per replica, in seconds of its nominal work
    max_attempts: int = 2
    draws: int = 256  # latency draws per decode replica and window
    slowdowns: list[Slowdown] = field(default_factory=list)
    policy: dict[int, int] = field(default_factory=dict)  # window -> max_attempts from then on (decisions)

    @property
    def decode_rate(self) -> float:
        """Nominal requests/s of one decode replica."""
        return self.slots / lognormal_mean(self.decode_median_s, self.sigma)

    def run(self, windows: int, healed: bool = False) -> list[Stats]:
        """Every window in order (state carries over). ``healed``: no slowdown, no policy change."""
        backlog = {"prefill": np.zeros(self.prefill), "decode": np.zeros(self.decode)}
        retry_in = np.zeros(self.max_attempts + 1 + max(self.policy.values(), default=0))  # by attempt number
        attempts, out = self.max_attempts, []
        for w in range(windows):
            if not healed and w in self.policy:
                attempts = self.policy[w]
            stats, backlog, retry_in = self._window(w, backlog, retry_in, attempts, healed)
            out.append(stats)
        return out

    def _window(self, w: int, backlog: dict[str, Array], retry_in: Array, attempts: int,
                healed: bool) -> tuple[Stats, dict[str, Array], Array]:  # fmt: skip
        rng = np.random.default_rng([self.seed, w])
        swing = 1 + 0.1 * math.sin(2 * math.pi * w / 120)
        fresh = float(self.load * self.decode * self.decode_rate * self.window_s * swing * (1 + 0.03 * rng.normal()))
        offered = retry_in.copy()
        offered[1] = fresh
        offered[attempts + 1 :] = 0.0  # a policy that allows fewer attempts drops those retries
        total = float(offered.sum())
        factor = np.ones(self.decode)
        for s in [] if healed else [s for s in self.slowdowns if s.active(w)]:
            factor[s.replica if s.kind == "slow_replica" else slice(None)] *= s.magnitude
        pre = self._stage("prefill", backlog, np.full(self.prefill, total / self.prefill), np.ones(self.prefill))
        dec = self._stage("decode", backlog, np.full(self.decode, pre.admitted.sum() / self.decode), factor)
        shape = (self.decode, self.draws)
        z_pre, z_dec, z_router = (rng.standard_normal(shape) for _ in range(3))
        e_pre, e_dec = rng.exponential(size=shape), rng.exponential(size=shape)
        pick = rng.integers(0, self.prefill, size=shape)  # which prefill replica served each draw
        router = self.router_s * fpmath.exp(0.3 * z_router)
        prefill = latency(pre.queued_s[pick], pre.mgc_s[pick], self.prefill_median_s, self.sigma, z_pre, e_pre)
        decode = latency(dec.queued_s[:, None], dec.mgc_s[:, None], self.decode_median_s * factor[:, None],
                         self.sigma, z_dec, e_dec)  # fmt: skip
        e2e = router + prefill + decode
        late = (e2e > self.timeout_s).mean(axis=1)  # per decode replica
        timeouts = float(pre.rejected.sum() + dec.rejected.sum() + (dec.admitted * late).sum())
        retry_next, failed = retry_flow(offered, timeouts, attempts)
        stages = {"router": router, "prefill": prefill, "decode": decode, "e2e": e2e}
        quantiles = {name: (float(np.quantile(x, QUANTILES[0])), float(np.quantile(x, QUANTILES[1])))
                     for name, x in stages.items()}  # fmt: skip
        stats = Stats(
            fresh, total, total - fresh, float((dec.admitted * (1 - late)).sum()), timeouts, failed,
            float((dec.admitted * late).sum()), attempts, quantiles,
            {"prefill": pre.backlog, "decode": dec.backlog}, {"prefill": pre.util, "decode": dec.util},
        )  # fmt: skip
        return stats, {"prefill": pre.backlog, "decode": dec.backlog}, retry_next

    def _stage(self, name: str, backlog: dict[str, Array], arrivals: Array, factor: Array) -> Served:
        median = self.prefill_median_s if name == "prefill" else self.decode_median_s
        mean = lognormal_mean(median, self.sigma) * factor
        nominal = self.slots / lognormal_mean(median, self.sigma)
        room = np.full(len(factor), self.max_backlog_s * nominal)
        cv2 = math.exp(self.sigma**2) - 1
        return serve(backlog[name], arrivals, self.slots / mean, mean, self.slots, cv2, room, self.window_s)
