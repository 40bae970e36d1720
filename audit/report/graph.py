"""The operator graph as an SVG: one column per kind of element (controllers, replicas, stages,
communicators, ranks, devices, nodes, switches), the attributed elements red and labelled. A kind with
more elements than fit (1,024 ranks) is sampled: the highlighted ones, then their neighbours, then the
first by id; the column header says how many are shown."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from audit.report import svg

ORDER = ("controller", "job", "dp", "stage", "comm", "rank", "device", "node", "switch", "link", "service", "op")
MAX_PER_KIND = 40
LABELLED = 12  # columns with at most this many elements show every label
ROW = 14


def _natural(text: str) -> list[Any]:
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", text)]


def _kind(element: str) -> str:
    return element.partition(":")[0]


def _short(element: str) -> str:
    rest = element.partition(":")[2]
    return rest.rpartition("/")[2] if "/" in rest and _kind(element) != "controller" else rest


def graph_svg(nodes: Sequence[str], edges: Sequence[Mapping[str, str]], hot: Mapping[str, int]) -> str:
    neighbours: dict[str, set[str]] = defaultdict(set)
    for e in edges:
        neighbours[e["src"]].add(e["dst"])
        neighbours[e["dst"]].add(e["src"])
    by_kind: dict[str, list[str]] = defaultdict(list)
    for n in nodes:
        by_kind[_kind(n)].append(n)
    kinds = [k for k in ORDER if k in by_kind] + sorted(k for k in by_kind if k not in ORDER)
    near = {m for h in hot for m in neighbours.get(h, ())}
    shown: dict[str, list[str]] = {}
    for k in kinds:
        members = sorted(by_kind[k], key=_natural)
        first = [n for n in members if n in hot] + [n for n in members if n in near and n not in hot]
        rest = [n for n in members if n not in hot and n not in near]
        shown[k] = sorted((first + rest)[:MAX_PER_KIND], key=_natural)
    tallest = max(len(v) for v in shown.values())
    height = 50 + ROW * tallest
    step = (svg.WIDTH - 120) / max(len(kinds) - 1, 1)
    pos: dict[str, tuple[float, float]] = {}
    parts = []
    for i, k in enumerate(kinds):
        x = 60 + i * step
        total, column = len(by_kind[k]), shown[k]
        header = f"{k} ({len(column)}/{total})" if len(column) < total else f"{k} ({total})"
        parts.append(f'<text x="{x:.1f}" y="14" text-anchor="middle" font-weight="bold">{escape(header)}</text>')
        offset = 34 + (tallest - len(column)) * ROW / 2
        for j, n in enumerate(column):
            pos[n] = (x, offset + j * ROW)
    for e in edges:
        a, b = pos.get(e["src"]), pos.get(e["dst"])
        if a is None or b is None:
            continue
        touching = e["src"] in hot or e["dst"] in hot
        stroke = f'stroke="{svg.HIGHLIGHT}" stroke-opacity="0.8"' if touching else 'stroke="#999" stroke-opacity="0.25"'
        parts.append(
            f'<line x1="{a[0]:.1f}" y1="{a[1]:.1f}" x2="{b[0]:.1f}" y2="{b[1]:.1f}" {stroke}>'
            f"<title>{escape(e['src'])} {escape(e['kind'])} {escape(e['dst'])}</title></line>"
        )
    for k in kinds:
        column = shown[k]
        for n in column:
            x, y = pos[n]
            is_hot = n in hot
            fill, r = (svg.HIGHLIGHT, 6) if is_hot else ("#888", 3.5)
            title = (
                f"{n} — cause #{hot[n]}" if is_hot and hot[n] < 99 else (f"{n} — named by a finding" if is_hot else n)
            )
            parts.append(
                f'<circle class="mark" cx="{x:.1f}" cy="{y:.1f}" r="{r}" fill="{fill}"><title>{escape(title)}'
                "</title></circle>"
            )
            if is_hot or len(column) <= LABELLED:
                weight = ' font-weight="bold"' if is_hot else ""
                parts.append(
                    f'<text x="{x + 8:.1f}" y="{y + 4:.1f}" font-size="10"{weight} '
                    f'fill="{fill if is_hot else "#444"}">{escape(_short(n)[:18])}</text>'
                )
    return svg.svg_doc(height, parts, [("attributed / named by a finding", svg.HIGHLIGHT), ("other element", "#888")])
