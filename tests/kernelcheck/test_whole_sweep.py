"""The whole sweep of `xmfu kernels`: every Triton kernel x autotune config x dtype x default target (sm80, sm90,
sm100, gfx942, gfx950) compiled by the installed Triton on this CPU, once for the module (about 25 minutes of 2 cores:
make test-kernels, outside make test-slow and CI's time).

It fails where a config spills, passes its part's shared memory, or multiplies bf16, fp16 or fp8 without the part's
own matrix instructions (mma.sync on sm90+), unless findings.MARKS names the case: known (a fix under way, with its
issue) or accepted (with the reason). A mark no compile needs any more fails too, so the list stays true; and
docs/kernels.md must be this sweep's page."""

from __future__ import annotations

import pytest

from xmfu.harness.kernelcheck import page
from xmfu.harness.kernelcheck import sweep as sweeping
from xmfu.harness.kernelcheck.catalog import ENTRIES
from xmfu.harness.kernelcheck.findings import MARKS
from xmfu.harness.kernelcheck.targets import DEFAULT_TARGETS, TARGETS

pytestmark = [pytest.mark.sweep, pytest.mark.long, pytest.mark.slow(seconds=3600)]


@pytest.fixture(scope="module")
def whole() -> sweeping.Sweep:
    return sweeping.run(tuple(TARGETS[t] for t in DEFAULT_TARGETS), tuple(ENTRIES.values()), jobs=2)


def test_every_compile_is_clean_or_a_named_case(whole):
    assert whole.target_notes() == {}  # the installed Triton compiles for every default target
    assert sweeping.failing(whole) == []


def test_each_mark_still_covers_a_compile(whole):
    """The known cases, by the mark that names them: each must still occur (a fixed one's mark must go)."""
    used = {p.mark for r in whole.rows for p in r.problems if p.mark}
    assert [m.label() for m in MARKS if m.label() not in used] == []


def test_the_page_of_the_manual_is_this_sweep(whole):
    current = page.PAGE.read_text()
    if f"by Triton {whole.triton} on a CPU" not in current:
        pytest.skip(f"docs/kernels.md is another Triton's sweep; this is {whole.triton} (a compat profile)")
    assert page.markdown(whole) == current, "docs/kernels.md is out of date: python -m xmfu.harness.kernelcheck.page"
