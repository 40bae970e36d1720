"""Queueing arithmetic shared by the serving simulators, vectorised over replicas, one time window at a time.

A replica serves ``slots`` requests at once; a request's service time is log-normal (``median``,
``sigma``). Below saturation the mean queueing wait follows Sakasegawa's M/G/c approximation; above it the
excess piles up as a fluid backlog (served first come, first served) whose wait is backlog / rate. The
backlog is bounded: what does not fit is rejected at once. Requests whose client has given up stay in the
backlog and are still served (the server cannot tell): that wasted work is what keeps a retry storm alive.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from streams import fpmath

Array = npt.NDArray[np.float64]


def lognormal_mean(median: float, sigma: float) -> float:
    return median * math.exp(sigma**2 / 2)


def mgc_wait(rho: Array, slots: int, mean_s: Array, cv2: float) -> Array:
    """Mean wait in queue of an M/G/c queue at utilisation ``rho`` (< 1), after Sakasegawa (1977)."""
    rho = np.clip(rho, 0.0, 0.95)  # above that the fluid backlog is the queue
    waiting = fpmath.power(rho, math.sqrt(2 * (slots + 1)))
    return np.asarray(mean_s * (1 + cv2) / 2 * waiting / (slots * (1 - rho)), dtype=float)


@dataclass(frozen=True)
class Served:
    """What one window did to each replica (arrays over replicas; counts are requests)."""

    admitted: Array
    rejected: Array
    served: Array
    backlog: Array  # at the end of the window
    queued_s: Array  # mean wait behind the backlog of a request admitted in this window
    mgc_s: Array  # mean M/G/c wait on top of that (exponentially distributed)
    util: Array


def serve(backlog: Array, arrivals: Array, rate: Array, mean_s: Array, slots: int, cv2: float,
          max_backlog: Array, window_s: float) -> Served:  # fmt: skip
    """One window of replicas with ``rate`` requests/s capacity, ``arrivals`` requests offered and room for
    ``max_backlog`` waiting requests."""
    capacity = rate * window_s
    room = np.maximum(0.0, max_backlog - backlog + capacity)
    admitted = np.minimum(arrivals, room)
    served = np.minimum(backlog + admitted, capacity)
    after = backlog + admitted - served
    queued = (backlog + after) / 2 / rate
    mgc = mgc_wait(arrivals / capacity, slots, mean_s, cv2)
    return Served(admitted, arrivals - admitted, served, after, queued, mgc, served / capacity)


def latency(queued_s: Array, mgc_s: Array, median_s: Array | float, sigma: float, z: Array, e: Array) -> Array:
    """Latency draws of admitted requests: the wait behind the backlog, an exponential M/G/c wait of mean
    ``mgc_s`` (``e``: standard exponential draws) and a log-normal service (``z``: standard normal draws)."""
    return queued_s + mgc_s * e + median_s * fpmath.exp(sigma * z)


def retry_flow(offered: Array, failed: float, attempts: int) -> tuple[Array, float]:
    """``offered[a]``: requests on their a-th attempt this window (index 0 unused); ``failed`` of all of
    them timed out or were rejected, in proportion across attempt numbers. Returns the next window's
    retries by attempt number (those with attempts left under ``attempts``) and the requests given up."""
    total = float(offered.sum())
    failing = offered * (failed / total if total else 0.0)
    retries = np.zeros_like(offered)
    retries[2 : attempts + 1] = failing[1:attempts]
    return retries, float(failing[attempts:].sum())
