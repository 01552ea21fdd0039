"""benchmarks/reference_node.sh end to end on a CPU, as on a node without a package index: the offline install from a
wheelhouse into an image's Python, `xmfu doctor`, a part of the reference set at smoke sizes, one archive out; then
a second call that skips what is done. The image is a venv that sees this environment's packages (torch, Hydra...),
as a vendor image has its own; its pip can reach nothing (PIP_NO_INDEX, no configuration file)."""

from __future__ import annotations

import importlib
import json
import os
import shutil
import site
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "reference_node.sh"
SOURCE = ("harness", "kernels", "workloads", "configs", "pyproject.toml", "README.md", "xmfu")
pytestmark = pytest.mark.e2e


def _wheelhouse(tmp_path: Path) -> Path:
    """xmfu's wheel with the manifest scripts/wheelhouse.py writes; its dependencies are the image's own."""
    src, dest = tmp_path / "src", tmp_path / "wheelhouse"
    for name in SOURCE:
        copy = shutil.copytree if (ROOT / name).is_dir() else shutil.copy2
        copy(ROOT / name, src / name, **({"ignore": shutil.ignore_patterns("__pycache__")} if copy is shutil.copytree
                                         else {}))
    # A version of its own, so that pip installs the wheel rather than taking this environment's xmfu for it.
    init = src / "harness" / "__init__.py"
    init.write_text(init.read_text().replace('__version__ = "', '__version__ = "99+node.'))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
                    "-w", str(dest), str(src)], check=True, timeout=300, env=_offline())
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        wheelhouse = importlib.import_module("wheelhouse")
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    wheel = next(dest.glob("xmfu-*.whl"))
    files = [{"name": "xmfu", "version": wheel.name.split("-")[1], "file": wheel.name, "bytes": wheel.stat().st_size,
              "sha256": __import__("hashlib").sha256(wheel.read_bytes()).hexdigest()}]
    settings = {"WHEELHOUSE": str(dest), "WHEELHOUSE_PYTHON": "{}.{}".format(*sys.version_info[:2]),
                "WHEELHOUSE_PLATFORM": "", "WHEELHOUSE_EXTRAS": "", "WHEELHOUSE_ADD": "", "WHEELHOUSE_NUMPY": ""}
    environment = {"python_version": settings["WHEELHOUSE_PYTHON"], "implementation_name": "cpython"}
    wheelhouse.write_manifest(dest, settings, files, [], environment)
    return dest


def _offline(**more: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    return {**env, "PIP_NO_INDEX": "1", "PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1", **more}


def _image(tmp_path: Path) -> Path:
    """A Python whose packages are this environment's (a .pth file names them; .pth files inside them are not run,
    so xmfu comes from what the install puts there or from the checkout, never from this environment's editable
    install)."""
    image = tmp_path / "image"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(image)], check=True, timeout=120)
    purelib = subprocess.run([image / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                             capture_output=True, text=True, check=True).stdout.strip()
    (Path(purelib) / "borrowed.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    return image / "bin" / "python"


@pytest.mark.long  # the slow group: make test-slow (48 s of one core here, most of it two installs and doctors)
@pytest.mark.slow(seconds=60)
def test_the_node_script_installs_offline_runs_parts_and_packs_one_file(tmp_path):
    wheelhouse, python = _wheelhouse(tmp_path), _image(tmp_path)
    out, packed = tmp_path / "set", tmp_path / "set.tar.gz"
    env = _offline(PYTHON=str(python), XMFU_PLATFORM="cpu")
    first = subprocess.run(["bash", str(SCRIPT), "--wheelhouse", str(wheelhouse), "--no-venv", "--out", str(out),
                            "matmul"], capture_output=True, text=True, env=env, timeout=600, check=False,
                           cwd=tmp_path)
    log = first.stdout + first.stderr
    assert first.returncode == 0, log
    assert "every file matches its sha256" in log and "matmul: complete" in log
    assert "doctor: exit 1, 2 problems named" in log or "doctor: exit " in log  # a CPU is a problem to the doctor
    assert (out / "doctor.txt").read_text().startswith("$ xmfu doctor")
    state = json.loads((out / "parts" / "matmul.json").read_text())
    assert state["status"] == "complete"
    with tarfile.open(packed) as tar:
        names = tar.getnames()
    assert "set/doctor.txt" in names and "set/summary.md" in names and any(n.endswith("/cases.jsonl") for n in names)
    valid = subprocess.run([python, "-m", "xmfu", "validate", str(packed)], capture_output=True, text=True, env=env,
                           cwd=tmp_path, timeout=120, check=False)
    assert valid.returncode == 0 and ": valid" in valid.stdout, valid.stdout + valid.stderr
    probe = "import xmfu, xmfu.harness.cli.main as m; print(xmfu.__version__, m.__file__)"
    where = subprocess.run([python, "-c", probe], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60,
                           check=True).stdout
    assert where.startswith("99+node.") and str(python.parents[1]) in where  # the wheel's, in the image

    again = subprocess.run(["bash", str(SCRIPT), "--wheelhouse", str(wheelhouse), "--no-venv", "--out", str(out),
                            "matmul"], capture_output=True, text=True, env=env, timeout=600, check=False,
                           cwd=tmp_path)
    assert again.returncode == 0 and "matmul skipped: complete" in again.stdout, again.stdout + again.stderr


def test_bad_input_is_one_paragraph_and_exit_2(tmp_path):
    for args, says in ((["matmul"], "--wheelhouse DIR is required"), (["--wheelhouse"], "--wheelhouse needs a value"),
                       (["--wheelhouse", str(tmp_path), "--bogus"], "unknown option '--bogus'"),
                       (["--wheelhouse", str(tmp_path / "none")], "no wheelhouse there")):
        proc = subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=60,
                              env=_offline(PYTHON=sys.executable, VENV=str(tmp_path / "venv")), check=False)
        assert proc.returncode == 2 and says in proc.stderr, proc.stdout + proc.stderr
