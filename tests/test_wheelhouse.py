"""The wheelhouse for offline nodes (scripts/wheelhouse.py, `make wheelhouse`) and the install from it
(`scripts/install.sh --offline DIR`, scripts/wheelhouse_check.py), without a network: the wheels are small ones made
here, and every pip runs with --no-index, no configuration file and no find-links but the test's own.

Not here, because it needs a package index and minutes: a real wheelhouse (xmfu and Hydra, Matplotlib...) for Python
3.11 and 3.12, the offline install over a torch image followed by `xmfu run experiment=smoke`, and the online installs
on a numpy-1.26 image and under PIP_CONSTRAINT: scripts/install_scenarios.sh runs those (docs/install.md).
"""

from __future__ import annotations

import base64
import hashlib
import importlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.test_install import FAKE_PYTHON

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "scripts"
HERE = "{}.{}".format(*sys.version_info[:2])


def script(name: str):
    """A module of scripts/ (they import each other by bare name, as `python scripts/x.py` runs them)."""
    if str(SCRIPTS) not in sys.path:
        sys.path.insert(0, str(SCRIPTS))
    return importlib.import_module(name)


def make_wheel(folder: Path, name: str, version: str, requires: tuple[str, ...] = (),
               extras: tuple[str, ...] = ()) -> Path:
    """A pure-Python wheel (PEP 427) holding one module and its METADATA, RECORD with digests."""
    dist = f"{name.replace('-', '_')}-{version}"
    files = {
        f"{name.replace('-', '_')}/__init__.py": f"__version__ = {version!r}\n",
        f"{dist}.dist-info/METADATA": "\n".join(
            ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}",
             *(f"Provides-Extra: {e}" for e in extras), *(f"Requires-Dist: {r}" for r in requires)]) + "\n",
        f"{dist}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: xmfu-tests\nRoot-Is-Purelib: true\n"
                                   "Tag: py3-none-any\n",
    }
    record = [f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).decode().rstrip('=')},"
              f"{len(text.encode())}" for path, text in files.items()]
    files[f"{dist}.dist-info/RECORD"] = "\n".join([*record, f"{dist}.dist-info/RECORD,,"]) + "\n"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for inside, text in files.items():
            archive.writestr(inside, text)
    return path


@pytest.fixture
def index(tmp_path) -> Path:
    """A folder of wheels pip may use (--find-links): a small xmfu, its dependency, a stand-in numpy, an
    antlr4-python3-runtime (what scripts/wheelhouse.py builds from its sdist), an extra's package and a stand-in
    setuptools (which every wheelhouse holds, for an editable install on the node)."""
    folder = tmp_path / "index"
    make_wheel(folder, "setuptools", "99.0")
    make_wheel(folder, "fakedep", "1.0")
    make_wheel(folder, "fakehistory", "2.0")
    make_wheel(folder, "numpy", "1.26.4")
    make_wheel(folder, "antlr4-python3-runtime", "4.9.3")
    make_wheel(folder, "xmfu", "0.0.1", ("fakedep>=1", "numpy>=1.24", 'fakehistory; extra == "history"',
                                         'jax[cuda13]; extra == "cuda13"'), ("history", "cuda13"))
    return folder


def offline_env(**more: str) -> dict[str, str]:
    """The environment of a pip that can reach nothing: no index, no configuration files (this machine's name
    extra indexes and find-links), no find-links from the environment (pip's docs: PIP_CONFIG_FILE=os.devnull
    loads none; pip/_internal/configuration.py)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    return {**env, "PIP_NO_INDEX": "1", "PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1", **more}


def build(index: Path, dest: Path, *args: str, status: int = 0) -> subprocess.CompletedProcess:
    constraints = index.parent / "pins.txt"
    constraints.write_text("fakedep==1.0\nnumpy==1.26.4\n")
    proc = subprocess.run(
        [sys.executable, str(SCRIPTS / "wheelhouse.py"), "--dest", str(dest), "--project",
         str(index / "xmfu-0.0.1-py3-none-any.whl"), "--constraints", str(constraints),
         "--pip-option=--no-index", f"--pip-option=--find-links={index}", *args],
        capture_output=True, text=True, env=offline_env(), timeout=120, check=False)
    assert proc.returncode == status, proc.stdout + proc.stderr
    return proc


def test_platform_tags_list_every_older_manylinux_because_pip_matches_them_exactly():
    tags = script("wheelhouse").platform_tags("manylinux_2_28_x86_64")
    assert tags[:2] == ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64"] and "manylinux_2_17_x86_64" in tags
    assert tags[-3:] == ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"]
    assert script("wheelhouse").platform_tags("macosx_14_0_arm64") == ["macosx_14_0_arm64"]


@pytest.mark.parametrize(("name", "add", "out"), [
    ("numpy", "", True), ("torch", "", True), ("nvidia-cublas", "", True), ("jax-cuda13-plugin", "", True),
    ("triton", "", True), ("nvidia-ml-py", "", False), ("hydra-core", "", False), ("matplotlib", "", False),
    ("numpy", "numpy==1.26.4", False), ("nvidia-cublas", "torch", False), ("jax-cuda13-plugin", "jax[cuda13]", False),
    ("torch", "jax", True),
])
def test_frameworks_are_left_out_unless_named(name, add, out):
    wheelhouse = script("wheelhouse")
    assert wheelhouse.left_out(name, wheelhouse.frameworks_kept(add.split())) is out


def test_markers_and_extras_decide_what_is_required(tmp_path):
    check = script("wheelhouse_check")
    wheels = {"xmfu": make_wheel(tmp_path, "xmfu", "1", ("a", 'b; python_version < "3.0"', 'c; extra == "x"',
                                                            "d[y]")),
              "a": make_wheel(tmp_path, "a", "1"), "d": make_wheel(tmp_path, "d", "1", ('e; extra == "y"',))}
    assert check.missing_requirements(wheels, [("xmfu", frozenset())], set()) == [("e", "d")]
    assert check.missing_requirements(wheels, [("xmfu", frozenset({"x"}))], {"e"}) == [("c", "xmfu")]
    assert check.missing_requirements(wheels, [("xmfu", frozenset())], {"d"}) == []  # installed: its own business
    old = {"python_version": "2.7", "python_full_version": "2.7.18"}
    assert ("b", "xmfu") in check.missing_requirements(wheels, [("xmfu", frozenset())], set(), old)


def test_a_wheelhouse_holds_xmfu_and_its_dependencies_but_no_framework(index, tmp_path):
    dest = tmp_path / "wheelhouse"
    proc = build(index, dest, "--extras", "history")
    manifest = json.loads((dest / "wheelhouse.json").read_text())
    assert {f["name"]: f["version"] for f in manifest["files"]} == {"xmfu": "0.0.1", "fakedep": "1.0",
                                                                      "fakehistory": "2.0", "setuptools": "99.0"}
    assert manifest["left_out"][0]["name"] == "numpy" and manifest["python"] == HERE
    assert sorted(p.name for p in dest.glob("*.whl")) == sorted(f["file"] for f in manifest["files"])
    for entry in manifest["files"]:
        assert hashlib.sha256((dest / entry["file"]).read_bytes()).hexdigest() == entry["sha256"]
    assert (dest / "wheels.txt").read_text().count("==") == len(manifest["files"])
    assert f"{len(manifest['files'])} wheels" in proc.stdout and "left out" in proc.stdout
    assert "numpy 1.26.4" in proc.stdout
    build(index, dest)  # an earlier wheelhouse is replaced
    assert "fakehistory" not in (dest / "wheels.txt").read_text()


@pytest.mark.parametrize(("args", "says"), [
    (("--extras", "cuda13"), "brings jax, a framework"),
    (("--extras", "nosuch"), "has no extra 'nosuch'"),
    (("--python", "3.99"), "no Python 3.99 interpreter"),
    (("--python", "3.9"), "needs Python 3.10 or later"),
    (("--python", "/nonexistent/python"), "nor an interpreter that runs"),
    (("--bogus",), "unrecognized arguments"),
])
def test_bad_wheelhouse_input_is_one_paragraph_and_exit_2(index, tmp_path, args, says):
    proc = build(index, tmp_path / "wh", *args, status=2)
    assert says in proc.stderr and proc.stderr.strip().splitlines()[-1].startswith("xmfu wheelhouse: ")


def test_a_folder_that_is_not_a_wheelhouse_is_never_replaced(index, tmp_path):
    (tmp_path / "wh").mkdir()
    (tmp_path / "wh" / "notes.txt").write_text("mine")
    assert "is not a wheelhouse" in build(index, tmp_path / "wh", status=2).stderr
    assert (tmp_path / "wh" / "notes.txt").read_text() == "mine"


def test_the_check_refuses_a_damaged_copy_and_another_python(index, tmp_path, capsys):
    dest = tmp_path / "wheelhouse"
    build(index, dest)
    check = script("wheelhouse_check")
    manifest = json.loads((dest / "wheelhouse.json").read_text())
    with pytest.raises(SystemExit) as exit_:
        check.check_python(dest, {**manifest, "python": "3.99"})
    assert exit_.value.code == 2 and "WHEELHOUSE_PYTHON=" + HERE in capsys.readouterr().err
    (dest / "fakedep-1.0-py3-none-any.whl").write_bytes(b"not the wheel")
    with pytest.raises(SystemExit):
        check.check_files(dest, manifest)
    assert "does not match the sha256" in capsys.readouterr().err


def test_versions_that_do_not_fit_name_the_numpy_to_resolve_for(monkeypatch):
    check = script("wheelhouse_check")
    manifest = {"settings": {"WHEELHOUSE_PYTHON": "3.12", "WHEELHOUSE_NUMPY": ""},
                "left_out": [{"name": "numpy", "version": "2.4.6"}]}
    monkeypatch.setattr(check.metadata, "version", lambda name: "1.26.4")
    text = check.conflict(Path("wh"), manifest)
    assert "resolved for numpy 2.4.6 and numpy 1.26.4 is installed" in text
    assert "`make wheelhouse WHEELHOUSE_PYTHON=3.12 WHEELHOUSE_NUMPY=1.26.4`" in text
    monkeypatch.setattr(check.metadata, "version", lambda name: "2.4.6")
    assert "WHEELHOUSE_NUMPY" not in check.conflict(Path("wh"), manifest)


def install_offline(dest: Path, python: Path, *args: str, status: int = 0, **env: str) -> subprocess.CompletedProcess:
    proc = subprocess.run(["bash", str(SCRIPTS / "install.sh"), "--offline", str(dest), "--no-venv", *args],
                          capture_output=True, text=True, timeout=300, check=False,
                          env=offline_env(PYTHON=str(python), XMFU_PLATFORM="cpu", **env))
    assert proc.returncode == status, proc.stdout + proc.stderr
    return proc


def test_offline_dry_run_fetches_nothing_and_no_framework_the_wheelhouse_lacks(index, tmp_path):
    dest = tmp_path / "wheelhouse"
    build(index, dest, "--extras", "history")
    python = tmp_path / "python"  # nothing imports on it: torch, JAX and Triton would all be wanted
    python.write_text(FAKE_PYTHON.replace("{real}", sys.executable))
    python.chmod(0o755)
    proc = install_offline(dest, python, "--dry-run", XMFU_TEST_IMPORTABLE="")
    pips = [line for line in proc.stdout.splitlines() if " -m pip install " in line]
    assert len(pips) == 1 and pips[0].startswith(f"+ {python} -m pip install --no-index --find-links {dest} -c ")
    assert pips[0].endswith(" xmfu[history]==0.0.1")  # the wheelhouse's extras, its own xmfu wheel
    assert all(f"{name} does not import and is not in the wheelhouse" in proc.stdout for name in ("torch", "jax"))
    assert "keep_installed.py --installed-only constraints.txt" in proc.stdout
    editable = install_offline(dest, python, "--dry-run", "--editable", XMFU_TEST_IMPORTABLE="")
    assert f"--find-links {dest} -c " in editable.stdout and editable.stdout.count(" -e .[history]") == 1


@pytest.mark.slow(seconds=20)
@pytest.mark.e2e
def test_offline_install_into_an_image_python_names_what_is_missing_and_keeps_what_it_has(index, tmp_path):
    """A venv plays the image's Python: first without numpy (missing: one paragraph, nothing installed), then with a
    numpy of its own and a PIP_CONSTRAINT pinning it, as NGC's images have."""
    dest = tmp_path / "wheelhouse"
    build(index, dest)
    image = tmp_path / "image"
    subprocess.run([sys.executable, "-m", "venv", str(image)], check=True, timeout=120)
    python = image / "bin" / "python"

    def packages() -> set[tuple[str, str]]:
        listed = subprocess.run([python, "-m", "pip", "list", "--format=json"], capture_output=True, text=True,
                                env=offline_env(), check=True).stdout
        return {(p["name"], p["version"]) for p in json.loads(listed)}

    before = packages()
    paragraph = install_offline(dest, python, status=2).stderr.strip().splitlines()[-1]
    assert paragraph.startswith("xmfu wheelhouse: numpy (needed by xmfu; left out of the wheelhouse as a framework")
    assert f"WHEELHOUSE_PYTHON={HERE}" in paragraph and "WHEELHOUSE_ADD=numpy" in paragraph
    assert packages() == before

    subprocess.run([python, "-m", "pip", "install", "-q", "--find-links", str(index), "numpy==1.26.4"],
                   check=True, env=offline_env(), timeout=120)
    (tmp_path / "image-constraint.txt").write_text("numpy==1.26.4\n")
    proc = install_offline(dest, python, PIP_CONSTRAINT=str(tmp_path / "image-constraint.txt"))
    assert "every file matches its sha256" in proc.stdout and "torch does not import" in proc.stdout
    assert packages() >= {("xmfu", "0.0.1"), ("fakedep", "1.0"), ("numpy", "1.26.4")}
