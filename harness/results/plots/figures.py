"""Matplotlib figures as inline SVG: no script, no network, text that cannot become markup.

Matplotlib draws the axes, ticks and legends (the hand-drawn SVG before it printed ticks such as 6.02/6.4/6.77
and cut labels); its SVG backend writes the figure, which is embedded in the page as it is. Text stays text
(`svg.fonttype: none`: searchable, small) and matplotlib escapes it (`&`, `<`, `>` in text; quotes too in
attributes: matplotlib/backends/backend_svg.py `_escape_cdata`, `_escape_attrib`). What it does not guard
against is done in `text()`: a `$` starts mathtext (a parse error, or a formula), a legend label starting with
`_` is dropped silently, control characters are not valid XML.
"""

from __future__ import annotations

import functools
import io
import math
import re
import textwrap
from collections.abc import Callable, Sequence
from typing import Any, ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")

WIDTH_IN = 9.0  # figure width in inches; the page scales the SVG to its column (max-width: 100%)
COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
          "#17becf")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "*")
RC = {"svg.fonttype": "none", "font.family": "sans-serif", "font.sans-serif": ["DejaVu Sans"], "font.size": 9,
      "axes.grid": True, "grid.alpha": 0.3, "axes.spines.top": False, "axes.spines.right": False,
      "legend.fontsize": 8, "legend.frameon": False}
CONTROL = re.compile(r"[\x00-\x1f\x7f]+")
NO_METADATA = {"Format": None, "Type": None, "Creator": None, "Date": None}  # no URLs, no date: stable output


def _matplotlib() -> Any:
    try:
        import matplotlib
        from matplotlib.figure import Figure
    except ImportError:
        raise RuntimeError("plots need matplotlib: pip install matplotlib") from None
    return matplotlib, Figure


def text(value: Any, limit: int = 60) -> str:
    """A label from a bundle, safe to hand to matplotlib: no mathtext, no hidden legend entry, no control
    characters, at most `limit` characters (cut in the middle, so both ends still tell labels apart)."""
    s = CONTROL.sub(" ", str(value)).strip()
    if len(s) > limit:
        keep = limit - 1
        s = s[: keep - keep // 2] + "…" + s[len(s) - keep // 2:]
    s = s.replace("$", r"\$")  # an even number of $ would otherwise be typeset as mathtext
    return " " + s if s.startswith("_") else s  # matplotlib's legend skips labels that start with "_"


LABEL_WIDTH = 40  # characters per line of a legend entry: the legend beside the axes stays narrow


def label(value: Any, width: int = LABEL_WIDTH) -> str:
    """A legend (or tick) label from a bundle, whole: safe like `text()`, and wrapped at word boundaries onto
    lines of about `width` characters, never cut (a backend or a ddp/fsdp name at the end of a long label must
    still be read: issue 30 item 11). A word longer than `width` keeps its own line whole."""
    s = CONTROL.sub(" ", str(value)).strip().replace("$", r"\$")
    s = "\n".join(textwrap.wrap(s, width, break_long_words=False, break_on_hyphens=False)) or s
    return " " + s if s.startswith("_") else s


def styled(draw: Callable[P, R]) -> Callable[P, R]:
    """Run a drawing function under the report's style (matplotlib reads most settings when an artist is
    made, so the whole drawing, not only the saving, happens inside it)."""

    @functools.wraps(draw)
    def inner(*args: P.args, **kwargs: P.kwargs) -> R:
        matplotlib, _ = _matplotlib()
        with matplotlib.rc_context(RC):
            return draw(*args, **kwargs)

    return inner


def figure(height_in: float, width_in: float = WIDTH_IN, rows: int = 1, sharex: bool = False) -> tuple[Any, Any]:
    """A new figure (not pyplot's: no global state, no GUI backend) and its axes."""
    _, Figure = _matplotlib()
    fig = Figure(figsize=(width_in, height_in), layout="constrained")
    return fig, list(fig.subplots(rows, 1, sharex=sharex, squeeze=False)[:, 0])


def svg(fig: Any, name: str) -> str:
    """The figure as an `<svg>` element for an HTML page. Every element id matplotlib writes ('figure_1',
    'patch_1', clip paths, markers) and every reference to one gets the prefix `name-`, so the ids stay
    unique in a page holding many figures; `name` also salts matplotlib's hashed ids, so the same figure gives
    the same bytes each time."""
    out = standalone_svg(fig, name)

    def prefix(tag: re.Match[str]) -> str:  # inside tags only: text content is left as it was drawn
        t = re.sub(r'\sid="([^"]+)"', rf' id="{name}-\1"', tag.group(0))
        t = re.sub(r'href="#([^"]+)"', rf'href="#{name}-\1"', t)
        return re.sub(r"url\(#([^)]+)\)", rf"url(#{name}-\1)", t)

    out = re.sub(r"<[^<>]+>", prefix, out)
    return '<svg class="plot"' + out[len("<svg"):]  # the page's CSS scales it to the column


def standalone_svg(fig: Any, name: str) -> str:
    """The figure as an SVG file of its own (keeps its width and height)."""
    matplotlib, _ = _matplotlib()
    buf = io.StringIO()
    with matplotlib.rc_context({**RC, "svg.hashsalt": f"xmfu-{name}"}):
        fig.savefig(buf, format="svg", metadata=NO_METADATA)
    out = buf.getvalue()
    return out[out.index("<svg"):]


def shown(items: Sequence[Any], limit: int, what: str) -> tuple[list[Any], str]:
    """The first `limit` items and, when some are left out, the sentence that says so."""
    if len(items) <= limit:
        return list(items), ""
    return list(items[:limit]), f"showing {limit} of {len(items)} {what}"


def note(ax: Any, *sentences: str) -> None:
    """Lines under the axes (e.g. 'showing 60 of 240 rows'), never silently dropped or merged data."""
    said = "; ".join(s for s in sentences if s)
    if said:
        ax.annotate("\n".join(textwrap.wrap(text(said, 400), 150)), xy=(0, 0), xycoords="axes fraction",
                    xytext=(0, -30), textcoords="offset points", ha="left", va="top", fontsize=8, color="#a00")


def title(fig: Any, head: str, detail: str = "") -> None:
    """A title at the figure's left edge: what is plotted, then what all its points share, wrapped to the
    figure's width (never cut)."""
    lines = [text(head, 100), *textwrap.wrap(text(detail, 400), 125)]
    fig.suptitle("\n".join(lines), x=0.005, ha="left", fontsize=9)


def log_ticks(axis: Any, label: Callable[[float], str]) -> None:
    """Log-axis tick labels from `label` (not 10^n typeset as formulas); on an axis spanning less than
    about a decade and a half, the 2x and 5x minor ticks are labelled too, so it never shows one number."""
    from matplotlib.ticker import FuncFormatter

    def minor(v: float, _: Any) -> str:
        lo, hi = sorted(axis.get_view_interval())
        lead = round(v / 10 ** math.floor(math.log10(v))) if v > 0 else 0
        return label(v) if lo > 0 and hi / lo < 30 and lead in (2, 5) else ""

    axis.set_major_formatter(FuncFormatter(lambda v, _: label(v)))
    axis.set_minor_formatter(FuncFormatter(minor))


def plain_number(v: float) -> str:
    if v == 0 or 1e-4 <= abs(v) < 1e5:
        return f"{v:g}"
    mantissa, exponent = f"{v:.0e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def byte_label(n: float) -> str:
    """1024 -> '1 KiB', 3 * 2**20 -> '3 MiB': readable ticks on a log2 byte axis."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024:
            return f"{n:g} {unit}"
        n /= 1024
    return f"{n:g} PiB"


def byte_axis(ax: Any) -> None:
    from matplotlib.ticker import FuncFormatter, LogLocator

    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(LogLocator(base=4))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: byte_label(x)))


def legend(ax: Any, count: int) -> None:
    """The legend beside the axes (never over the data), one or two columns by how many entries there are."""
    if count:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), ncols=1 if count <= 18 else 2)
