"""The wheel, installed into a fresh venv, runs from its own files: configs, peak table, console script.

Cheap on purpose: the wheel is built from a copy of the source without build isolation (this environment's
setuptools, no download), installed with --no-deps by this environment's pip (`pip --python`, so the venv needs
no pip of its own), and the venv borrows this environment's site-packages for torch, JAX, Hydra and NumPy through
a .pth file (`--system-site-packages` alone would show the base interpreter's, not those of the venv the tests run
in). Paths in a .pth file are appended after the venv's own site-packages, and .pth files inside them are not
run, so `xmfu` can only come from the wheel.
"""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from xmfu.harness.results.bundle.validator import validate_bundle

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]
SOURCE = ("harness", "kernels", "workloads", "configs", "pyproject.toml", "README.md", "xmfu")


def _run(*cmd: str | Path, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, timeout=300, env=env,
                          check=False)
    assert proc.returncode == 0, f"{cmd}\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel, built from a copy of the sources the wheel is made of."""
    pytest.importorskip("setuptools", reason="the wheel is built without build isolation")
    tmp = tmp_path_factory.mktemp("wheel")
    started = time.perf_counter()
    src = tmp / "src"
    src.mkdir()
    for name in SOURCE:
        copy = shutil.copytree if (ROOT / name).is_dir() else shutil.copy2
        copy(ROOT / name, src / name, **({"ignore": shutil.ignore_patterns("__pycache__")} if copy is shutil.copytree
                                         else {}))
    _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
         "-w", tmp / "dist", src, cwd=tmp)
    print(f"wheel built in {time.perf_counter() - started:.1f} s")
    return next((tmp / "dist").glob("xmfu-*.whl"))


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """A venv holding only the wheel (and what it borrows); returns its bin folder and a clean environment."""
    tmp = tmp_path_factory.mktemp("venv")
    started = time.perf_counter()
    venv = tmp / "venv"
    _run(sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", venv, cwd=tmp)
    venv_site = Path(_run(venv / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_path('purelib'))",
                          cwd=tmp).stdout.strip())
    (venv_site / "xmfu-test-borrowed.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    _run(sys.executable, "-m", "pip", "--python", venv / "bin" / "python", "install", "--no-deps", "--no-index",
         "-q", wheel, cwd=tmp)
    print(f"wheel installed in {time.perf_counter() - started:.1f} s")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TRITON_INTERPRET", "VIRTUAL_ENV")}
    return venv / "bin", env


def test_the_wheel_installs_one_import_name_and_nothing_else_at_the_top(wheel):
    """Nothing but `xmfu` and its dist-info lands in site-packages: no `harness`, `kernels` or `workloads` to
    collide with another distribution's package of that name."""
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/", 1)[0] for name in names}
    assert tops == {"xmfu", f"{wheel.name.split('-')[0]}-{wheel.name.split('-')[1]}.dist-info"}, tops
    for module in ("xmfu/__init__.py", "xmfu/__main__.py", "xmfu/harness/cli/main.py", "xmfu/harness/suites/suite.py",
                   "xmfu/workloads/catalog.py", "xmfu/kernels/matmul.py", "xmfu/harness/conf/config.yaml",
                   "xmfu/harness/machine/peaks.yaml"):
        assert module in names, module
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]


def test_the_installed_package_reads_its_own_configs(installed, tmp_path):
    bin_dir, env = installed
    where = _run(bin_dir / "python", "-c", "import xmfu.harness.config.hydra_app as h; print(h.__file__); "
                 "print(h.CONFIG_DIR); print(sorted(h.config_groups()))", cwd=tmp_path, env=env).stdout.splitlines()
    package = Path(where[0]).parent.parent  # xmfu/harness/config/hydra_app.py -> xmfu/harness
    assert bin_dir.parent in package.parents  # the wheel's copy, not the checkout
    assert Path(where[1]) == package / "conf"
    assert where[2] == str(sorted(["experiment", "hydra", "model", "timing", "workload"]))


def test_the_console_script_composes_and_runs_the_smoke_experiment(installed, tmp_path):
    bin_dir, env = installed
    job = _run(bin_dir / "xmfu", "run", "--cfg", "job", "experiment=smoke", cwd=tmp_path, env=env).stdout
    assert "scale: smoke" in job and "name: matmul" in job
    assert "nvidia-h100-sxm" in _run(bin_dir / "xmfu", "peaks", cwd=tmp_path, env=env).stdout  # peaks.yaml shipped
    run = _run(bin_dir / "xmfu", "run", "experiment=smoke", "backends=[torch]", "workload.sizes=[64]",
               "workload.shapes=[]", "timing.max_time_s=0.3", "timing.warmup_s=0", f"results_dir={tmp_path}",
               cwd=tmp_path, env=env)
    bundle = Path(run.stdout.strip().splitlines()[-1].removeprefix("bundle: "))
    assert validate_bundle(bundle) == []
