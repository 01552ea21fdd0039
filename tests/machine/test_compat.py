"""The supported range (harness/machine/compat.py): versions compared, what lies outside named, a framework below
its floor refused with the reason while the run goes on, and pyproject.toml and docs/install.md kept in line."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from xmfu.harness.machine import compat, frameworks, jax_distributed
from xmfu.harness.machine.platform import Platform, cpu_device
from xmfu.harness.suites import doctor

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: pytest's own TOML reader there
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[2]
IN_RANGE = {"python": "3.11.7", "numpy": "2.4.6", "torch": "2.13.0", "triton": "3.9.0", "jax": "0.10.2",
            "jaxlib": "0.10.2"}


@pytest.mark.parametrize(("version", "bound", "expected"), [
    ("2.6.0+rocm6.4.1.git1ded221d", "2.6", 0),  # a ROCm build's local label
    ("2.11.0+cu130", "2.13", -1), ("2.13.4", "2.13", 0), ("2.14.0", "2.13", 1),
    ("2.11.0rc1", "2.11", 0),  # a pre-release counts as its release
    ("0.4.38", "0.4.38", 0), ("0.4.37", "0.4.38", -1), ("0.5.0", "0.4.38", 1), ("0.11.2", "0.11", 0),
    ("1.26.4", "1.26", 0), ("1.24.4", "1.26", -1), ("2.5.1", "2.5", 0), ("3", "3.2", -1),
])
def test_versions_compare_by_release_series(version, bound, expected):
    assert compat.compare(version, bound) == expected


def test_nothing_outside_on_the_tested_pins_and_missing_packages_are_not_findings():
    assert compat.outside(IN_RANGE) == []
    assert compat.outside({**IN_RANGE, "jax": None, "jaxlib": None}) == []


def test_older_and_newer_versions_are_named_with_what_follows():
    found = compat.outside({**IN_RANGE, "torch": "2.5.1", "jax": "0.12.0", "numpy": "1.24.4"})
    assert [(f.name, f.side) for f in found] == [("numpy", "old"), ("torch", "old"), ("jax", "new")]
    assert str(found[1]) == ("torch 2.5.1 is older than xmfu supports (2.6 or later): the torch and Triton "
                             "backends report skipped")
    assert str(found[2]).startswith("jax 0.12.0 is newer than xmfu has been tested with (0.11.x)")


def test_a_framework_below_its_floor_refuses_its_backends_and_those_that_build_on_it():
    old_torch = {**IN_RANGE, "torch": "2.5.1"}
    assert "torch 2.5.1 is older" in compat.too_old("torch", old_torch)
    assert "torch 2.5.1 is older" in compat.too_old("triton", old_torch)  # xmfu's Triton kernels take torch tensors
    assert compat.too_old("jax", old_torch) is None
    assert "jaxlib 0.4.30 is older" in compat.too_old("jax", {**IN_RANGE, "jaxlib": "0.4.30"})
    assert compat.too_old("triton", {**IN_RANGE, "triton": "3.9.0", "torch": "2.6.0"}) is None


def test_rocms_triton_is_read_from_its_own_distribution(monkeypatch):
    from importlib import metadata

    def version(dist):
        if dist == "pytorch-triton-rocm":
            return "3.2.0+gitabcdef"
        raise metadata.PackageNotFoundError(dist)

    monkeypatch.setattr(metadata, "version", version)
    assert compat._installed(compat.BY_NAME["triton"]) == "3.2.0+gitabcdef"


def test_the_availability_hooks_give_the_reason(monkeypatch):
    monkeypatch.setattr(compat, "versions", lambda: {**IN_RANGE, "torch": "2.5.1", "jax": "0.4.30"})
    assert "torch 2.5.1 is older than xmfu supports" in frameworks.torch_unavailable("fp32", "cpu")
    assert "torch 2.5.1 is older than xmfu supports" in frameworks.triton_unavailable("cpu")
    if importlib.util.find_spec("jax"):  # a stack without JAX says so first
        assert "jax 0.4.30 is older than xmfu supports" in jax_distributed.jax_unavailable("cpu")


def test_tritons_interpreter_limits_are_refused_on_a_cpu_only(monkeypatch):
    assert compat.triton_interpreter_too_old({"triton": "3.4.0", "numpy": "2.4.6"}) is None
    assert compat.triton_interpreter_too_old({"triton": "3.7.0", "numpy": "2.5.5"}) is None
    assert "fixed in triton 3.7" in compat.triton_interpreter_too_old({"triton": "3.6.0", "numpy": "2.5.5"})
    monkeypatch.setattr(compat, "versions", lambda: {**IN_RANGE, "triton": "3.2.0", "numpy": "1.26.4"})
    why = compat.triton_interpreter_too_old()
    assert why.startswith("triton 3.2.0's interpreter cannot run xmfu's kernels on a machine without a GPU (its "
                          "autotuner asks for a GPU driver")
    assert frameworks.triton_unavailable("cpu") == why
    assert compat.outside() == []  # 3.2 is supported: on a GPU it runs


def test_fsdp_on_a_cpu_needs_streams_that_record_events(monkeypatch):
    import torch

    from xmfu.workloads.transformer import torch_parallel

    dense = SimpleNamespace(moe=False, name="tiny")
    case = SimpleNamespace(parallel="fsdp", distributed=True, model=dense)  # what unavailable() reads of a TrainSpec
    if hasattr(torch.cpu.Stream, "record_event"):
        assert torch_parallel.unavailable(case, "cpu") is None
        monkeypatch.delattr(torch.cpu.Stream, "record_event")  # as torch 2.6's
    assert "torch.cpu.Stream.record_event" in torch_parallel.unavailable(case, "cpu")
    assert torch_parallel.unavailable(case, "cuda") is None


def test_a_run_on_a_too_old_framework_skips_its_backends_with_the_reason_and_goes_on(cli, tmp_path, monkeypatch):
    monkeypatch.setattr(compat, "versions", lambda: {**IN_RANGE, "triton": "3.1.0"})
    done = cli("run", "workload=matmul", "backends=[torch,triton]", "workload.sizes=[64]", "dtype=fp32",
               "timing=quick", f"results_dir={tmp_path / 'r'}", "run_id=old-triton")
    assert done.returncode == 0, done.stderr
    assert "xmfu: triton 3.1.0 is older than xmfu supports (3.2 or later)" in done.stderr
    bundle = tmp_path / "r" / "old-triton"
    rows = {r["backend"]: r for r in map(json.loads, (bundle / "cases.jsonl").read_text().splitlines())}
    assert rows["triton"]["status"] == "skipped" and "triton 3.1.0 is older" in rows["triton"]["reason"]
    assert rows["torch"]["status"] == "ok"
    record = json.loads((bundle / "environment.json").read_text())["compat"]
    assert record["installed"]["triton"] == "3.1.0" and record["supported"]["triton"] == {"floor": "3.2",
                                                                                            "tested": "3.9"}
    assert record["outside"] == [str(compat.Finding("triton", "3.1.0", "old"))]


def test_doctor_names_what_lies_outside(monkeypatch):
    monkeypatch.setattr(compat, "versions", lambda: {**IN_RANGE, "jax": "0.12.0", "jaxlib": "0.12.0"})
    found = doctor.Findings()
    doctor.check_packages(Platform("cpu", (cpu_device(),), "test"), found)
    assert [p for p in found.problems if "newer than xmfu" in p] == [
        f"{name} 0.12.0 is newer than xmfu has been tested with (0.11.x): it runs, but no compat profile has "
        f"checked it (supported range: {compat.DOCS})" for name in ("jax", "jaxlib")]
    assert found.facts["compat"]["installed"]["jax"] == "0.12.0"


def test_pyproject_states_the_same_floors():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["requires-python"] == f">={compat.BY_NAME['python'].floor}"
    assert f"numpy>={compat.BY_NAME['numpy'].floor}" in project["dependencies"]
    extras = project["optional-dependencies"]
    for name in ("torch", "triton", "jax"):  # a floor, never a ceiling: pip must not replace a vendor's build
        assert extras[name][0] == f"{name}>={compat.BY_NAME[name].floor}"
    assert not any(re.match(r"(torch|triton|jax)\b", d) for d in project["dependencies"])


def test_the_install_page_shows_the_table_and_the_front_page_and_pyproject_the_summary():
    assert compat.markdown_table() in (ROOT / "docs" / "install.md").read_text()
    assert f"Supported: {compat.summary()};" in (ROOT / "README.md").read_text()
    assert f"each profile's results): {compat.summary()}\n" in (ROOT / "pyproject.toml").read_text()
