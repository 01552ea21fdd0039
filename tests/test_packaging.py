"""What the wheel holds: one import name, xmfu. pyproject.toml lists every package, package-dir places the
repository's folders under xmfu, and configs/ ships inside as `xmfu.harness.conf`."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from xmfu.harness.config.hydra_app import CONFIG_DIR, config_groups

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parent.parent
SETUPTOOLS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


PLACED = {"xmfu.harness": "harness", "xmfu.workloads": "workloads", "xmfu.kernels": "kernels"}


def test_every_package_folder_is_listed_under_xmfu_and_nothing_else():
    folders = {".".join(["xmfu", *p.parent.relative_to(ROOT).parts]) for top in [*PLACED.values(), "xmfu"]
               for p in (ROOT / top).rglob("__init__.py")}
    folders = {f.replace("xmfu.xmfu", "xmfu") for f in folders}
    assert set(SETUPTOOLS["packages"]) == folders | {"xmfu.harness.conf"}
    assert all(name == "xmfu" or name.startswith("xmfu.") for name in SETUPTOOLS["packages"])
    assert "py-modules" not in SETUPTOOLS  # a top-level module would sit beside xmfu in site-packages


def test_configs_ship_as_harness_conf_and_every_file_is_matched():
    assert SETUPTOOLS["package-dir"] == {**PLACED, "xmfu.harness.conf": "configs"}
    assert SETUPTOOLS["package-data"]["xmfu.harness.conf"] == ["**/*.yaml"]
    files = [p for p in (ROOT / "configs").rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    assert files and all(p.suffix == ".yaml" for p in files), [str(p) for p in files if p.suffix != ".yaml"]


def test_a_checkout_reads_its_own_configs():
    # In an installed wheel CONFIG_DIR is xmfu/harness/conf (tests/e2e/test_wheel.py); from a checkout, configs/.
    assert CONFIG_DIR == ROOT / "configs"
    assert set(config_groups()) == {"workload", "timing", "model", "experiment", "hydra"}


def test_every_extra_is_in_the_install_pages_table():
    """docs/install.md's Extras table lacked `helion` (issue 42 item 12)."""
    import re

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    page = (ROOT / "docs" / "install.md").read_text()
    table = page[page.index("## Extras"):].split("\n## ", 1)[0]
    named = {name for cell in re.findall(r"^\| ([^|]+) \|", table, re.M) for name in re.findall(r"`([\w-]+)`", cell)}
    assert set(extras) - named == set()
