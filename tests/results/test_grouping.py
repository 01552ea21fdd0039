"""Which rows make one line, and labels that tell them apart; text that is safe to hand to matplotlib."""

from __future__ import annotations

from tests.results.rows import attention_row, matmul_row
from xmfu.harness.results.analysis import grouping
from xmfu.harness.results.bundle.reader import typed
from xmfu.harness.results.plots import figures


def _flops(r):
    return r.flops


def _attention(*args, **fields):
    return typed(attention_row(*args, **fields))


def _matmul(*args, **fields):
    return typed(matmul_row(*args, **fields))


def test_a_series_never_joins_causal_and_non_causal_or_fwd_and_fwd_bwd():
    rows = [_attention(s, c, m) for s in (128, 256, 512) for c in (False, True) for m in ("fwd", "fwd_bwd")]
    found = grouping.series(rows, _flops)
    assert sorted(found) == ["fwd causal", "fwd non-causal", "fwd_bwd causal", "fwd_bwd non-causal"]
    for label, part in found.items():
        assert [r.params["seq_q"] for r in part] == [128, 256, 512]  # along the size axis only
        assert len({(r.params["causal"], r.params["mode"]) for r in part}) == 1, label


def test_a_grid_of_shapes_is_split_so_no_line_joins_two_shapes():
    rows = [_matmul(m, n, k) for m in (256, 512) for n in (256, 512) for k in (256, 512, 1024)]
    found = grouping.series(rows, _flops)
    assert sorted(found) == ["m=256 n=256", "m=256 n=512", "m=512 n=256", "m=512 n=512"]
    assert all([r.params["k"] for r in part] == [256, 512, 1024] for part in found.values())
    square = grouping.series([_matmul(s, s, s) for s in (256, 512, 1024)], _flops)
    assert list(square) == ["torch"] and len(square["torch"]) == 3  # one shape family: one line


def test_one_case_in_two_runs_is_two_points_never_a_line_doubling_back():
    rows = [_matmul(s, s, s, run_id=f"20261123T000000Z-matmul-bf16-{run}") for run in ("aaa111", "bbb222")
            for s in (256, 512)]
    found = grouping.series(rows, _flops)
    assert sorted(found) == ["torch (run aaa111)", "torch (run bbb222)"]
    labels = grouping.labels([r for r in rows if r.params["m"] == 256])
    assert labels == ["torch (run aaa111)", "torch (run bbb222)"]  # bars that would read the same


def test_labels_name_what_varies_and_titles_what_is_shared():
    rows = [_attention(256, True, "fwd"), _attention(256, False, "fwd", backend="triton")]
    assert grouping.labels(rows) == ["torch_sdpa causal", "triton non-causal"]  # fwd is in the title
    names = [*grouping.IDENTITY, *grouping.param_names(rows)]
    assert grouping.constant(rows, names).startswith("bf16, GPU A, fwd, batch=1, seq_q=256, seq_kv=256")


def test_text_for_matplotlib():
    assert figures.text("a $x$ b") == r"a \$x\$ b"  # no mathtext
    assert figures.text("_hidden") == " _hidden"  # matplotlib's legend drops labels starting with "_"
    assert figures.text("a\x00b\nc") == "a b c"
    cut = figures.text("x" * 30 + "-unique-end", 20)
    assert len(cut) == 20 and cut.endswith("e-end") and "…" in cut
    assert figures.shown(list(range(240)), 60, "rows") == (list(range(60)), "showing 60 of 240 rows")
    assert figures.byte_label(1024) == "1 KiB" and figures.byte_label(3 * 2**20) == "3 MiB"
    assert figures.plain_number(0.001) == "0.001" and figures.plain_number(1e6) == "1e6"
