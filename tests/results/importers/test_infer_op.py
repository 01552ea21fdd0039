"""An nccl-tests / rccl-tests log that does not name its test (issue 42 item 4: 6 of 12 real logs were refused until
`--op`): its op follows from the printed busbw/algbw (the bus factor F(n): 2(n-1)/n all_reduce, (n-1)/n all_gather,
reduce_scatter, alltoall, gather, scatter, 1 broadcast, reduce, sendrecv) and the line's redop, root and size over
count (nccl-tests src/<op>.cu at v2.19.6). It is inferred, said in every row, and refused only where it is ambiguous."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from xmfu.harness.cli.main import main
from xmfu.harness.results.bundle.imported import write
from xmfu.harness.results.bundle.validator import load_bundle
from xmfu.harness.results.importers import LogError, nccl_tests

LOGS = Path(__file__).parent / "logs"
GB200 = LOGS / "nccl-tests_gb200-nvl72_72ranks.txt"  # real: no command line, only its last `Rank` line


def _rows(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "cases.jsonl").read_text().splitlines()]


def test_a_real_log_that_names_no_test_is_imported_as_all_reduce_and_says_so(tmp_path, capsys):
    """Before: refused until --op. busbw/algbw 846.82/429.37 = 1.972 = 2 x 71/72, redop sum, root -1, size =
    count x 4 B: all_reduce, and nothing else."""
    assert main(["import", "nccl-tests", str(GB200), "--results-dir", str(tmp_path)]) == 0
    folder = Path(capsys.readouterr().out.strip().splitlines()[-1].removeprefix("bundle: "))
    rows = _rows(folder)
    assert {r["params"]["op"] for r in rows} == {"all_reduce"}
    said = {r["notes"]["op_inferred"] for r in rows}
    assert len(said) == 1 and said.pop().startswith(
        "all_reduce inferred (the log names no test): printed busbw/algbw 1.972 at 8589934592 B is 2(n-1)/n at "
        "n = 72 ranks (= 1.972)")
    assert all(r["imported"]["disagreements"] == [] for r in rows)
    assert load_bundle(folder).problems == []  # xmfu validate infers it again from the kept log
    assert main(["table", str(folder)]) == 0
    assert "ranks: 72 (op inferred from the log's lines: notes.op_inferred)" in capsys.readouterr().out


@pytest.mark.parametrize(("name", "ranks"), [("nccl-tests_h100_16ranks.txt", 16), ("rccl-tests_mi300x_8ranks.txt", 8)])
def test_the_other_real_logs_give_their_own_op_when_their_name_is_cut(name, ranks):
    """Each real log with its `all_reduce_perf` cut out: the same op, inferred, as the named log gives."""
    text = (LOGS / name).read_text()
    named = nccl_tests.parse(text)
    cut = nccl_tests.parse(text.replace("all_reduce_perf", "a.out"))
    assert (named.op, named.op_inferred) == ("all_reduce", None)
    assert (cut.op, cut.ranks, cut.entries) == ("all_reduce", ranks, named.entries) and cut.op_inferred


def _as(text: str, op: str, n: int, redop: str, root: str, per_rank: bool) -> str:
    """The h100 log's table lines rewritten as `op`'s would print (its bus factor, redop, root and count): a planted
    table, no real log of these ops that names none being at hand."""
    factor = nccl_tests.OPS[op][1](n)
    out = []
    for line in text.replace("all_reduce_perf", "a.out").splitlines():
        w = line.split()
        if len(w) == 13 and w[0].isdigit():
            count = int(w[0]) // 4 // (n if per_rank else 1)
            halves = [f"{w[5]} {w[6]} {float(w[6]) * factor:.2f} 0", f"{w[9]} {w[10]} {float(w[10]) * factor:.2f} 0"]
            line = f"{w[0]} {count} float {redop} {root} {halves[0]} {halves[1]}"
        out.append(line)
    return "\n".join(out)


@pytest.mark.parametrize(("op", "redop", "root", "per_rank", "found"), [
    ("reduce_scatter", "sum", "-1", True, "reduce_scatter"),
    ("broadcast", "none", "0", False, "broadcast"),
    ("reduce", "sum", "0", False, "reduce"),
    ("all_gather", "none", "-1", True, None),  # all_gather and alltoall print alike
    ("gather", "none", "0", True, None),  # gather and scatter print alike
])
def test_each_op_is_told_by_its_lines_and_ambiguity_is_refused(op, redop, root, per_rank, found):
    text = _as((LOGS / "nccl-tests_h100_16ranks.txt").read_text(), op, 16, redop, root, per_rank)
    if found:
        assert nccl_tests.parse(text).op == found
        return
    with pytest.raises(LogError, match=r"fit alike.*--op"):
        nccl_tests.parse(text)


def test_a_log_no_op_fits_is_refused_and_a_named_op_still_imports(tmp_path):
    """busbw moved on one line of the cut log: no bus factor fits every line, so no op is guessed; --op imports
    it, the moved figure listed as a disagreement."""
    text = GB200.read_text().replace("  423.16  834.57", "  423.16  874.57")
    with pytest.raises(LogError, match="no op's bus factor"):
        nccl_tests.parse(text)
    log = tmp_path / "moved.txt"
    log.write_text(text)
    rows = _rows(write("nccl-tests", log, tmp_path, ["xmfu"], "t", "all_reduce"))
    assert sum(bool(r["imported"]["disagreements"]) for r in rows) == 1
    assert all("op_inferred" not in r["notes"] for r in rows)
