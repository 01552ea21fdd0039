"""The GPU reference script's plumbing: its parts, their estimates and budgets, resume and the budget stop (the full
run is `make gpu-reference`, a benchmark, not a test)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "gpu_reference.py"
spec = importlib.util.spec_from_file_location("gpu_reference", SCRIPT)
gpu_reference = importlib.util.module_from_spec(spec)
sys.modules["gpu_reference"] = gpu_reference  # dataclasses look their module up
spec.loader.exec_module(gpu_reference)
parts = sys.modules["reference_parts"]  # imported by the script from beside it
estimates = sys.modules["reference_estimates"]
import reference_state as state  # noqa: E402  (beside the script, on the path it set; imported by it on first use)


def test_device_folder_names():
    assert gpu_reference.slug("NVIDIA H100 80GB HBM3", 8) == "nvidia-h100-80gb-hbm3-x8"
    assert gpu_reference.slug("AMD Instinct MI300X", 1) == "amd-instinct-mi300x-x1"


def test_collectives_run_one_rank_per_gpu_under_torchrun(tmp_path):
    part = parts.BY_NAME["collectives-torch"]
    full = gpu_reference.command(part, tmp_path, "r", smoke=False, gpus=8)
    assert full[1:4] == ["-m", "torch.distributed.run", "--standalone"] and "--nproc_per_node=8" in full
    smoke = gpu_reference.command(part, tmp_path, "r", smoke=True, gpus=1)
    assert "--nproc_per_node=2" in smoke and "scale=smoke" in smoke and "run_id=r" in smoke


def test_every_part_composes_at_smoke_sizes():
    """(At full sizes: the estimate composes each part, below.)"""
    from xmfu.harness.config.hydra_app import validate_job
    from xmfu.workloads.catalog import build_registry

    registry = build_registry()
    for part in parts.PARTS:
        validate_job(part.overrides(smoke=True), registry)


def test_every_part_composes_and_is_estimated_well_within_a_budget_under_the_10_minute_cap():
    for part in parts.PARTS:
        assert part.budget_s <= parts.MAX_BUDGET_S <= 480
        estimate = parts.estimate(part.name)
        assert estimate.minutes * 60 <= parts.ESTIMATE_SHARE * part.budget_s, (part.name, estimate)
        assert set(estimate.terms) == {"start", "timing", "device", "prepare", "host"}


def test_estimate_terms_by_hand():
    """8192^3 bf16 matmul, three backends, timing=default: 1.0995e12 FLOPs at 794.5 TFLOP/s is 1.384 ms a call;
    the case takes its 10 s budget plus one overrunning round of 5 samples per backend."""
    case = type("C", (), {"workload": "matmul", "dtype": "bf16", "flops": lambda s: 2.0 * 8192**3,
                          "bytes_moved": lambda s: 3 * 8192**2 * 2.0})()
    assert parts.call_s(case) == pytest.approx(1.3839e-3, rel=1e-3)
    timing = type("T", (), {"warmup_min_iters": 3, "min_samples": 10, "round_samples": 5, "max_time_s": 10.0})()
    assert parts.timing_s(case, timing, backends=3) == pytest.approx(10 + 15 * 1.3839e-3, rel=1e-4)
    # the matmul part: two sizes, seven backends (torch, both Triton kernels, jax, jax_pallas, torch_compile,
    # helion); its host term draws 2 n^2 inputs per case at 5e7 values/s and checks 64 rows per backend at 1e11 FLOP/s
    host = parts.estimate("matmul").terms["host"]
    values = 2 * (4096**2 + 8192**2)
    check = 7 * 2 * 64 * (4096**2 + 8192**2)
    assert host == pytest.approx(values / 5e7 + check / 1e11)


def test_the_listed_estimates_are_what_the_parts_derive_now():
    """`--list` prints ESTIMATES (deriving them composes every part with Hydra); they must be current."""
    for part in parts.PARTS:
        derived, listed = parts.estimate(part.name), estimates.listed_estimate(part.name)
        assert part.name in estimates.ESTIMATES, f"paste estimates.derived_estimates():\n" \
            f"{estimates.derived_estimates()}"
        assert (listed.cases, listed.terms) == (derived.cases, pytest.approx(derived.terms, rel=1e-12)), \
            f"benchmarks/reference_estimates.py ESTIMATES is out of date; paste:\n{estimates.derived_estimates()}"
    assert set(estimates.ESTIMATES) == set(parts.BY_NAME)


def test_list_imports_no_framework():
    """`--list` reads ESTIMATES: no Hydra or OmegaConf composing the parts, no numpy, torch, JAX or Triton (it took
    37 s on a loaded machine, issue 42 item 5)."""
    child = ("import contextlib, io, sys; sys.argv = ['gpu_reference.py', '--list']; "
             f"sys.path[:0] = [{str(SCRIPT.parent)!r}]; import gpu_reference\n"
             "with contextlib.redirect_stdout(io.StringIO()) as out: code = gpu_reference.main(['--list'])\n"
             "heavy = sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'jax', 'jaxlib', 'triton', 'helion', "
             "'hydra', 'omegaconf', 'numpy', 'xmfu'})\n"
             "print(code, heavy, 'ESTIMATED, NOT MEASURED' in out.getvalue())")
    proc = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=120, check=False)
    assert proc.stdout.split() == ["0", "[]", "True"], proc.stdout + proc.stderr


def test_list_prints_every_part_as_an_estimate(capsys):
    assert gpu_reference.main(["--list"]) == 0
    out = capsys.readouterr().out
    assert "ESTIMATED, NOT MEASURED" in out
    for part in parts.PARTS:
        assert f"\n{part.name} " in out


@pytest.mark.parametrize("args, says", [
    (["--part", "mamf-bf16,nope"], "unknown part nope. Allowed: mamf-bf16, mamf-fp8"),
    (["--budget-min", "9"], "--budget-min 9: allowed is more than 0 and at most 8"),
    (["--budget-min", "0"], "--budget-min 0: allowed is more than 0"),
])
def test_bad_input_is_one_paragraph_and_exit_2(args, says, capsys):
    assert gpu_reference.main(args) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1


def test_smoke_sizes_never_write_into_the_committed_reference_folder(tmp_path):
    with pytest.raises(gpu_reference.Usage, match="smoke sizes never write under"):
        gpu_reference.output_folder(str(ROOT / "results" / "reference" / "x"), "x", smoke=True)
    assert gpu_reference.output_folder(str(tmp_path), "x", smoke=True) == tmp_path.resolve()
    first, second = (gpu_reference.output_folder(None, "dev", smoke=True) for _ in range(2))
    try:  # each invocation its own new folder, not one shared by every user and run (issue 42 item 12)
        assert first != second and first.name.startswith("xmfu-gpu-reference-smoke-dev-") and first.is_dir()
        assert not any(first.iterdir())
    finally:
        first.rmdir()
        second.rmdir()


SLEEPER = "import signal, time; {}; time.sleep(60)"


def test_the_budget_stops_a_part_with_sigterm_then_sigkill():
    """A part that ends on SIGTERM is stopped once; one that ignores it is killed at the budget: nothing outlives
    the budget (here 2 s: SIGTERM after 1.5 s, SIGKILL at 2 s)."""
    polite = [sys.executable, "-c", SLEEPER.format("signal.signal(signal.SIGTERM, lambda *a: exit(130))")]
    code, stopped, seconds = gpu_reference.run_within(polite, {}, budget_s=2.0)
    assert (code, stopped) == (130, "budget") and seconds >= 1.5  # not before the SIGTERM is due
    deaf = [sys.executable, "-c", SLEEPER.format("signal.signal(signal.SIGTERM, signal.SIG_IGN)")]
    code, stopped, _ = gpu_reference.run_within(deaf, {}, budget_s=2.0)
    assert (code, stopped) == (-9, "budget")  # killed, not the 60 s sleep's end
    code, stopped, _ = gpu_reference.run_within([sys.executable, "-c", "exit(3)"], {}, budget_s=2.0)
    assert (code, stopped) == (3, None)


def _wait_for(path: Path, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return path.exists()


def test_a_part_dies_with_the_script_however_the_script_dies(tmp_path):
    """SIGKILL (a job's hard limit) cannot be caught by the script, yet its part, in a process group of its own, gets
    SIGTERM and closes its bundle."""
    ready, stopped = tmp_path / "ready", tmp_path / "got SIGTERM"
    part = (f"import signal, time; signal.signal(signal.SIGTERM, lambda *a: (open({str(stopped)!r}, 'w'), exit(130))); "
            f"open({str(ready)!r}, 'w'); time.sleep(60)")
    script = (f"import sys; sys.path[:0] = [{str(SCRIPT.parent)!r}]; import gpu_reference; "
              f"gpu_reference.run_within([sys.executable, '-c', {part!r}], {{}}, budget_s=60)")
    proc = subprocess.Popen([sys.executable, "-c", script])
    try:
        assert _wait_for(ready, 60)
    finally:
        proc.kill()
        proc.wait()
    assert _wait_for(stopped, 10)


def _record(out: Path, part: str, bundle: str, **kw) -> None:
    state.write_state(out, {"part": part, "sizes": "smoke", "device": "d", "bundle": bundle, **kw})


def test_a_part_is_done_only_with_its_valid_bundle_at_the_same_sizes_on_the_same_device(tmp_path):
    part = parts.BY_NAME["matmul"]
    assert state.done(tmp_path, part, "smoke", "d") == (False, "not run")
    _record(tmp_path, "matmul", "matmul.1")
    assert state.done(tmp_path, part, "smoke", "d")[1].startswith("no valid bundle")
    assert "made at smoke sizes on d" in state.done(tmp_path, part, "full", "d")[1]
    (tmp_path / "matmul.1").mkdir()
    (tmp_path / "matmul.0").mkdir()
    state.supersede(tmp_path, "matmul")
    assert sorted(p.name for p in (tmp_path / "superseded").iterdir()) == ["matmul.0", "matmul.1"]
    assert json.loads((tmp_path / "parts" / "matmul.json").read_text())["bundle"] == "matmul.1"
    _record(tmp_path, "matmul", "matmul.2", status="running", stopped=None)  # the script was killed meanwhile
    assert state.read_state(tmp_path, "matmul")["stopped"] == "unrecorded"


def _script(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300,
                          check=False)


@pytest.mark.e2e
@pytest.mark.long  # the slow group (make test-slow): two parts of the reference set run whole, 30 s or more here
@pytest.mark.slow(seconds=45)
def test_parts_resume_redo_and_stop_at_their_budget(tmp_path, capsys):
    """Two quick parts at smoke sizes; again (both skipped: their valid bundles are there); one again with --redo and
    a budget too short for it (stopped, its earlier bundle moved aside)."""
    out = tmp_path / "set"
    first = _script("--part", "mamf-bf16", "--part", "matmul", "--out", str(out))
    assert first.returncode == 0, first.stdout + first.stderr
    matmul = json.loads((out / "parts" / "matmul.json").read_text())
    assert matmul["status"] == "complete" and matmul["stopped"] is None and (out / matmul["bundle"]).is_dir()
    assert any(a.startswith("achievable_tflops=") for a in matmul["command"])  # from mamf-bf16's bundle
    assert "achievable_method=flushed" in matmul["command"]  # with the method it was measured by
    assert (out / "report.html").exists() and "| matmul | " in (out / "summary.md").read_text()

    capsys.readouterr()
    packed = tmp_path / "set.tar.gz"  # and the folder, its bundles, report and summary, as one file
    assert gpu_reference.main(["--part", "mamf-bf16,matmul", "--out", str(out), "--archive", str(packed)]) == 0
    again = capsys.readouterr().out
    assert again.count("skipped: complete") == 2 and "no part has run since it was built" in again, again
    assert "archive: 2 bundles" in again and validate_archive(packed) == ["valid", "valid"]

    code = gpu_reference.main(["--part", "matmul", "--redo", "--budget-min", "0.05", "--out", str(out)])  # 3 s
    redo = capsys.readouterr()
    stopped = json.loads((out / "parts" / "matmul.json").read_text())
    assert stopped["stopped"] == "budget" and stopped["bundle"] != matmul["bundle"], redo.stdout + redo.stderr
    assert (out / "superseded" / matmul["bundle"]).is_dir()
    # Stopped while starting (no bundle yet) or while running (a partial bundle): either way on record, and done
    # only where the bundle is valid.
    assert stopped["status"] in ("partial", "no valid bundle")
    assert code == (0 if stopped["status"] == "partial" else 1)
    assert "stopped at its budget" in (out / "summary.md").read_text()
    assert gpu_reference.main(["--list", "--out", str(out)]) == 0
    listed = capsys.readouterr().out
    assert "stopped at its budget (smoke sizes" in listed or "no valid bundle (smoke sizes" in listed


def validate_archive(path: Path) -> list[str]:
    from xmfu.harness.results.bundle.archive import opened

    with opened(path) as loaded:
        return ["valid" if not one.problems else one.problems[0] for _, one in loaded]


def test_the_manual_lists_every_part_with_its_current_estimate():
    text = (ROOT / "docs" / "gpu.md").read_text()
    for part in parts.PARTS:
        e = parts.estimate(part.name)
        row = f"| {part.name} | {part.what} | {e.cases} | {part.budget_s / 60:g} | {e.minutes:.1f} |"
        assert row in text, f"docs/gpu.md: the parts table is out of date at {part.name} (`--list` prints it)"
