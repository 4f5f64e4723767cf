"""A small SVG line-chart writer for the documentation's figures (no plotting dependency).

One :class:`Chart`: a title (and subtitle), axes with ticks (linear, or log by decades with
2 and 5 between them when the range is short), one polyline per :class:`Series` with a
marker at each point (its value in a tooltip), a legend and notes under the plot, and the
caption in ``<desc>`` (what made the figure, on which machine). White background; sized
for a page about 700 px wide.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from xml.sax.saxutils import escape, quoteattr

__all__ = ["PALETTE", "Chart", "Series", "number", "render"]

# Okabe-Ito: tells apart for colour-blind readers too.
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9")
MARKERS = ("circle", "square", "triangle", "diamond")
FONT = "DejaVu Sans, Helvetica, Arial, sans-serif"


@dataclass
class Series:
    """One line: ``points`` as (x, y); ``dashed`` for a line drawn in dashes; the colour and
    marker (one of :data:`MARKERS`) the series' place in the chart's list gives, if unset."""

    label: str
    points: Sequence[tuple[float, float]]
    dashed: bool = False
    color: str | None = None
    marker: str | None = None

    def look(self, index: int) -> tuple[str, str]:
        return (
            self.color or PALETTE[index % len(PALETTE)],
            self.marker or MARKERS[index % len(MARKERS)],
        )


@dataclass
class Chart:
    title: str
    x_label: str
    y_label: str
    series: list[Series]
    subtitle: str = ""
    desc: str = ""
    notes: list[str] = field(default_factory=list)
    log_x: bool = True
    log_y: bool = False
    width: int = 720
    plot_height: int = 300


def number(value: float) -> str:
    """A tick label: thousands separated, no trailing zeros (``0.05``, ``2.5``, ``10,000``)."""
    if value == 0:
        return "0"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:,.3f}".rstrip("0").rstrip(".")


def _nice_step(span: float, count: int = 5) -> float:
    raw = span / count
    power = 10.0 ** math.floor(math.log10(raw))
    return next(m * power for m in (1.0, 2.0, 2.5, 5.0, 10.0) if m * power >= raw)


def linear_ticks(low: float, high: float) -> tuple[float, float, list[float]]:
    """An axis from 0 (or below, for negative data) to a round value a little above ``high``."""
    low = min(0.0, low)
    step = _nice_step((high - low) or 1.0)
    top = math.ceil(high / step) * step
    if top - high < 0.05 * (top - low):  # room above the highest point
        top += step
    bottom = math.floor(low / step) * step
    ticks = [bottom + i * step for i in range(round((top - bottom) / step) + 1)]
    return bottom, top, ticks


def log_ticks(low: float, high: float) -> tuple[float, float, list[float]]:
    """An axis from and to 1, 2 or 5 times a power of ten around the data, ticked at the 1s,
    2s and 5s; over 3 decades or more, from and to whole decades, ticked at each."""
    first, last = math.floor(math.log10(low)) - 1, math.ceil(math.log10(high)) + 1
    nice = [m * 10.0**e for e in range(first, last + 1) for m in (1.0, 2.0, 5.0)]
    bottom = max(v for v in nice if v <= low * 1.0001)
    top = min(v for v in nice if v >= high * 0.9999 and v > bottom)
    if math.log10(top / bottom) < 3:
        return bottom, top, [v for v in nice if bottom <= v <= top]
    decades = [v for v in nice if _is_decade(v)]
    bottom = max(v for v in decades if v <= low * 1.0001)
    top = min(v for v in decades if v >= high * 0.9999)
    return bottom, top, [v for v in decades if bottom <= v <= top]


def _is_decade(value: float) -> bool:
    return abs(math.log10(value) - round(math.log10(value))) < 1e-9


class _Scale:
    def __init__(self, low: float, high: float, start: float, end: float, log: bool) -> None:
        self.log = log
        self.low, self.high = (math.log10(low), math.log10(high)) if log else (low, high)
        self.start, self.end = start, end

    def __call__(self, value: float) -> float:
        v = math.log10(value) if self.log else value
        return self.start + (v - self.low) / (self.high - self.low) * (self.end - self.start)


def _text(x: float, y: float, body: str, size: int = 12, **attrs: str) -> str:
    extra = "".join(f" {k.replace('_', '-')}={quoteattr(v)}" for k, v in attrs.items())
    return f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}"{extra}>{escape(body)}</text>'


def _line(x1: float, y1: float, x2: float, y2: float, stroke: str, extra: str = "") -> str:
    return (
        f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="{stroke}"{extra}/>'
    )


def _marker(kind: str, x: float, y: float, color: str, tip: str) -> str:
    r = 4.0
    title = f"<title>{escape(tip)}</title>"
    style = f'fill="{color}" stroke="white" stroke-width="1"'
    if kind == "circle":
        return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{r + 0.5}" {style}>{title}</circle>'
    if kind == "square":
        box = f'x="{x - r:.1f}" y="{y - r:.1f}" width="{2 * r}" height="{2 * r}"'
        return f"<rect {box} {style}>{title}</rect>"
    shape = (
        [(x, y - r - 1.5), (x + r + 1, y + r), (x - r - 1, y + r)]
        if kind == "triangle"
        else [(x, y - r - 1.5), (x + r + 1.5, y), (x, y + r + 1.5), (x - r - 1.5, y)]
    )
    points = " ".join(f"{px:.1f},{py:.1f}" for px, py in shape)
    return f'<polygon points="{points}" {style}>{title}</polygon>'


def _wrap(text: str, width_px: float, size: int) -> list[str]:
    return textwrap.wrap(text, max(20, int(width_px / (size * 0.56)))) or [""]


def render(chart: Chart) -> str:
    """The chart as a standalone SVG document."""
    points = [p for s in chart.series for p in s.points]
    if not points:
        raise ValueError(f"{chart.title}: no points to plot")
    xs, ys = [x for x, _ in points], [y for _, y in points]
    x0, x1, x_ticks = log_ticks(min(xs), max(xs)) if chart.log_x else linear_ticks(min(xs), max(xs))
    y0, y1, y_ticks = log_ticks(min(ys), max(ys)) if chart.log_y else linear_ticks(min(ys), max(ys))
    left, right, top = 72, chart.width - 24, 30 + (22 if chart.subtitle else 0) + 14
    bottom = top + chart.plot_height
    sx = _Scale(x0, x1, left + 12, right - 12, chart.log_x)  # markers clear of the frame
    pad = 10 if chart.log_y else 0  # a log axis need not start at a point's value
    sy = _Scale(y0, y1, bottom - pad, top + pad, chart.log_y)
    out: list[str] = []
    add = out.append
    add(_text(chart.width / 2, 26, chart.title, 17, text_anchor="middle", font_weight="bold"))
    if chart.subtitle:
        add(_text(chart.width / 2, 46, chart.subtitle, 12, text_anchor="middle", fill="#444"))
    frame = f'x="{left}" y="{top}" width="{right - left}" height="{bottom - top}"'
    add(f'<rect {frame} fill="none" stroke="#999"/>')
    for t in y_ticks:
        y = sy(t)
        add(_line(left, y, right, y, "#e6e6e6"))
        add(_text(left - 7, y + 4, number(t), 11, text_anchor="end", fill="#333"))
    for t in x_ticks:
        x = sx(t)
        add(_line(x, top, x, bottom, "#e6e6e6"))
        add(_line(x, bottom, x, bottom + 5, "#999"))
        add(_text(x, bottom + 18, number(t), 11, text_anchor="middle", fill="#333"))
    middle = (top + bottom) / 2
    turn = f"rotate(-90 16 {middle:.1f})"
    add(_text(16, middle, chart.y_label, 12, text_anchor="middle", transform=turn))
    add(_text((left + right) / 2, bottom + 38, chart.x_label, 12, text_anchor="middle"))
    for i, s in enumerate(chart.series):
        color, kind = s.look(i)
        dash = ' stroke-dasharray="6 4"' if s.dashed else ""
        line = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in s.points)
        add(f'<polyline points="{line}" fill="none" stroke="{color}" stroke-width="2.2"{dash}/>')
        for x, y in s.points:
            add(_marker(kind, sx(x), sy(y), color, f"{s.label}: {number(x)} -> {number(y)}"))
    y = bottom + 62.0
    for i, s in enumerate(chart.series):  # the legend, one row each, under the plot
        color, kind = s.look(i)
        dash = ' stroke-dasharray="6 4"' if s.dashed else ""
        add(_line(left, y - 4, left + 30, y - 4, color, f' stroke-width="2.2"{dash}'))
        add(_marker(kind, left + 15, y - 4, color, s.label))
        add(_text(left + 40, y, s.label, 12))
        y += 19
    y += 4
    for note in chart.notes:
        for line_text in _wrap(note, chart.width - left - 16, 11):
            add(_text(left, y, line_text, 11, fill="#555"))
            y += 15
    height = math.ceil(y + 4)
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{chart.width}" height="{height}" '
        f'viewBox="0 0 {chart.width} {height}" font-family="{FONT}">'
    )
    return "\n".join(
        [
            head,
            f"<title>{escape(chart.title)}</title>",
            f"<desc>{escape(chart.desc)}</desc>",
            f'<rect width="{chart.width}" height="{height}" fill="white"/>',
            *out,
            "</svg>",
            "",
        ]
    )
