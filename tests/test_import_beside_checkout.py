"""`import xmfu` in a script beside a clone named xmfu (issue 42 item 10): with xmfu installed editable (make install),
Python's path search found the clone's folder first, took it for an empty namespace package, and `xmfu.benchmark`
raised AttributeError. scripts/install.sh --editable adds scripts/xmfu_checkout_finder.py to site-packages, imported
at start-up by a .pth file, as here (site.addsitedir stands in for the environment's site-packages)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = """import site, sys
if len(sys.argv) > 1:
    site.addsitedir(sys.argv[1])  # the environment's site-packages, after setuptools' own .pth
import xmfu
print(xmfu.__file__)
print(xmfu.benchmark.__name__)
"""


def _editable_here() -> bool:
    return any(getattr(f, "__module__", "").startswith("__editable___xmfu_") for f in sys.meta_path)


def _finder_in_environment() -> bool:
    return any((Path(p) / "xmfu-checkout-finder.pth").is_file() for p in sys.path if p)


def _script(folder: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, str(folder / "bench.py"), *args], cwd=folder, capture_output=True,
                          text=True, timeout=120, env={**clean, **env})


@pytest.mark.skipif(not _editable_here(), reason="xmfu is not installed editable in this environment")
def test_a_script_beside_a_clone_named_xmfu_gets_the_installed_xmfu(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "xmfu").symlink_to(ROOT)  # `git clone .../xmfu` here: the clone's folder is named xmfu
    (work / "bench.py").write_text(SCRIPT)
    site = tmp_path / "site-packages"
    site.mkdir()
    shutil.copy(ROOT / "scripts" / "xmfu_checkout_finder.py", site)
    (site / "xmfu-checkout-finder.pth").write_text("import xmfu_checkout_finder\n")  # as install.sh writes it

    before = _script(work)
    if _finder_in_environment():  # made by install.sh --editable (make bench does): the fix is already in place
        assert before.returncode == 0 and before.stdout.split()[1] == "benchmark", before.stderr
    else:  # an editable install made otherwise (pip install -e .): the clone's folder shadows the package
        assert before.returncode == 1 and "module 'xmfu' has no attribute 'benchmark'" in before.stderr

    after = _script(work, str(site))
    assert after.returncode == 0, after.stderr
    installed, name = after.stdout.split()
    assert installed.endswith("/xmfu/__init__.py") and name == "benchmark"

    # a regular package on the path still comes first (PYTHONPATH=checkout runs that checkout's code)
    chosen = _script(work, str(site), PYTHONPATH=str(ROOT))
    assert chosen.returncode == 0 and chosen.stdout.split()[0] == str(ROOT / "xmfu" / "__init__.py")


def test_install_sh_adds_the_finder_to_an_editable_install_only(tmp_path):
    from tests.test_install import plan

    assert any("xmfu_checkout_finder.py" in line for line in plan(tmp_path, "cpu", "", "--editable"))
    assert not any("xmfu_checkout_finder.py" in line for line in plan(tmp_path, "cpu", ""))
