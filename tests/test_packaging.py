"""What the wheel holds: pyproject.toml lists every package, and configs/ ships inside as `harness.conf`."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from harness.hydra_app import CONFIG_DIR, config_groups

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parent.parent
SETUPTOOLS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_every_package_folder_is_listed_and_nothing_else():
    folders = {".".join(p.parent.relative_to(ROOT).parts) for top in ("harness", "kernels", "workloads")
               for p in (ROOT / top).rglob("__init__.py")}
    assert set(SETUPTOOLS["packages"]) == folders | {"harness.conf"}


def test_configs_ship_as_harness_conf_and_every_file_is_matched():
    assert SETUPTOOLS["package-dir"] == {"harness.conf": "configs"}
    assert SETUPTOOLS["package-data"]["harness.conf"] == ["**/*.yaml"]
    files = [p for p in (ROOT / "configs").rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    assert files and all(p.suffix == ".yaml" for p in files), [str(p) for p in files if p.suffix != ".yaml"]


def test_a_checkout_reads_its_own_configs():
    # In an installed wheel CONFIG_DIR is harness/conf (tests/e2e/test_wheel.py); from a checkout, configs/.
    assert CONFIG_DIR == ROOT / "configs"
    assert set(config_groups()) == {"workload", "timing", "model", "experiment", "hydra"}
