"""`xmfu doctor`: the facts it reports and the problems it names, here and on made-up machines."""

from __future__ import annotations

import json

from tests.conftest import gpu_device, refused_here
from tests.engine.test_runner import FakeCase, _prepared
from xmfu.harness.engine.registry import Implementation, Registry, WorkloadDef
from xmfu.harness.machine.platform import Platform, cpu_device
from xmfu.harness.suites import doctor


def test_on_a_cpu_machine_the_cpu_and_its_gpu_only_backends_are_notes_not_problems(capsys, monkeypatch):
    """doctor exited 1 on every CPU machine (issue 42 item 12): "no accelerator visible" and each GPU-only backend
    were problems. Without a GPU device node they are notes; with one (a driver, yet no framework sees a GPU) they
    stay problems."""
    gpu_only = ["attention/flash_attn will be skipped: FlashAttention runs on NVIDIA and AMD GPUs only"]
    no_jax = refused_here("jax")  # without JAX (scripts/compat.sh rocm64), jax_cudnn is skipped for that first
    if not no_jax:
        gpu_only.append("attention/jax_cudnn will be skipped: implementation='cudnn' needs an NVIDIA GPU")
    monkeypatch.setattr(doctor, "host_shows_gpu", lambda: False)
    code = doctor.main(["--json"])
    report = json.loads(capsys.readouterr().out)
    assert not any("no accelerator visible" in p or "this is a cpu device" in p for p in report["problems"])
    for said in gpu_only:
        assert any(n.startswith(said) for n in report["notes"]), (said, report["notes"])
    assert not no_jax or f"attention/jax_cudnn will be skipped: {no_jax}" in report["problems"]
    assert code == (1 if report["problems"] else 0)  # only what this stack lacks (a framework) is left
    assert report["facts"]["peaks"]["fp32"]["peak_tflops"] > 0 and report["facts"]["telemetry"]["sampler"] == "cpu"
    assert "collectives" in report["facts"]["backends_skipped"]  # out-of-place all_reduce on torch_dist only
    doctor.main([])
    out = capsys.readouterr().out
    assert "platform: cpu" in out and "note: a CPU machine (no GPU device node)" in out

    monkeypatch.setattr(doctor, "host_shows_gpu", lambda: True)
    assert doctor.main([]) == 1
    out = capsys.readouterr().out
    assert "PROBLEM: no accelerator visible" in out
    for said in gpu_only:
        assert f"PROBLEM: {said}" in out


def test_an_extra_make_install_does_not_bring_is_a_note_and_every_pip_hint_has_its_offline_way():
    registry = Registry()
    registry.add(WorkloadDef("matmul", lambda cfg, dtype, seed: [FakeCase(1)], {
        "helion": Implementation("helion", lambda c, x: (False, "helion is not installed (pip install "
                                                         "'xmfu[helion]')"), lambda c, x: _prepared(1.0)),
        "needs": Implementation("needs", lambda c, x: (False, "triton is not installed (pip install "
                                                        "'xmfu[triton]')"), lambda c, x: _prepared(1.0)),
    }))
    found = doctor.Findings(facts={"device": "cpu"})
    doctor.check_backends(Platform("cpu", (cpu_device(),), "test"), found, registry)
    assert found.notes == ["matmul/helion will be skipped: helion is not installed (pip install 'xmfu[helion]')"]
    assert found.problems == ["matmul/needs will be skipped: triton is not installed (pip install 'xmfu[triton]')"]
    found.facts.update(platform={"kind": "cpu", "reason": "t"}, devices=[], packages={}, peaks={}, nccl=None,
                       telemetry={"sampler": "cpu", "available": True, "fields": {}}, clocks={})
    assert "note: no package index on this node? the same extras come from a wheelhouse" in doctor.render(found)


def test_a_missing_torch_is_named_with_its_own_extra(monkeypatch):
    """The Triton backends said `pip install 'xmfu[triton]'` for a missing torch, which that extra does not bring."""
    import importlib.util

    from xmfu.harness.machine import frameworks

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    assert frameworks.triton_unavailable("cuda") == "torch is not installed (pip install 'xmfu[torch]')"


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
