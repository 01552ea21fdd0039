"""`xmfu import` on real logs (tests/results/importers/logs, each with its source in README.md there): the bundles
validate, every re-derived busbw / TFLOP/s equals what the log printed within its printed precision, a planted
inconsistency is flagged, and malformed or truncated logs are one paragraph and exit 2."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from xmfu.harness.cli.main import main
from xmfu.harness.results.bundle.imported import write
from xmfu.harness.results.bundle.validator import load_bundle
from xmfu.harness.results.importers import LogError, mamf_finder, nccl_tests

LOGS = Path(__file__).parent / "logs"
# log -> (--op, --ranks) for logs that do not say, ranks, device, tool
NCCL = {"nccl-tests_h100_16ranks.txt": (None, None, 16, "NVIDIA H100 80GB HBM3", "nccl-tests"),
        "nccl-tests_gb200-nvl72_72ranks.txt": ("all_reduce", None, 72, "NVIDIA Graphics Device", "nccl-tests"),
        "nccl-tests_v100_all_gather_8gpus_2020.txt": (None, 8, 8, None, "nccl-tests"),
        "rccl-tests_mi300x_8ranks.txt": (None, None, 8, "AMD Instinct MI300X", "rccl-tests"),
        "rccl-tests_output-file_4gpus_2024.json": (None, None, 4, None, "rccl-tests")}
RCCL_JSON = "rccl-tests_output-file_4gpus_2024.json"


_WRITTEN: dict[str, Path] = {}


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory):
    """Each real log imported once per module (a bundle's writes are fsynced: the tests share them)."""
    def get(name: str) -> Path:
        if name not in _WRITTEN:
            op, ranks, *_ = NCCL[name]
            _WRITTEN[name] = write("nccl-tests", LOGS / name, tmp_path_factory.mktemp("imp"), ["xmfu"], "t", op, ranks)
        return _WRITTEN[name]
    return get


def _rows(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "cases.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("name", sorted(NCCL))
def test_nccl_logs_import_into_valid_bundles(imported, name: str) -> None:
    _, _, n, device, tool = NCCL[name]
    folder = imported(name)
    loaded = load_bundle(folder)
    assert loaded.problems == [] and loaded.unchecked == []
    rows = _rows(folder)
    assert {r["ranks"] for r in rows} == {n} and {r["backend"] for r in rows} == {tool}
    assert rows[0]["device"] == (device or "not stated in the log")
    assert (folder / rows[0]["imported"]["log"]).read_text() == (LOGS / name).read_text()
    assert {r["params"]["in_place"] for r in rows} == {False, True}


@pytest.mark.parametrize("name", ["nccl-tests_h100_16ranks.txt", "nccl-tests_gb200-nvl72_72ranks.txt",
                                  "rccl-tests_mi300x_8ranks.txt"])
def test_rederived_busbw_equals_the_printed_within_its_precision(imported, name: str) -> None:
    rows = _rows(imported(name))
    assert len(rows) >= 10
    for r in rows:
        printed, prec = r["imported"]["printed"], r["imported"]["precision"]
        assert r["imported"]["disagreements"] == []
        # the printed time's rounding carried through, as nccl_tests.disagreements allows
        slack = r["busbw_gbps"] * prec["time_us"] / (printed["time_us"] - prec["time_us"]) + prec["busbw_gbps"]
        assert abs(r["busbw_gbps"] - printed["busbw_gbps"]) <= slack


def test_rccl_output_file_figures_rederive_to_the_full_precision_printed(imported) -> None:
    """rccl-tests' JSON output file (PR #93's sample) carries every figure at full precision: xmfu's algbw
    (size / time) and busbw (x 2(n-1)/n, n = 4) equal them to 1e-12."""
    rows = _rows(imported(RCCL_JSON))
    assert len(rows) == 5 and {r["params"]["in_place"] for r in rows} == {False, True}
    for r in rows:
        assert r["imported"]["disagreements"] == []
        assert r["busbw_gbps"] == pytest.approx(r["imported"]["printed"]["busbw_gbps"], rel=1e-12)


@pytest.mark.parametrize("as_list", [False, True])
def test_rccl_output_file_planted_inconsistency_is_flagged_in_either_layout(tmp_path: Path, as_list: bool) -> None:
    """One object per line (PR #93) or one JSON list (PR #140 on): a busBw moved by 1% is flagged, kept as printed."""
    records = [json.loads(line) for line in (LOGS / RCCL_JSON).read_text().splitlines()]
    records[2]["busBw"] *= 1.01
    planted = tmp_path / "planted.json"
    planted.write_text(json.dumps(records) if as_list else "".join(json.dumps(r) + "\n" for r in records))
    folder = write("nccl-tests", planted, tmp_path / "out", ["xmfu"], "t")
    flagged = [r for r in _rows(folder) if r["imported"]["disagreements"]]
    assert load_bundle(folder).problems == [] and len(flagged) == 1
    assert flagged[0]["params"]["size_bytes"] == 2048 and not flagged[0]["params"]["in_place"]
    assert flagged[0]["imported"]["printed"]["busbw_gbps"] == records[2]["busBw"]


def test_old_all_gather_convention_is_flagged_not_replaced(imported) -> None:
    """nccl-tests before 2020 printed all_gather's algbw as count x typesize x (n-1) / t (issue #37's log): xmfu's
    algbw (count x typesize x n / t) disagrees and says so; its busbw (x (n-1)/n) agrees with the printed one."""
    rows = _rows(imported("nccl-tests_v100_all_gather_8gpus_2020.txt"))
    for r in rows:
        assert r["status"] == "incorrect" and r["time_s"] is None  # error 1e+00: a wrong result has no speed
        said = r["imported"]["disagreements"]
        assert len(said) == 1 and said[0].startswith("algbw_gbps: printed 129.05" if not r["params"]["in_place"]
                                                     else "algbw_gbps: printed 128.84")
        assert r["imported"]["printed"]["algbw_gbps"] in (129.05, 128.84)  # kept as printed
        assert abs(r["imported"]["rederived"]["busbw_gbps"] - r["imported"]["printed"]["busbw_gbps"]) < 0.01


def test_planted_inconsistency_is_flagged(tmp_path: Path) -> None:
    text = (LOGS / "nccl-tests_gb200-nvl72_72ranks.txt").read_text().replace("  423.16  834.57", "  423.16  844.57")
    planted = tmp_path / "planted.txt"
    planted.write_text(text)
    folder = write("nccl-tests", planted, tmp_path / "out", ["xmfu"], "test", "all_reduce")
    assert load_bundle(folder).problems == []  # flagged in the row, which stays a valid bundle
    flagged = [r for r in _rows(folder) if r["imported"]["disagreements"]]
    assert len(flagged) == 1 and flagged[0]["params"]["size_bytes"] == 8589934592
    assert "busbw_gbps: printed 844.57" in flagged[0]["imported"]["disagreements"][0]
    assert flagged[0]["imported"]["printed"]["busbw_gbps"] == 844.57  # kept as printed, never replaced


def test_validate_refuses_an_imported_row_edited_after_the_import(tmp_path: Path) -> None:
    folder = write("nccl-tests", LOGS / "nccl-tests_gb200-nvl72_72ranks.txt", tmp_path, ["xmfu"], "t", "all_reduce")
    cases = folder / "cases.jsonl"
    rows = _rows(folder)
    rows[-1]["imported"]["printed"]["busbw_gbps"] = 400.0  # a figure moved; the checksum redone to match
    cases.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    sums = folder / "SHA256SUMS"
    digest = hashlib.sha256(cases.read_bytes()).hexdigest()
    sums.write_text("".join(f"{digest}  cases.jsonl\n" if line.endswith("  cases.jsonl") else line + "\n"
                            for line in sums.read_text().splitlines()))
    problems = load_bundle(folder).problems
    assert len(problems) == 1 and "imported" in problems[0] and "kept log" in problems[0]


@pytest.mark.parametrize("name,median,device", [("mamf-finder_gfx1151_2025.txt", 22.3, "AMD Radeon Graphics"),
                                                ("mamf-finder_gfx1151_hipblaslt_2025.txt", 35.1, None)])
def test_mamf_logs_give_rows_whose_tflops_are_the_printed(tmp_path: Path, name: str, median: float,
                                                          device: str | None) -> None:
    folder = write("mamf-finder", LOGS / name, tmp_path, ["xmfu"], "test")
    assert load_bundle(folder).problems == []
    rows = _rows(folder)
    ok = [r for r in rows if r["status"] == "ok"]
    assert len(ok) == 1 and abs(ok[0]["tflops"] - median) <= mamf_finder.PRECISION
    m, n, k = (ok[0]["params"][x] for x in "mnk")
    assert ok[0]["flops"] == 2 * m * n * k and ok[0]["flop_convention"] == "2mnk"
    assert rows[0]["device"] == (device or "not stated in the log")
    assert all(r["imported"]["disagreements"] == [] for r in rows)


def test_old_mamf_best_outcome_is_a_max_and_is_not_timed(tmp_path: Path) -> None:
    """Before 2024-12-23 mamf-finder printed one figure, the fastest iteration's rate (np.amin(times)): no median,
    so the row is skipped with that reason instead of being timed from a max."""
    rows = _rows(write("mamf-finder", LOGS / "mamf-finder_gh200_2024-08.txt", tmp_path, ["xmfu"], "test"))
    assert len(rows) == 1 and rows[0]["status"] == "skipped" and "max 821.0" in rows[0]["reason"]
    assert rows[0]["device"] == "NVIDIA GH200 480GB" and rows[0]["params"] == {"m": 11264, "n": 19712, "k": 1536}


def test_planted_mamf_inconsistency_is_flagged() -> None:
    text = (LOGS / "mamf-finder_gfx1151_2025.txt").read_text().replace("max:    22.9", "max:    20.9")
    said = mamf_finder.parse(text).shapes[(3072, 3072, 1024)].said
    assert len(said) == 2 and all("fastest iteration cannot be slower" in s for s in said)


@pytest.mark.parametrize("tool,text,why", [
    ("nccl-tests", "hello\nworld\n", "no nccl-tests table"),
    ("nccl-tests", None, "cut short"),
    ("nccl-tests", "TRUNCATED_FOOTER", "truncated"),
    ("mamf-finder", "Benchmark started\n** Dtype: torch.bfloat16\n", "no mamf-finder results"),
    ("nccl-tests", "RCCL_JSON_CUT", "not an rccl-tests JSON output file"),
])
def test_malformed_and_truncated_logs_are_one_paragraph_and_exit_2(tmp_path: Path, capsys, tool: str,
                                                                    text: str | None, why: str) -> None:
    full = (LOGS / "rccl-tests_mi300x_8ranks.txt").read_text()
    if text is None:
        text = full[:full.index("  47617")]  # cut inside the last row
    elif text == "RCCL_JSON_CUT":
        whole = (LOGS / RCCL_JSON).read_text()
        text = whole[:whole.rindex('"time"')]  # cut inside the last object
    elif text == "TRUNCATED_FOOTER":
        text = full[:full.index("# Errors with")]
    log = tmp_path / "log.txt"
    log.write_text(text)
    assert main(["import", tool, str(log), "--results-dir", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert why in err and "\n" not in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_cli_prints_the_bundle_last(tmp_path: Path, capsys) -> None:
    assert main(["import", "mamf-finder", str(LOGS / "mamf-finder_gfx1151_2025.txt"), "--results-dir",
                 str(tmp_path)]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("bundle: ") and load_bundle(last.removeprefix("bundle: ")).problems == []


def test_a_log_that_cannot_tell_its_operation_names_the_missing_option() -> None:
    """The early-2020 log without its command line: no redop/root columns, and that release's bus factors
    differed, so its op is not inferred (tests/results/importers/test_infer_op.py: the logs whose op is)."""
    text = (LOGS / "nccl-tests_v100_all_gather_8gpus_2020.txt").read_text().replace("all_gather_perf", "perf")
    with pytest.raises(LogError, match="--op"):
        nccl_tests.parse(text, ranks=8)


def _nccl_json(log: str, processes: int, ngpus: int, op: str = "all_reduce") -> str:
    """The document nccl-tests' `-J FILE.json` writes (src/util.cu at v2.19.6: jsonOutputInit, writeDeviceReport,
    writeBenchmarkLinePreamble/Body, writeResultFooter; numbers through "%lf"), for a run with a real log's sizes,
    counts and times. No such file was found published, so its layout comes from the writer's source and its
    figures from the log: algbw and busbw are what GetBw gives for those times, at the writer's precision."""
    parsed = nccl_tests.parse_text((LOGS / log).read_text(), op)
    n = processes * ngpus
    results: dict[int, dict] = {}
    for e in parsed.entries:
        _, algbw, factor = nccl_tests.rederive(op, e.count, e.type, n, e.time_us)
        half = {"time": round(e.time_us, 6), "alg_bw": round(algbw, 6), "bus_bw": round(algbw * factor, 6),
                "nwrong": e.wrong}
        record = results.setdefault(e.line, {"size": e.size, "count": e.count, "type": e.type, "redop": e.redop,
                                             "root": f"{e.root:6d}"})
        record["in_place" if e.in_place else "out_of_place"] = half
    devices = [{"rank": p * ngpus, "group": 0, "pid": 1000 + p, "hostname": f"node{p // 8}", "device": 0,
                "device_hex": "0000:18:00", "device_info": "NVIDIA H100 80GB HBM3"} for p in range(processes)]
    return json.dumps({"version": 3, "start_time": "2026-11-26 00:00:00", "args": ["./build/all_reduce_perf", "-J",
                       "out.json", "-g", str(ngpus)], "env": [], "nccl_version": 22703,
                       "config": {"nthreads": 1, "ngpus": ngpus, "iterations": 20, "warmup_iters": 5, "graph": 0,
                                  "devices": devices},
                       "results": [{**r, "actual_iterations": 20, "experiment_name": ""} for r in results.values()],
                       "average_bus_bandwidth": {"bandwidth": parsed.avg_busbw, "okay": "unchecked"}})


@pytest.mark.parametrize(("processes", "ngpus"), [(16, 1), (2, 8), (1, 8)])
def test_nccl_tests_json_ranks_are_processes_times_gpus_and_figures_rederive(tmp_path: Path, processes: int,
                                                                           ngpus: int) -> None:
    """One `devices` entry per process: 16 processes of 1 GPU, 2 of 8 and 1 of 8 (`-g 8`) are 16, 16 and 8 ranks,
    not the last device entry's rank + 1."""
    path = tmp_path / "out.json"
    path.write_text(_nccl_json("nccl-tests_h100_16ranks.txt", processes, ngpus))
    folder = write("nccl-tests", path, tmp_path / "out", ["xmfu"], "t")
    rows = _rows(folder)
    assert load_bundle(folder).problems == []
    assert {r["ranks"] for r in rows} == {processes * ngpus} and rows[0]["device"] == "NVIDIA H100 80GB HBM3"
    assert all(r["imported"]["disagreements"] == [] for r in rows)


def test_nccl_tests_json_planted_inconsistency_is_flagged(tmp_path: Path) -> None:
    data = json.loads(_nccl_json("nccl-tests_h100_16ranks.txt", 16, 1))
    data["results"][-1]["in_place"]["bus_bw"] += 1.0
    path = tmp_path / "out.json"
    path.write_text(json.dumps(data))
    flagged = [r for r in _rows(write("nccl-tests", path, tmp_path / "out", ["xmfu"], "t"))
               if r["imported"]["disagreements"]]
    assert len(flagged) == 1 and flagged[0]["params"]["in_place"]
