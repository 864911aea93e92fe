"""Plots drawn on the server as inline SVG (no script library, nothing fetched): lines, bars.

Each function returns SVG markup (a ``markupsafe.Markup``: the numbers and the escaped labels are the
only things put into it) sized by a viewBox, so it scales with the page, a phone's included.
"""
from __future__ import annotations

from markupsafe import Markup, escape

__all__ = ["line_plot", "bar_plot", "sparkline"]

_COLOURS = ("#2a6fdb", "#d9822b", "#c23030", "#0f9960", "#8f398f", "#5c7080")


def _fmt(value: float) -> str:
    if abs(value) >= 1e6:
        return f"{value / 1e6:.1f}M"
    if abs(value) >= 1e3:
        return f"{value / 1e3:.1f}k"
    return f"{value:.3g}"


def sparkline(values: list[float], *, width: int = 120, height: int = 24, colour: str = _COLOURS[0]) -> Markup:
    """A small line of ``values`` (the Queues page's rates)."""
    if len(values) < 2:
        return Markup(f'<svg class="spark" viewBox="0 0 {width} {height}" role="img" aria-label="no samples yet">'
                      f'<line x1="0" y1="{height - 1}" x2="{width}" y2="{height - 1}" stroke="#ccc"/></svg>')
    top = max(max(values), 1e-9)
    step = width / (len(values) - 1)
    points = " ".join(f"{i * step:.1f},{height - 1 - (v / top) * (height - 3):.1f}" for i, v in enumerate(values))
    return Markup(f'<svg class="spark" viewBox="0 0 {width} {height}" role="img" aria-label="peak {_fmt(top)}/s">'
                  f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{points}"/></svg>')


def line_plot(series: dict[str, list[tuple[float, float]]], *, title: str, x_label: str, y_label: str,
              width: int = 640, height: int = 260) -> Markup:
    """Lines of (x, y) points, one a series, with axes, ticks and a legend."""
    left, right, top, bottom = 56, 12, 44, 36
    points = [point for values in series.values() for point in values]
    if not points:
        return Markup(f'<p class="empty">{escape(title)}: nothing to plot</p>')
    x_max = max(x for x, _ in points)
    x_min = min(min(x for x, _ in points), x_max - 1)       # one moment alone: a unit of axis before it
    y_max = max(max(y for _, y in points), 1e-9)
    plot_w, plot_h = width - left - right, height - top - bottom

    def sx(x: float) -> float:
        return left + (x - x_min) / (x_max - x_min) * plot_w

    def sy(y: float) -> float:
        return top + plot_h - y / y_max * plot_h

    parts = [f'<svg class="plot" viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}">',
             f'<text x="{left}" y="16" class="plot-title">{escape(title)}</text>',
             f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}" class="axis"/>',
             f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + plot_h}" class="axis"/>']
    for tick in range(5):
        y = y_max * tick / 4
        parts.append(f'<text x="{left - 4}" y="{sy(y) + 4:.1f}" text-anchor="end" class="tick">{_fmt(y)}</text>')
        parts.append(f'<line x1="{left}" y1="{sy(y):.1f}" x2="{left + plot_w}" y2="{sy(y):.1f}" class="grid"/>')
    for tick in range(5):
        x = x_min + (x_max - x_min) * tick / 4
        parts.append(f'<text x="{sx(x):.1f}" y="{top + plot_h + 14}" text-anchor="middle" class="tick">{_fmt(x)}</text>')
    parts.append(f'<text x="{left + plot_w / 2:.0f}" y="{height - 4}" text-anchor="middle" class="tick">'
                 f'{escape(x_label)}</text>')
    parts.append(f'<text x="12" y="{top + plot_h / 2:.0f}" transform="rotate(-90 12 {top + plot_h / 2:.0f})" '
                 f'text-anchor="middle" class="tick">{escape(y_label)}</text>')
    for index, (name, values) in enumerate(series.items()):
        colour = _COLOURS[index % len(_COLOURS)]
        if len(values) == 1:
            x, y = values[0]
            parts.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="{colour}"/>')
        else:
            line = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in values)
            parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{line}"/>')
        parts.append(f'<rect x="{left + 8 + index * 130}" y="{top - 17}" width="10" height="3" fill="{colour}"/>'
                     f'<text x="{left + 22 + index * 130}" y="{top - 13}" class="tick">{escape(name)}</text>')
    parts.append("</svg>")
    return Markup("".join(parts))


def bar_plot(bars: list[tuple[str, float]], *, title: str, unit: str = "", width: int = 640,
             stacked: list[tuple[str, list[float]]] | None = None) -> Markup:
    """Horizontal bars (label, value); with ``stacked`` [(series name, one value a bar)], stacked bars."""
    if not bars:
        return Markup(f'<p class="empty">{escape(title)}: nothing to plot</p>')
    row_h, left, top = 22, 230, 28
    height = top + row_h * len(bars) + 24
    totals = [sum(values[i] for _, values in stacked) for i in range(len(bars))] if stacked else [v for _, v in bars]
    top_value = max(max(totals), 1e-9)
    plot_w = width - left - 80
    parts = [f'<svg class="plot" viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}">',
             f'<text x="4" y="16" class="plot-title">{escape(title)}</text>']
    for index, (label, value) in enumerate(bars):
        y = top + index * row_h
        shown = label if len(label) <= 36 else label[:35] + "\u2026"
        parts.append(f'<text x="{left - 6}" y="{y + 14}" text-anchor="end" class="tick">{escape(shown)}</text>')
        x = left
        for series_index, (_name, values) in enumerate(stacked or [("", [v for _, v in bars])]):
            w = values[index] / top_value * plot_w
            parts.append(f'<rect x="{x:.1f}" y="{y + 3}" width="{max(w, 0):.1f}" height="{row_h - 8}" '
                         f'fill="{_COLOURS[series_index % len(_COLOURS)]}"/>')
            x += w
        parts.append(f'<text x="{x + 4:.1f}" y="{y + 14}" class="tick">{_fmt(totals[index])}{escape(unit)}</text>')
    if stacked:
        for series_index, (name, _values) in enumerate(stacked):
            parts.append(f'<rect x="{left + series_index * 110}" y="{height - 14}" width="10" height="8" '
                         f'fill="{_COLOURS[series_index % len(_COLOURS)]}"/><text x="{left + 14 + series_index * 110}" '
                         f'y="{height - 6}" class="tick">{escape(name)}</text>')
    parts.append("</svg>")
    return Markup("".join(parts))
