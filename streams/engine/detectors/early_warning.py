"""Early warning of a regime shift: critical slowing down in one series, before it tips.

A system that is about to lose its stable state recovers from small perturbations ever more slowly: the
series' fluctuations grow (rolling variance up) and are remembered longer (lag-1 autocorrelation up)
while its level may not have moved yet. Every ``every`` points the detector takes the last ``window``
points, removes their least-squares line (so a trend or a level is not taken for either) and computes
the two indicators; it keeps the last ``trend`` indicator values and raises an ``early_warning`` once
both rise together: Kendall's tau of each against time at least ``tau``, the variance at least
``min_ratio`` times its value at the start of that span, the autocorrelation up by ``min_rise`` and at
least ``min_ac`` (a deviation is still mostly there one point later: the recovery has become slow).

A step in the series also raises both indicators while it is in the window, and the change detector
needs a few points to confirm it: so a warning is held for ``min_side + 2`` points and dropped if a shift
is found meanwhile. A level shift of more than ``jump`` times the spread of the window before it
(``changepoint.ChangePoint`` on the same series; slowing down wanders further and further, not that far)
is the regime shift itself, or another one: the indicators are forgotten and learned again after it.

The finding's ``start`` is where the rise began (the first indicator in the span), its ``end`` the point
that confirmed the warning (``raised_at`` in the evidence: the one that raised it); ``evidence`` also has
both taus, the indicators then and now and ``since_points``. The lead time of a warning is how long
before the shift it came: scored against the simulator's ``transition_step`` (``serving-saturation``).
One warning per rise: the detector re-arms once either tau has fallen below zero. State: at most
``window`` points, ``trend`` pairs of indicators and the change detector's window.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field, replace

import numpy as np

from streams.engine.detectors.base import Detector
from streams.engine.detectors.changepoint import ChangePoint
from streams.engine.findings import Finding


def kendall_tau(y: np.ndarray) -> float:
    """Kendall's tau (tau-a) of ``y`` against its order: concordant minus discordant pairs over all pairs."""
    n = len(y)
    if n < 3:
        return 0.0
    sign = np.sign(y[None, :] - y[:, None])
    return float(np.triu(sign, 1).sum()) / (n * (n - 1) / 2)


def indicators(x: np.ndarray) -> tuple[float, float]:
    """(variance, lag-1 autocorrelation) of ``x`` around its least-squares line."""
    t = np.arange(len(x), dtype=np.float64)
    slope, intercept = np.polyfit(t, x, 1)
    r = x - (intercept + slope * t)
    var = float(np.mean(r * r))
    if var <= 0.0:
        return 0.0, 0.0
    return var, float(np.mean(r[1:] * r[:-1]) / var)


@dataclass
class EarlyWarning(Detector):
    """One series of one subject (``subject``: an operator-graph element id; ``metric``: its name)."""

    subject: str
    metric: str = "value"
    window: int = 40
    trend: int = 30
    every: int = 2
    tau: float = 0.6
    min_ratio: float = 2.0
    min_rise: float = 0.2
    jump: float = 4.0
    min_ac: float = 0.7
    job: str = ""  # the key whose state it holds
    _points: deque[float] = field(default_factory=deque)
    _var: deque[float] = field(default_factory=deque)
    _ac: deque[float] = field(default_factory=deque)
    _at: deque[float] = field(default_factory=deque)  # time of each indicator
    _count: int = 0
    _armed: bool = True
    _shifts: ChangePoint = field(default_factory=lambda: ChangePoint(1))
    _pending: Finding | None = None  # raised, waiting to be sure it was not a shift's own first points
    _wait: int = 0

    def _forget(self) -> None:
        """A regime shift happened: the indicators before it say nothing about the new regime."""
        for buf in (self._points, self._var, self._ac, self._at):
            buf.clear()
        self._armed, self._pending = True, None

    def update(self, time: float, value: float) -> Finding | None:
        if not np.isfinite(value):
            return None
        shifts = self._shifts.update(np.zeros(1, np.int64), np.array([value]))
        if any(
            c.kind == "level" and abs(c.after - c.before) > self.jump * self._spread(c.detected - c.at) for c in shifts
        ):
            self._forget()  # and a warning still waiting for confirmation was the shift itself
            return None
        found = self._observe(time, value)
        if found is not None:
            self._pending, self._wait = found, 0
            return None
        if self._pending is None:
            return None
        self._wait += 1
        if self._wait < self._shifts.min_side + 2:  # no shift found for as long as one needs to be confirmed
            return None
        pending, self._pending = self._pending, None
        return replace(pending, end=time, evidence={**pending.evidence, "raised_at": pending.end})

    def _spread(self, after: int) -> float:
        """Standard deviation of the window before its last ``after`` points (those after a change)."""
        before = list(self._points)[: max(0, len(self._points) - after)]
        return float(np.std(before)) if len(before) > 2 else 0.0

    def _observe(self, time: float, value: float) -> Finding | None:
        self._points.append(value)
        if len(self._points) > self.window:
            self._points.popleft()
        self._count += 1
        if len(self._points) < self.window or self._count % self.every:
            return None
        var, ac = indicators(np.fromiter(self._points, np.float64, self.window))
        for buf, v in ((self._var, var), (self._ac, ac), (self._at, time)):
            buf.append(v)
            if len(buf) > self.trend:
                buf.popleft()
        if len(self._var) < self.trend:
            return None
        tau_var = kendall_tau(np.fromiter(self._var, np.float64))
        tau_ac = kendall_tau(np.fromiter(self._ac, np.float64))
        if not self._armed:
            self._armed = min(tau_var, tau_ac) < 0.0
            return None
        rising = tau_var >= self.tau and tau_ac >= self.tau
        grown = (
            self._var[-1] >= self.min_ratio * max(self._var[0], 1e-300) and self._ac[-1] - self._ac[0] >= self.min_rise
        )
        slow = self._ac[-1] >= self.min_ac  # a deviation still mostly there one point later
        if not (rising and grown and slow):
            return None
        self._armed = False
        return Finding(
            kind="early_warning",
            subjects=(self.subject,),
            series=self.metric,
            start=self._at[0],
            end=time,
            severity=round(self._var[-1] / max(self._var[0], 1e-300), 6),
            evidence={
                "metric": self.metric,
                "tau_variance": round(tau_var, 6),
                "tau_autocorrelation": round(tau_ac, 6),
                "variance_then": self._var[0],
                "variance_now": self._var[-1],
                "autocorrelation_then": round(self._ac[0], 6),
                "autocorrelation_now": round(self._ac[-1], 6),
                "since_points": self.trend * self.every,
            },
        )
