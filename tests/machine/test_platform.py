"""Platform detection from made-up device properties, and the CPU facts parsers."""

from __future__ import annotations

from types import SimpleNamespace

from xmfu.harness.machine.cpu_info import cgroup_cpu_limit, parse_cpuinfo, parse_size, read_cpu_facts
from xmfu.harness.machine.platform import bench_overrides, describe_jax_device, describe_torch_device, detect


def _props(**kw):
    base = {"name": "NVIDIA H100 80GB HBM3", "total_memory": 85 * 10**9, "multi_processor_count": 132,
            "major": 9, "minor": 0, "L2_cache_size": 50 * 2**20}
    base.update(kw)
    return SimpleNamespace(**base)


def test_cuda_device_description():
    d = describe_torch_device(_props(), 0, None)
    assert (d.kind, d.vendor, d.compute_capability, d.multiprocessors) == ("cuda", "nvidia", "9.0", 132)
    assert d.cache_bytes == 50 * 2**20


def test_rocm_device_description_uses_arch_and_infinity_cache():
    props = _props(name="AMD Instinct MI300X", multi_processor_count=304, gcnArchName="gfx942:sramecc+:xnack-")
    d = describe_torch_device(props, 1, "6.2.4")
    assert (d.kind, d.vendor, d.arch, d.index) == ("rocm", "amd", "gfx942:sramecc+:xnack-", 1)
    assert d.cache_bytes == 256 * 2**20
    blank = describe_torch_device(_props(name="", gcnArchName="gfx942"), 0, "6.2")
    assert blank.name == "AMD gfx942"


def test_tpu_description_keeps_device_kind():
    d = describe_jax_device(SimpleNamespace(device_kind="TPU v5 lite", platform="tpu"), 3)
    assert (d.kind, d.jax_device_kind, d.index) == ("tpu", "TPU v5 lite", 3)


def test_cpu_detection_here():
    plat = detect("cpu")
    assert plat.kind == "cpu" and plat.device.cpu["physical_cores"] >= 1
    assert detect().kind == "cpu"  # this test machine has no accelerator
    assert bench_overrides() == "experiment=smoke"


def test_cpuinfo_parsers():
    text = "processor : 0\nmodel name : Test CPU\nflags : fpu avx2 fma\n\nprocessor : 1\nmodel name : other\n"
    info = parse_cpuinfo(text)
    assert info["model name"] == "Test CPU" and info["flags"].split() == ["fpu", "avx2", "fma"]
    assert parse_size("32768K") == 32 * 2**20 and parse_size("2M") == 2 * 2**20
    assert cgroup_cpu_limit("200000 100000") == 2.0 and cgroup_cpu_limit("max 100000") is None


def test_read_cpu_facts_records_clock_source():
    facts = read_cpu_facts()
    assert facts.flags and facts.clock_source


def test_torch_device_identity_uuid_and_pci_bus_id():
    from tests.fakes.torch_cuda_props import h100, mi300x

    d = describe_torch_device(h100(physical=3, pci=(0, 0x5D, 0)), 0, None)
    assert d.uuid == "5a1b2c03-0001-0203-0405-060708090a0b" and d.pci_bus_id == "0000:5d:00.0"
    assert d.as_dict()["uuid"] == d.uuid and d.as_dict()["pci_bus_id"] == d.pci_bus_id
    amd = describe_torch_device(mi300x(pci=(0, 0xAF, 0)), 1, "6.3.42131")
    assert amd.pci_bus_id == "0000:af:00.0" and amd.kind == "rocm" and amd.uuid
    old = describe_torch_device(h100(pci=None, uuid=None), 0, None)  # torch without these attributes
    assert old.uuid is None and old.pci_bus_id is None
    from tests.fakes.torch_cuda_props import CUuuid

    assert describe_torch_device(h100(uuid=CUuuid(bytes(16))), 0, None).uuid is None  # all-zero: unknown
