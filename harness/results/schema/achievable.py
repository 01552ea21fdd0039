"""What keeps a row's `mfu_vs_achievable` from being a plain fraction of the achievable figure (issue 42 item 2).

The achievable figure is the best row of a mamf sweep, timed `flushed` (a cache flush before every call, as
mamf-finder's published table is measured) or `warm` (back-to-back calls). A row timed the other way does not
divide like for like: on the project's 2-core CPU warm calls read 6.7-8x the flushed ones (issue 42), and the
main phase of `experiment=mamf` (warm) read 297.6% "of achievable" against its flushed sweep. So the engine states
the caveats in the row (`mfu_vs_achievable_reason`), `xmfu validate` re-derives them from the row's own fields, and the
quality flags (`method unmatched`, `above achievable`: harness/results/analysis/flags.py) show them wherever the
figure is shown; the end table never prints such a figure as a plain percentage.
"""

from __future__ import annotations

METHODS = ("flushed", "warm")  # how a time is taken (the settings' ACHIEVABLE_METHODS, a row's achievable_method)
UNMATCHED, ABOVE = "method unmatched", "above achievable"
WHY_UNMATCHED = {  # (this row's method, the achievable figure's): why the two do not divide like for like
    ("warm", "flushed"): "warm back-to-back calls read higher than flushed ones (timing.flush_l2=true times this "
                         "phase as mamf.method=flushed does)",
    ("flushed", "warm"): "flushed calls read lower than warm ones (mamf.method=flushed measures the achievable "
                         "figure as this row is timed)"}


def timed_method(flush_l2_bytes: object, timed: bool) -> str | None:
    """How a row's own calls were timed, from its timer: `flushed` where a cache flush preceded each (the timer
    states the flushed byte count; a flush that did not apply is a sentence), else `warm`; None: not timed."""
    if not timed:
        return None
    return "flushed" if type(flush_l2_bytes) is int else "warm"


def caveats(ratio: float | None, timed: str | None, achieved: str | None) -> list[tuple[str, str]]:
    """(flag, why) for each caveat of `mfu_vs_achievable` = `ratio`: a row timed by another method than the
    achievable figure was measured by (`achieved`), or by one not stated; a ratio above 1."""
    if ratio is None:
        return []
    out = []
    if achieved not in METHODS:
        out.append((UNMATCHED, "the achievable figure's method is not stated (achievable_method=flushed|warm): "
                               "like for like unknown"))
    elif timed in METHODS and timed != achieved:
        out.append((UNMATCHED, f"timed {timed} against an achievable figure measured {achieved}, not like for "
                               f"like: {WHY_UNMATCHED[(timed, achieved)]}"))
    if ratio > 1:
        out.append((ABOVE, "above 100% of the achievable figure, the best row of a sweep: a shape or backend it "
                           "did not time, noise (see both CIs), or a method that reads higher"))
    return out


def reason(ratio: float | None, timed: str | None, achieved: str | None) -> str | None:
    """The row's `mfu_vs_achievable_reason`: the caveats, or None for a like-for-like fraction."""
    return "; ".join(f"{flag}: {why}" for flag, why in caveats(ratio, timed, achieved)) or None
