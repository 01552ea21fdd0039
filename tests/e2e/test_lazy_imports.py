"""Which frameworks each `xmfu` command imports, seen in a fresh process's sys.modules after the command ran.

Commands that read results import none; a run imports only the frameworks of the backends it chose: the workload
catalog names backends by module path (xmfu.harness.engine.registry.Lazy) and detection asks only those frameworks.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from xmfu.harness.results.bundle.validator import validate_bundle

pytestmark = pytest.mark.e2e
FRAMEWORKS = ("torch", "jax", "triton")
MARK = "xmfu-imported:"
# The CLI's own entry point, then what sys.modules holds: the command's exit status is kept.
PROBE = (
    "import sys\n"
    "from xmfu.harness.cli.main import main\n"
    "code = main(sys.argv[1:])\n"
    f"print({MARK!r}, ','.join(m for m in {FRAMEWORKS!r} if m in sys.modules), file=sys.stderr)\n"
    "raise SystemExit(code)\n"
)
JAX_SMOKE = ["run", "experiment=smoke", "backends=[jax]", "workload.sizes=[64]", "workload.shapes=[]",
             "timing.max_time_s=0.3", "timing.warmup_s=0", "telemetry.enabled=false"]


def probe(*args: str, cwd: Path) -> tuple[subprocess.CompletedProcess, set[str]]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-c", PROBE, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env=env)
    lines = [line for line in proc.stderr.splitlines() if line.startswith(MARK)]
    assert lines, proc.stderr
    return proc, {m for m in lines[-1].removeprefix(MARK).strip().split(",") if m}


@pytest.fixture(scope="module")
def jax_run(tmp_path_factory) -> tuple[subprocess.CompletedProcess, set[str], Path]:
    where = tmp_path_factory.mktemp("lazy")
    proc, loaded = probe(*JAX_SMOKE, f"results_dir={where / 'results'}", cwd=where)
    assert proc.returncode == 0, proc.stderr
    return proc, loaded, Path(proc.stdout.strip().splitlines()[-1].removeprefix("bundle: "))


def test_a_jax_run_never_imports_torch_or_triton(jax_run):
    proc, loaded, bundle = jax_run
    assert loaded == {"jax"}, proc.stderr
    assert validate_bundle(bundle) == []


def test_composing_a_config_imports_no_framework(tmp_path):
    proc, loaded = probe("run", "--cfg", "job", "experiment=smoke", cwd=tmp_path)
    assert proc.returncode == 0 and "scale: smoke" in proc.stdout, proc.stderr
    assert loaded == set()


@pytest.mark.parametrize("command", [
    ["--help"], ["peaks"], ["validate", "{bundle}"], ["compare", "{bundle}", "{bundle}"],
    ["report", "{bundle}", "-o", "{tmp}/report.html"], ["history", "add", "{bundle}", "--store", "{tmp}/store"],
], ids=lambda c: c[0] + ("-" + c[1] if c[0] == "history" else ""))
def test_commands_on_results_import_no_framework(jax_run, tmp_path, command):
    bundle = jax_run[2]
    args = [a.format(bundle=bundle, tmp=tmp_path) for a in command]
    proc, loaded = probe(*args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert loaded == set(), f"xmfu {' '.join(command)} imported {sorted(loaded)}"


def test_history_reading_imports_no_framework(jax_run, tmp_path, cli):
    pytest.importorskip("pyarrow")
    store = str(tmp_path / "store")
    assert cli("history", "add", str(jax_run[2]), "--store", store).returncode == 0  # its imports: history-add above
    for action in ("trend", "check"):
        proc, loaded = probe("history", action, "--store", store, "--metric", "tflops", cwd=tmp_path)
        assert proc.returncode == 0 and loaded == set(), (action, proc.stderr, loaded)
