"""Detection through whichever framework is installed, on fakes of real devices (tests/fakes).

Plugins are made "installed" the way pip installs them: an importable package on sys.path (jax_cuda12_plugin,
a jax_plugins/xla_rocm7 namespace module, libtpu), so the real look-up is exercised.
"""

from __future__ import annotations

import importlib
import os
import sys

import pytest

from tests.conftest import gpu_device
from tests.fakes import jax_devices as fj
from tests.fakes import torch_cuda as ft
from xmfu.harness.machine.peaks import lookup
from xmfu.harness.machine.platform import Platform, detect

PLUGIN_PACKAGES = {"cuda": "jax_cuda12_plugin", "rocm": "jax_plugins/xla_rocm7", "tpu": "libtpu"}


@pytest.fixture
def machine(monkeypatch, tmp_path):
    """Install fake torch / JAX plugin / jax for one test; the real ones come back afterwards."""
    for name in ("LOCAL_RANK", "RANK", "WORLD_SIZE", "SLURM_JOB_ID", "SLURM_LOCALID", "TORCHELASTIC_RUN_ID",
                 "JAX_PLATFORMS", "TPU_LIBRARY_PATH", "XLA_PYTHON_CLIENT_PREALLOCATE"):
        monkeypatch.setenv(name, "")  # recorded, so whatever detection sets is undone afterwards
        monkeypatch.delenv(name)
    monkeypatch.syspath_prepend(str(tmp_path))

    def install(torch=None, plugin: str | None = None, devices=None, global_devices=None):
        monkeypatch.setitem(sys.modules, "torch", torch)  # None: `import torch` raises ImportError
        if plugin:
            package = tmp_path / PLUGIN_PACKAGES[plugin]
            package.mkdir(parents=True)
            (package / "__init__.py").write_text("")
            importlib.invalidate_caches()
        module = fj.fake_jax(devices or [fj.cpu_device()], global_devices)
        monkeypatch.setitem(sys.modules, "jax", module)
        return module

    return install


# (what is installed, kind, name, SMs/CUs/TensorCores, peak-table entry)
MACHINES = {
    "torch CUDA H100": (dict(torch=ft.torch_cuda(8)), "cuda", "NVIDIA H100 80GB HBM3", 132, "nvidia-h100-sxm"),
    "torch ROCm MI300X": (dict(torch=ft.torch_rocm(8)), "rocm", "AMD Instinct MI300X", 304, "amd-mi300x"),
    "JAX-only CUDA H100": (dict(plugin="cuda", devices=[fj.h100(0), fj.h100(1)]), "cuda",
                           "NVIDIA H100 80GB HBM3", 132, "nvidia-h100-sxm"),
    "JAX-only ROCm MI300X": (dict(plugin="rocm", devices=[fj.mi300x(0)]), "rocm", "AMD Instinct MI300X", 304,
                             "amd-mi300x"),
    "TPU v5e": (dict(plugin="tpu", devices=[fj.tpu("TPU v5 lite", i) for i in range(4)]), "tpu", "TPU v5 lite", 1,
                "google-tpu-v5e"),
    "TPU v5p": (dict(plugin="tpu", devices=[fj.tpu("TPU v5", i) for i in range(4)]), "tpu", "TPU v5", 2,
                "google-tpu-v5p"),
    "TPU v6e": (dict(plugin="tpu", devices=[fj.tpu("TPU v6 lite", i) for i in range(4)]), "tpu", "TPU v6 lite", 1,
                "google-tpu-v6e"),
    # 4 chips, 8 JAX devices: the table's TPU7x row is per device (half a chip)
    "TPU7x": (dict(plugin="tpu", devices=[fj.tpu("TPU7x", i) for i in range(8)]), "tpu", "TPU7x", 1, "google-tpu7x"),
}


@pytest.mark.parametrize("label", MACHINES)
def test_detection_names_the_device_and_finds_its_peak(machine, label):
    installed, kind, name, units, entry = MACHINES[label]
    machine(**installed)
    plat = detect()
    assert (plat.kind, plat.device.name, plat.device.multiprocessors) == (kind, name, units), plat
    peak = lookup(plat.device, "bf16")
    assert peak.entry == entry and peak.tflops and not peak.note, peak


def test_jax_gpu_facts_come_from_the_device_attributes(machine):
    machine(plugin="cuda", devices=[fj.h100(0)])
    nvidia = detect().device
    assert (nvidia.vendor, nvidia.compute_capability, nvidia.jax_device_kind) == ("nvidia", "9.0",
                                                                                   "NVIDIA H100 80GB HBM3")
    assert nvidia.memory_bytes == fj.h100().memory_stats()["bytes_limit"]


def test_jax_rocm_device_keeps_its_arch_and_infinity_cache(machine):
    machine(plugin="rocm", devices=[fj.mi300x(0)])
    amd = detect().device
    assert (amd.vendor, amd.arch, amd.compute_capability) == ("amd", "gfx942", None)
    assert amd.cache_bytes == 256 * 2**20


def test_a_machine_with_no_jax_plugin_never_asks_jax(machine):
    jax = machine(torch=ft.torch_cpu_only())

    def refuse(*args, **kwargs):
        raise AssertionError("jax was asked for devices on a machine with no JAX accelerator plugin")

    jax.local_devices = jax.devices = refuse
    assert detect().kind == "cpu"
    assert "JAX_PLATFORMS" not in os.environ


def test_a_jax_gpu_run_never_pins_jax_to_the_cpu(machine):
    from xmfu.harness.machine.jax_distributed import jax_unavailable

    machine(plugin="cuda", devices=[fj.h100(0)])
    plat = detect()
    assert jax_unavailable(plat.kind) is None
    assert "JAX_PLATFORMS" not in os.environ


def test_a_multi_process_jax_run_joins_before_it_looks_at_devices(machine, monkeypatch):
    jax = machine(plugin="cuda", devices=[fj.h100(1)], global_devices=[fj.h100(0), fj.h100(1)])
    seen_before_join = []
    local = jax.local_devices
    jax.local_devices = lambda *a, **k: seen_before_join.append(not jax.distributed.calls) or local(*a, **k)
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "x")
    for key, value in {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"}.items():
        monkeypatch.setenv(key, value)
    plat = detect()
    assert seen_before_join == [False]  # jax.distributed.initialize must precede the first device query
    assert jax.distributed.calls[0]["local_device_ids"] == [1]
    assert plat.kind == "cuda" and plat.device.name == "NVIDIA H100 80GB HBM3"


def test_device_gpu_without_an_accelerator_is_a_clear_error(machine):
    from xmfu.harness.machine.platform import NoAcceleratorError

    machine(torch=ft.torch_cpu_only())
    with pytest.raises(NoAcceleratorError) as info:
        detect("gpu")
    message = str(info.value)
    assert isinstance(info.value, RuntimeError) and "\n" not in message
    assert "device=gpu" in message and "CPU-only" in message and "device=cpu" in message


def test_cli_reports_a_missing_gpu_in_one_paragraph(machine, capsys):
    from xmfu.harness.cli.main import main

    machine(torch=None)
    assert main(["env", "--device", "gpu"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("xmfu: ") and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_each_process_measures_its_local_rank_device(monkeypatch):
    plat = Platform("cuda", (gpu_device("H100", index=0), gpu_device("H100", index=1)), "test")
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    monkeypatch.setenv("SLURM_LOCALID", "1")  # Slurm sets no LOCAL_RANK
    assert plat.device.index == 1


def test_a_plugin_without_its_device_leaves_a_cpu_run(machine, monkeypatch):
    """The real jax (a CPU jaxlib here) with a CUDA plugin package present but no GPU: JAX's default backend is
    its CPU, so the run is a CPU one."""
    import jax as real_jax

    machine(torch=ft.torch_cpu_only(), plugin="cuda")
    monkeypatch.setitem(sys.modules, "jax", real_jax)
    plat = detect()
    assert plat.kind == "cpu" and plat.reason == "no accelerator visible to torch or jax"


def test_torch_backends_step_aside_where_only_jax_drives_the_accelerator(machine):
    from xmfu.harness.machine.frameworks import torch_unavailable, triton_unavailable

    machine(torch=ft.torch_cpu_only(), plugin="cuda", devices=[fj.h100()])
    kind = detect().kind
    assert "sees no GPU" in torch_unavailable("bf16", kind) and "sees no GPU" in triton_unavailable(kind)
    assert "does not drive the tpu" in torch_unavailable("bf16", "tpu")  # else torch times the host


def test_torch_of_the_other_vendor_is_not_used(machine):
    from xmfu.harness.machine.frameworks import torch_unavailable

    machine(torch=ft.torch_cuda())
    assert torch_unavailable("bf16", "rocm") == "this torch is a cuda build and the run measures a rocm device"
    assert torch_unavailable("bf16", "cuda") is None


class UntouchableTorch:
    """Stands for an installed torch that a JAX-only run must not use (any attribute read fails the test)."""

    def __getattr__(self, name):
        raise AssertionError(f"torch.{name} was used by a run that has no torch backend")


def test_a_jax_only_run_finds_the_gpu_through_jax_alone(machine):
    machine(torch=UntouchableTorch(), plugin="cuda", devices=[fj.h100(0)])
    plat = detect(frameworks=("jax",))
    assert (plat.kind, plat.reason) == ("cuda", "jax sees 1 cuda device(s)")


def test_a_jax_only_run_on_a_cpu_host_never_asks_torch(machine, monkeypatch):
    monkeypatch.setattr("xmfu.harness.machine.platform.host_shows_gpu", lambda: False)
    machine(torch=UntouchableTorch())
    plat = detect(frameworks=("jax",))
    assert (plat.kind, plat.reason) == ("cpu", "no accelerator visible to jax")


def test_a_gpu_jax_cannot_see_is_still_the_one_measured(machine, monkeypatch):
    """A CPU-only jaxlib beside a GPU: torch is asked after all, so the JAX backends report why they cannot run
    instead of the run timing the host."""
    from xmfu.harness.machine.frameworks import jax_backend_matches

    monkeypatch.setattr("xmfu.harness.machine.platform.host_shows_gpu", lambda: True)
    jax = machine(torch=ft.torch_cuda(1))
    jax.default_backend = lambda: "cpu"
    plat = detect(frameworks=("jax",))
    assert (plat.kind, plat.reason) == ("cuda", "torch sees 1 cuda device(s)")
    assert "install the jax build for cuda" in jax_backend_matches(plat.kind)[1]


def test_a_torch_only_run_still_finds_a_gpu_only_jax_sees(machine):
    machine(torch=ft.torch_cpu_only(), plugin="cuda", devices=[fj.h100(0)])
    assert detect(frameworks=("torch",)).kind == "cuda"  # the torch backends then say their build sees no GPU
