"""Inline SVG charts, written as text in Python: no JavaScript and no library to fetch, so a report opens
offline in any browser (and in mail or wiki previews that strip scripts). Tooltips are SVG ``<title>``s.

Every chart marks its drawn data elements with ``class="mark"`` (the browser test counts them).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape

WIDTH = 900
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f")
FINDING = "#d62728"
DECISION = "#1f4e9c"
HIGHLIGHT = "#d62728"
MAX_DOTS = 600  # a line of more points than this is drawn without a dot (and tooltip) per point


def fmt(v: float) -> str:
    """A number for axis ticks and tooltips (3 significant digits, SI-style for small and large)."""
    if v == 0 or not math.isfinite(v):
        return "0" if v == 0 else str(v)
    a = abs(v)
    if a >= 1e6 or a < 1e-3:
        return f"{v:.3g}"
    return f"{v:,.3f}".rstrip("0").rstrip(".") if a < 10 else f"{v:,.1f}".removesuffix(".0")


def clock(t: float) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(t))


def ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if hi <= lo:
        return [lo]
    step = 10 ** math.floor(math.log10((hi - lo) / n))  # (scalars: Python's power)
    for m in (1, 2, 5, 10):
        if (hi - lo) / (step * m) <= n:
            step *= m
            break
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step) + 1)]


@dataclass
class Frame:
    """A plot area with linear x (event time, s) and y scales."""

    x0: float
    x1: float
    y0: float
    y1: float
    height: int = 260
    left: int = 70
    right: int = 20
    top: int = 16
    bottom: int = 34
    parts: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.x1 <= self.x0:
            self.x1 = self.x0 + 1.0
        if self.y1 <= self.y0:
            self.y1 = self.y0 + (abs(self.y0) or 1.0)

    def x(self, v: float) -> float:
        return self.left + (v - self.x0) / (self.x1 - self.x0) * (WIDTH - self.left - self.right)

    def y(self, v: float) -> float:
        return self.top + (1 - (v - self.y0) / (self.y1 - self.y0)) * (self.height - self.top - self.bottom)

    def axes(self, y_label: str, time_axis: bool = True) -> None:
        bottom, right = self.height - self.bottom, WIDTH - self.right
        self.parts.append(f'<line x1="{self.left}" y1="{bottom}" x2="{right}" y2="{bottom}" stroke="#555"/>')
        self.parts.append(f'<line x1="{self.left}" y1="{self.top}" x2="{self.left}" y2="{bottom}" stroke="#555"/>')
        for v in ticks(self.y0, self.y1):
            y = self.y(v)
            self.parts.append(
                f'<line x1="{self.left}" y1="{y:.1f}" x2="{right}" y2="{y:.1f}" stroke="#eee"/>'
                f'<text x="{self.left - 6}" y="{y + 4:.1f}" text-anchor="end">{fmt(v)}</text>'
            )
        for v in ticks(self.x0, self.x1):
            label = clock(v) if time_axis else fmt(v)
            self.parts.append(f'<text x="{self.x(v):.1f}" y="{bottom + 16}" text-anchor="middle">{label}</text>')
        self.parts.append(
            f'<text x="14" y="{self.top + (bottom - self.top) / 2:.0f}" text-anchor="middle" '
            f'transform="rotate(-90 14 {self.top + (bottom - self.top) / 2:.0f})">{escape(y_label)}</text>'
        )

    def line(self, xs: Sequence[float], ys: Sequence[float], color: str, name: str, dash: str = "") -> None:
        pts = [(x, y) for x, y in zip(xs, ys, strict=True) if y is not None and math.isfinite(y)]
        if not pts:
            return
        path = " ".join(f"{self.x(x):.1f},{self.y(y):.1f}" for x, y in pts)
        style = f' stroke-dasharray="{dash}"' if dash else ""
        self.parts.append(
            f'<polyline class="mark" points="{path}" fill="none" stroke="{color}" stroke-width="2"'
            f"{style}><title>{escape(name)}</title></polyline>"
        )
        for x, y in pts if len(pts) <= MAX_DOTS else ():  # a long series: the line alone keeps the page small
            self.parts.append(
                f'<circle class="mark" cx="{self.x(x):.1f}" cy="{self.y(y):.1f}" r="3" fill="{color}">'
                f"<title>{escape(name)} {clock(x)}: {fmt(y)}</title></circle>"
            )

    def band(self, xs: Sequence[float], lo: Sequence[float], hi: Sequence[float], color: str, name: str) -> None:
        if not xs:
            return
        upper = [f"{self.x(x):.1f},{self.y(y):.1f}" for x, y in zip(xs, hi, strict=True)]
        lower = [f"{self.x(x):.1f},{self.y(y):.1f}" for x, y in reversed(list(zip(xs, lo, strict=True)))]
        self.parts.append(
            f'<polygon class="mark" points="{" ".join(upper + lower)}" fill="{color}" '
            f'fill-opacity="0.18" stroke="none"><title>{escape(name)}</title></polygon>'
        )

    def marker(self, t: float, color: str, label: str, row: int | None) -> None:
        """A dashed vertical line at ``t``, its label in a tooltip and, unless ``row`` is None (too many
        markers to read), written on text row ``row``."""
        if not self.x0 <= t <= self.x1:
            return
        x, bottom = self.x(t), self.height - self.bottom
        text = (
            ""
            if row is None
            else f'<text x="{x + 3:.1f}" y="{self.top + 10 + 11 * row}" fill="{color}" font-size="10">'
            f"{escape(label[:40])}</text>"
        )
        self.parts.append(
            f'<g class="mark"><line x1="{x:.1f}" y1="{self.top}" x2="{x:.1f}" y2="{bottom}" '
            f'stroke="{color}" stroke-dasharray="4 3"/>{text}<title>{escape(label)}</title></g>'
        )

    def rect(self, x0: float, x1: float, y0: float, y1: float, color: str, title: str) -> None:
        left, right = sorted((self.x(x0), self.x(x1)))
        top, bottom = sorted((self.y(y0), self.y(y1)))
        self.parts.append(
            f'<rect class="mark" x="{left:.1f}" y="{top:.1f}" width="{max(right - left, 1):.1f}" '
            f'height="{max(bottom - top, 0.5):.1f}" fill="{color}"><title>{escape(title)}</title></rect>'
        )

    def svg(self, legend: Sequence[tuple[str, str]] = ()) -> str:
        return svg_doc(self.height, self.parts, legend)


def svg_doc(height: int, parts: Sequence[str], legend: Sequence[tuple[str, str]] = ()) -> str:
    items = []
    x = 80
    for name, color in legend:
        items.append(
            f'<rect x="{x}" y="{height + 6}" width="10" height="10" fill="{color}"/>'
            f'<text x="{x + 14}" y="{height + 15}">{escape(name)}</text>'
        )
        x += 24 + 7 * len(name)
    total = height + (24 if legend else 0)
    return (
        f'<svg viewBox="0 0 {WIDTH} {total}" width="{WIDTH}" '
        f'height="{total}" font-family="sans-serif" font-size="11">{"".join(parts)}{"".join(items)}</svg>'
    )


def color(i: int) -> str:
    return PALETTE[i % len(PALETTE)]
