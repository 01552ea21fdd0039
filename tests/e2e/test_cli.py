"""`xmfu` end to end on the CPU, as a user runs it: real bundles, through real processes where the process is
what is tested (switching Triton's interpreter on, Ctrl-C, every backend in one run); the other commands, and the
launching side of a sweep, run in-process through the CLI's `main` (a subprocess each would cost seconds of
imports; Hydra's Slurm launcher still starts every job as a process of its own)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from xmfu.harness.results.bundle.reader import read_bundle
from xmfu.harness.results.bundle.validator import validate_bundle

pytestmark = pytest.mark.e2e
TINY = ["timing=quick", "timing.max_time_s=0.5", "timing.warmup_s=0"]


def xmfu(*args, cwd: Path, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # xmfu must switch it on itself
    return subprocess.run([sys.executable, "-m", "xmfu", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env)


def _bundle_path(stdout: str) -> Path:
    last = stdout.strip().splitlines()[-1]
    assert last.startswith("bundle: "), stdout
    return Path(last.removeprefix("bundle: "))


def test_run_all_three_backends_writes_a_valid_bundle(tmp_path):
    proc = xmfu("run", "workload=matmul", "backends=[torch,triton,jax]", "dtype=bf16", "workload.sizes=[64]",
                "workload.shapes=[[67,45,33]]", *TINY, f"results_dir={tmp_path}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    folder = _bundle_path(proc.stdout)
    assert validate_bundle(folder) == []
    bundle = read_bundle(folder)
    assert bundle.manifest["status"] == "complete"
    rows = {(r["backend"], r["params"]["m"]): r for r in bundle.raw_rows}
    assert {b for b, _ in rows} == {"torch", "triton", "jax"}
    assert all(r["status"] == "ok" for r in rows.values()), [r["reason"] for r in rows.values()]
    assert rows[("triton", 67)]["timing_valid"] is False and rows[("triton", 67)]["mfu"] is None
    torch_row = rows[("torch", 64)]
    assert torch_row["timing_valid"] and torch_row["peak_tflops"] > 0 and torch_row["mfu"] > 0
    assert torch_row["peak_source"] and torch_row["time_s"]["n"] >= 5
    env = json.loads((folder / "environment.json").read_text())
    assert env["packages"]["torch"] and env["peaks"]["by_dtype"]["bf16"]["peak_tflops"] > 0
    assert (folder / "telemetry.jsonl").stat().st_size > 0  # CPU sampler: a reading at each end of every case
    assert torch_row["telemetry"]["readings"] >= 2 and torch_row["telemetry"]["mean_sm_clock_mhz"] > 0
    tel = torch_row["telemetry"]  # MFU against the peak scaled to the clock the cores really ran at
    adjusted = torch_row["mfu"] * tel["peak_clock_mhz"] / tel["mean_sm_clock_mhz"]
    assert tel["mfu_clock_adjusted"] == pytest.approx(adjusted)
    samples = [s for s in bundle.samples if s["backend"] == "torch"]
    assert len(samples[0]["samples"]) == torch_row["time_s"]["n"]
    assert "TFLOP/s" in proc.stdout  # the summary table


def test_multirun_writes_one_bundle_per_combination(tmp_path, cli):
    proc = cli("run", "-m", "dtype=fp32,bf16", "backends=[torch]", "workload.sizes=[32]", *TINY,
               f"results_dir={tmp_path}")
    assert proc.returncode == 0, proc.stderr
    bundles = sorted(p for p in tmp_path.iterdir() if (p / "manifest.json").exists())
    assert len(bundles) == 2
    assert {read_bundle(b).raw_rows[0]["dtype"] for b in bundles} == {"fp32", "bf16"}
    lines = proc.stdout.strip().splitlines()
    assert lines[-1].startswith("sweep: 2 jobs, 2 succeeded, 0 did not")
    assert lines[-3].startswith("job 0 (dtype=fp32") and "bundle: " in lines[-3]


@pytest.mark.slow
def test_a_failed_job_under_the_slurm_launcher_makes_the_sweep_fail(tmp_path, cli, monkeypatch):
    """The launching side in-process; submitit starts each job as a process of its own."""
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    monkeypatch.delenv("TRITON_INTERPRET")
    proc = cli("run", "-m", "hydra/launcher=submitit_local", "dtype=fp32,tf32", "backends=[torch]",
               "workload.sizes=[16]", *TINY, "telemetry.enabled=false", f"results_dir={tmp_path}")
    assert proc.returncode == 1, proc.stderr  # the tf32 job could run no case on a CPU
    assert "sweep: 2 jobs, 1 succeeded, 1 did not" in proc.stdout


def test_mamf_sets_achievable_peak(tmp_path, cli):
    proc = cli("run", "experiment=mamf", "backends=[torch]", "mamf.m=[32,64]", "mamf.n=[64]", "mamf.k=[64]",
                "workload.sizes=[48]", *TINY, f"results_dir={tmp_path}")
    assert proc.returncode == 0, proc.stderr
    bundle = read_bundle(_bundle_path(proc.stdout))
    mamf_rows = [r for r in bundle.raw_rows if r["phase"] == "mamf"]
    main_rows = [r for r in bundle.raw_rows if r["phase"] == "main"]
    assert len(mamf_rows) == 2 and len(main_rows) == 1
    assert bundle.manifest["achievable"]["tflops"] == max(r["tflops"] for r in mamf_rows)
    assert main_rows[0]["mfu_vs_achievable"] > 0
    assert "maximum achievable" in proc.stdout


def test_mamf_at_smoke_scale_runs_the_small_sweep_flushed_and_says_so(tmp_path, cli):
    """`experiment=mamf scale=smoke` once ran the 64-shape sweep up to 16384^3 (killed at 15 minutes); the
    sweep's calls are timed after a cache flush, as mamf-finder's published figures are (issue 30). The sweep's
    size is what is checked (8 shapes up to 512^3); its wall time is benchmarks/bounds.py's figure (issue 42)."""
    proc = cli("run", "experiment=mamf", "scale=smoke", "backends=[torch]", "dtype=fp32", "workload.shapes=[]", *TINY,
               f"results_dir={tmp_path}")
    assert proc.returncode == 0, proc.stderr
    bundle = read_bundle(_bundle_path(proc.stdout))
    sweep = [r for r in bundle.raw_rows if r["phase"] == "mamf"]
    assert len(sweep) == 8 and max(r["params"]["k"] for r in sweep) == 512
    assert all(r["scale"] == "smoke" and "mamf sweep at smoke sizes" in r["scale_note"] for r in bundle.raw_rows
               if r["phase"] == "mamf")
    assert {r["achievable_method"] for r in bundle.raw_rows} == {"flushed"}
    assert bundle.manifest["achievable"]["method"] == "flushed" and bundle.manifest["scale"]["scale"] == "smoke"
    assert "scale=smoke: mamf sweep at smoke sizes" in proc.stderr
    assert "cache flushed before every call" in proc.stdout
    assert validate_bundle(_bundle_path(proc.stdout)) == []


@pytest.mark.parametrize(("args", "needle"), [  # the rest of the table runs in-process: test_bad_inputs.py
    (["run", "workload=fft"], "unknown workload 'fft'"),
    (["run", "-m", "dtype=fp32,int4"], "dtype"),
])
def test_bad_input_exits_2_with_one_paragraph(tmp_path, args, needle):
    proc = xmfu(*args, cwd=tmp_path)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert needle in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "results").exists()  # nothing was run


def test_interrupted_run_leaves_a_valid_partial_bundle(tmp_path):
    sizes = "[" + ",".join(str(32 + i) for i in range(60)) + "]"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.Popen([sys.executable, "-m", "xmfu", "run", "backends=[torch]", f"workload.sizes={sizes}",
                             "timing=quick", "timing.max_time_s=0.3", f"results_dir={tmp_path}"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.time() + 120
    cases = None
    while time.time() < deadline:
        found = list(tmp_path.glob("*/cases.jsonl"))
        if found and found[0].read_text().count("\n") >= 2:
            cases = found[0]
            break
        time.sleep(0.1)
    assert cases is not None, "no case finished in time"
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    folder = cases.parent
    assert validate_bundle(folder) == []
    bundle = read_bundle(folder)
    assert bundle.manifest["status"] == "partial"
    assert 2 <= len(bundle.raw_rows) < 60
    assert stdout.strip().splitlines()[-1] == f"bundle: {folder}"


def test_validate_peaks_and_env_commands(tmp_path, cli):
    proc = cli("run", "backends=[torch]", "workload.sizes=[16]", *TINY, f"results_dir={tmp_path}")
    folder = _bundle_path(proc.stdout)
    assert cli("validate", str(folder)).returncode == 0
    with (folder / "samples.jsonl").open("a") as f:
        f.write("{}\n")
    bad = xmfu("validate", str(folder), cwd=tmp_path)  # a real process: validate imports no framework
    assert bad.returncode == 1 and "checksum mismatch" in bad.stdout
    peaks = cli("peaks")
    assert peaks.returncode == 0 and "nvidia-h100-sxm" in peaks.stdout and "amd-mi300x" in peaks.stdout
    env = cli("env")
    assert env.returncode == 0 and "platform: cpu" in env.stdout and "bf16" in env.stdout


def test_no_case_could_run_exits_1(tmp_path, cli):
    proc = cli("run", "backends=[torch]", "dtype=tf32", "workload.sizes=[16]", *TINY, f"results_dir={tmp_path}")
    assert proc.returncode == 1
    bundle = read_bundle(_bundle_path(proc.stdout))
    assert bundle.raw_rows[0]["status"] == "skipped" and "tf32" in bundle.raw_rows[0]["reason"]
    assert bundle.manifest["status"] == "complete"


@pytest.mark.slow
def test_attention_smoke_runs_every_backend_with_speedups(tmp_path, cli):
    proc = cli("run", "workload=attention", "experiment=smoke", "baseline=torch_sdpa", "workload.mode=[fwd_bwd]",
               "workload.causal=[true]", *TINY, f"results_dir={tmp_path}")
    assert proc.returncode == 0, proc.stderr
    bundle = read_bundle(_bundle_path(proc.stdout))
    rows = {r["backend"]: r for r in bundle.raw_rows}
    assert {b for b, r in rows.items() if r["status"] == "ok"} == {
        "torch_sdpa", "torch_sdpa_flash", "torch_sdpa_math", "torch_eager", "triton", "triton_fa2", "jax"}
    assert {b for b, r in rows.items() if r["status"] == "skipped"} == {
        "torch_sdpa_efficient", "torch_sdpa_cudnn", "jax_cudnn", "torch_flex", "jax_pallas", "flash_attn", "aiter",
        "helion"}  # GPU-only libraries; the CPU-compiling ones, not named (catalog cpu_when_named)
    assert all(r["reason"] for r in rows.values() if r["status"] == "skipped")
    assert "runs only when named" in rows["torch_flex"]["reason"] and "runs only when named" in rows["jax_pallas"][
        "reason"]
    assert rows["jax"]["speedup"]["verdict"] in ("faster", "slower", "equivalent", "inconclusive")
    assert rows["torch_sdpa"]["speedup"] is None and rows["triton"]["speedup"] is None  # baseline; invalid timing
    assert rows["triton"]["timing_valid"] is False and rows["triton"]["correctness"]["ok"]
    assert rows["torch_sdpa"]["notes"]["sdpa_backend_used"] == "flash"
    assert rows["jax"]["flop_convention"] == "exact" and rows["jax"]["params"]["alignment"] == "top_left"


@pytest.mark.slow
def test_transformer_tiny_runs_on_torch_triton_and_jax(tmp_path, cli):
    """The smoke transformer as `make bench` runs it. torch_compile's Inductor compile of a training step takes
    minutes on 2 cores, so the suite does it once: tests/workloads/test_transformer_backends.py."""
    proc = cli("run", "workload=transformer", "experiment=smoke", "backends=[torch,torch_triton,jax]", *TINY,
               f"results_dir={tmp_path}")
    assert proc.returncode == 0, proc.stderr
    folder = _bundle_path(proc.stdout)
    assert validate_bundle(folder) == []
    rows = {r["backend"]: r for r in read_bundle(folder).raw_rows}
    assert set(rows) == {"torch", "torch_triton", "jax"}
    assert all(r["status"] == "ok" for r in rows.values()), {b: r["reason"] for b, r in rows.items()}
    assert rows["torch_triton"]["timing_valid"] is False and rows["torch_triton"]["correctness"]["ok"]
    assert rows["torch_triton"]["notes"]["triton_linears"] == 2 * 7 + 1  # every block linear + the output
    for name in ("torch", "jax"):
        assert rows[name]["mfu"] > 0 and rows[name]["throughput"]["tokens_per_s"] > 0
        assert rows[name]["params"]["params"] == 131_392 and rows[name]["flop_convention"] == "palm"
    assert rows["jax"]["notes"]["compile_s"] > 0


def test_sustained_run_reports_steady_state(tmp_path, cli):
    proc = cli("run", "backends=[torch]", "workload.sizes=[64]", "timing=sustained", "timing.sustain_s=2",
                "timing.window_s=0.5", "timing.warmup_s=0", f"results_dir={tmp_path}")
    assert proc.returncode == 0, proc.stderr
    row = read_bundle(_bundle_path(proc.stdout)).raw_rows[0]
    steady = row["steady_state"]
    assert len(steady["windows"]) >= 3 and steady["first_window"]["tflops"] > 0
    assert 0 <= steady["reached_after_s"] <= 2 and "sustained for 2 s" in row["timer"]["stop"]


def test_env_json_prints_the_whole_environment(cli):
    proc = cli("env", "--json")
    assert proc.returncode == 0
    env = json.loads(proc.stdout)
    assert env["host"]["kernel"] and "container" in env and env["telemetry"]["sampler"] == "cpu"
    assert env["devices"][0]["cpu"]["flags"] and env["packages"]["numpy"]


def test_compare_command(tmp_path, cli):
    runs = [cli("run", "backends=[torch]", "workload.sizes=[32]", *TINY, *extra, f"results_dir={tmp_path / n}")
            for n, extra in (("a", []), ("b", []), ("c", ["timing.cold_cache=true"]))]
    a, b, c = (_bundle_path(r.stdout) for r in runs)
    ok = cli("compare", str(a), str(b), "--format", "json", "--price", "AMD EPYC=0.5")
    assert ok.returncode == 0, ok.stderr
    row = json.loads(ok.stdout)["rows"][0]
    assert row["verdict"] in ("faster", "slower", "equivalent", "inconclusive") and "break_even_price_ratio" in row
    refused = cli("compare", str(a), str(c))
    assert refused.returncode == 1 and "protocol.cold_cache: False vs True" in refused.stdout
    bad = xmfu("compare", str(a), str(tmp_path / "nope"), cwd=tmp_path)
    assert bad.returncode == 2 and "not a valid bundle" in bad.stderr
