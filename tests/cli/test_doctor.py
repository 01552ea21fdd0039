"""`xmfu doctor`: the facts it reports and the problems it names, here and on made-up machines."""

from __future__ import annotations

import json

from tests.conftest import gpu_device
from tests.engine.test_runner import FakeCase, _prepared
from xmfu.harness.engine.registry import Implementation, Registry, WorkloadDef
from xmfu.harness.machine.platform import Platform, cpu_device
from xmfu.harness.suites import doctor


def test_on_this_cpu_it_names_the_missing_accelerator_and_the_skipped_backends(capsys):
    assert doctor.main([]) == 1
    out = capsys.readouterr().out
    assert "platform: cpu" in out and "PROBLEM: no accelerator visible" in out
    assert "attention/jax_cudnn will be skipped: implementation='cudnn' needs an NVIDIA GPU" in out
    assert doctor.main(["--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["facts"]["peaks"]["fp32"]["peak_tflops"] > 0 and report["facts"]["telemetry"]["sampler"] == "cpu"
    assert "collectives" in report["facts"]["backends_skipped"]  # out-of-place all_reduce on torch_dist only


def test_a_gpu_without_its_telemetry_package_is_a_problem(monkeypatch):
    plat = Platform("cuda", (gpu_device("NVIDIA H100 80GB HBM3", 132, compute_capability="9.0"),), "test")
    monkeypatch.setattr(doctor, "_version", lambda name: None if name == "nvidia-ml-py" else "1.0")
    found = doctor.Findings()
    doctor.check_packages(plat, found)
    doctor.check_devices(plat, found)
    assert found.problems == ["nvidia-ml-py is not installed: NVIDIA telemetry (NVML) will not run"]
    assert found.facts["peaks"]["bf16"]["peak_tflops"] > 900


def test_an_unknown_gpu_has_no_peak(monkeypatch):
    plat = Platform("cuda", (gpu_device("NVIDIA Imaginary X1", 10),), "test")
    found = doctor.Findings()
    doctor.check_devices(plat, found)
    assert any("no datasheet peak for 'NVIDIA Imaginary X1'" in p for p in found.problems)


def test_a_backend_that_cannot_run_any_case_or_crashes_is_named():
    def crashes(case, ctx):
        raise ImportError("libcudart.so.12: cannot open shared object file")

    registry = Registry()
    registry.add(WorkloadDef("matmul", lambda cfg, dtype, seed: [FakeCase(1), FakeCase(2)], {
        "good": Implementation("good", lambda c, x: (True, ""), lambda c, x: _prepared(1.0)),
        "half": Implementation("half", lambda c, x: (c.size == 1, "only size 1"), lambda c, x: _prepared(1.0)),
        "bad": Implementation("bad", crashes, lambda c, x: _prepared(1.0)),
    }))
    found = doctor.Findings()
    doctor.check_backends(Platform("cpu", (cpu_device(),), "test"), found, registry)
    assert found.problems == [
        "matmul/bad will be skipped: ImportError: libcudart.so.12: cannot open shared object file"]
    assert found.facts["backends_skipped"]["matmul"]["half"] == ["only size 1"]  # partly: a fact, not a problem


def test_rocms_triton_counts_as_triton(monkeypatch):
    """ROCm's torch ships Triton as the distribution pytorch-triton-rocm (import name triton)."""
    from importlib import metadata

    def version(dist):
        if dist in ("triton", "nvidia-ml-py"):
            raise metadata.PackageNotFoundError(dist)
        return "3.2.0+gitabcdef" if dist == "pytorch-triton-rocm" else "1.0"

    monkeypatch.setattr(doctor.metadata, "version", version)
    found = doctor.Findings()
    doctor.check_packages(Platform("rocm", (gpu_device("AMD Instinct MI300X", 304, kind="rocm", vendor="amd"),),
                                   "test"), found)
    assert found.facts["packages"]["triton"] == "3.2.0+gitabcdef"
    assert not any(p.startswith("triton is not installed") for p in found.problems)


def test_doctor_names_the_device_type_vendor_stacks_and_says_untried_devices_are_unmeasured(monkeypatch):
    """issue 29 item 5: the device type, the Neuron SDK / SynapseAI / oneAPI versions that can be read, and the
    plain statement that none of these devices has been measured."""
    from xmfu.harness.machine import vendor_stack
    from xmfu.harness.machine.platform import DeviceInfo, Platform
    from xmfu.harness.suites import doctor

    versions = {"torch-neuronx": "2.9.0.2.11", "neuronx-cc": "2.21.33363.0"}
    monkeypatch.setattr(doctor, "vendor_stacks", lambda: vendor_stack.vendor_stacks(
        version=versions.get, driver=lambda m: "2.26.5.0" if m == "neuron" else None))
    found = doctor.Findings()
    plat = Platform(kind="neuron", devices=(DeviceInfo(kind="neuron", name="Trainium2", vendor="aws"),), reason="t")
    doctor.check_vendor_stack(plat, found)
    stacks = found.facts["vendor_stacks"]
    assert stacks["neuron_sdk"]["present"] and stacks["neuron_sdk"]["driver"] == "2.26.5.0"
    assert not stacks["synapseai"]["present"] and found.facts["device_type"] == "neuron"
    assert "not been measured" in found.facts["not_measured"]
