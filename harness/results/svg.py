"""Small self-contained SVG line charts (no JavaScript, no network). Every label is escaped."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from html import escape

COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
          "#17becf")


def line_chart(series: Mapping[str, Sequence[tuple[float, float]]], title: str, x_label: str, y_label: str,
               width: int = 760, height: int = 360) -> str:
    """Lines of (x, y) points, one per named series, with axes, ticks and a legend."""
    points = [p for pts in series.values() for p in pts]
    if not points:
        return f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="40"><text x="4" y="20">' \
               f"{escape(title)}: no data</text></svg>"
    x0, x1 = min(p[0] for p in points), max(p[0] for p in points)
    y0, y1 = min(0.0, min(p[1] for p in points)), max(p[1] for p in points)
    x1, y1 = (x1 if x1 > x0 else x0 + 1), (y1 if y1 > y0 else y0 + 1)
    left, right, top, bottom = 70, 200, 30, 50
    pw, ph = width - left - right, height - top - bottom

    def sx(x: float) -> float:
        return left + (x - x0) / (x1 - x0) * pw

    def sy(y: float) -> float:
        return top + ph - (y - y0) / (y1 - y0) * ph

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
           f'font-size="11"><title>{escape(title)}</title>',
           f'<text x="{left}" y="18" font-size="13">{escape(title)}</text>',
           f'<line x1="{left}" y1="{top + ph}" x2="{left + pw}" y2="{top + ph}" stroke="#333"/>',
           f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + ph}" stroke="#333"/>',
           f'<text x="{left + pw / 2}" y="{height - 10}" text-anchor="middle">{escape(x_label)}</text>',
           f'<text x="14" y="{top + ph / 2}" transform="rotate(-90 14 {top + ph / 2})" text-anchor="middle">'
           f"{escape(y_label)}</text>"]
    for i in range(5):
        yv, xv = y0 + (y1 - y0) * i / 4, x0 + (x1 - x0) * i / 4
        out.append(f'<text x="{left - 6}" y="{sy(yv) + 4:.1f}" text-anchor="end">{yv:.3g}</text>')
        out.append(f'<text x="{sx(xv):.1f}" y="{top + ph + 16}" text-anchor="middle">{xv:.3g}</text>')
    for k, (name, pts) in enumerate(series.items()):
        color = COLORS[k % len(COLORS)]
        path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in sorted(pts))
        out.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{path}"/>')
        out += [f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="2.5" fill="{color}"/>' for x, y in pts]
        ly = top + 14 * k
        out.append(f'<rect x="{left + pw + 10}" y="{ly}" width="10" height="10" fill="{color}"/>')
        out.append(f'<text x="{left + pw + 24}" y="{ly + 9}">{escape(name[:28])}</text>')
    out.append("</svg>")
    return "\n".join(out)


def bar_chart(bars: Sequence[tuple[str, float]], title: str, x_label: str, width: int = 900) -> str:
    """Horizontal bars (label, value in 0..1 or any positive scale), one per row."""
    if not bars:
        return f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="40"><text x="4" y="20">' \
               f"{escape(title)}: no data</text></svg>"
    label_w, row_h, top = 420, 16, 30
    height = top + row_h * len(bars) + 30
    top_value = max(1.0, max(v for _, v in bars))
    scale = (width - label_w - 60) / top_value
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
           f'font-size="11"><title>{escape(title)}</title><text x="4" y="18" font-size="13">{escape(title)}</text>']
    for i, (label, value) in enumerate(bars):
        y = top + i * row_h
        out.append(f'<text x="{label_w - 6}" y="{y + 11}" text-anchor="end">{escape(label[:70])}</text>')
        out.append(f'<rect x="{label_w}" y="{y + 2}" width="{max(value, 0) * scale:.1f}" height="{row_h - 4}" '
                   f'fill="{COLORS[0]}"/>')
        out.append(f'<text x="{label_w + max(value, 0) * scale + 4:.1f}" y="{y + 11}">{100 * value:.1f}%</text>')
    out.append(f'<text x="{label_w}" y="{height - 8}">{escape(x_label)}</text></svg>')
    return "\n".join(out)


def loglog_chart(points: Mapping[str, Sequence[tuple[float, float]]], roofs: Mapping[str, tuple[float, float]],
                 title: str, x_label: str, y_label: str, width: int = 760, height: int = 400) -> str:
    """Log-log scatter with roofline ceilings: min(peak TFLOP/s, bandwidth TB/s x intensity) per device."""
    pts = [p for s in points.values() for p in s if p[0] > 0 and p[1] > 0]
    if not pts:
        return f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="40"><text x="4" y="20">' \
               f"{escape(title)}: no data</text></svg>"
    xs = [p[0] for p in pts] + [peak / bw for peak, bw in roofs.values()]
    ys = [p[1] for p in pts] + [peak for peak, _ in roofs.values()]
    lx0, lx1 = math.floor(math.log10(min(xs))) - 0.5, math.ceil(math.log10(max(xs))) + 0.5
    ly0, ly1 = math.floor(math.log10(min(ys))) - 0.5, math.ceil(math.log10(max(ys))) + 0.3
    left, right, top, bottom = 70, 220, 30, 50
    pw, ph = width - left - right, height - top - bottom

    def sx(x: float) -> float:
        return left + (math.log10(x) - lx0) / (lx1 - lx0) * pw

    def sy(y: float) -> float:
        return top + ph - (math.log10(y) - ly0) / (ly1 - ly0) * ph

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
           f'font-size="11"><title>{escape(title)}</title><text x="{left}" y="18" font-size="13">{escape(title)}'
           f'</text><rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#333"/>',
           f'<text x="{left + pw / 2}" y="{height - 10}" text-anchor="middle">{escape(x_label)} (log)</text>',
           f'<text x="14" y="{top + ph / 2}" transform="rotate(-90 14 {top + ph / 2})" text-anchor="middle">'
           f"{escape(y_label)} (log)</text>"]
    for e in range(math.ceil(lx0), math.floor(lx1) + 1):
        out.append(f'<text x="{sx(10.0**e):.1f}" y="{top + ph + 16}" text-anchor="middle">1e{e}</text>')
    for e in range(math.ceil(ly0), math.floor(ly1) + 1):
        out.append(f'<text x="{left - 6}" y="{sy(10.0**e) + 4:.1f}" text-anchor="end">1e{e}</text>')
    for k, (device, (peak, bw)) in enumerate(roofs.items()):
        knee, x_lo, x_hi = peak / bw, 10.0**lx0, 10.0**lx1
        line = [(x_lo, bw * x_lo), (knee, peak), (x_hi, peak)]
        path = " ".join(f"{sx(x):.1f},{sy(max(y, 10.0**ly0)):.1f}" for x, y in line)
        out.append(f'<polyline fill="none" stroke="#555" stroke-dasharray="5,3" points="{path}"/>')
        out.append(f'<text x="{left + pw + 10}" y="{top + 200 + 14 * k}">roof: {escape(device[:26])}</text>')
    for k, (name, series) in enumerate(points.items()):
        color = COLORS[k % len(COLORS)]
        out += [f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="{color}"/>' for x, y in series if x > 0 < y]
        out.append(f'<rect x="{left + pw + 10}" y="{top + 14 * k}" width="10" height="10" fill="{color}"/>')
        out.append(f'<text x="{left + pw + 24}" y="{top + 14 * k + 9}">{escape(name[:28])}</text>')
    out.append("</svg>")
    return "\n".join(out)
