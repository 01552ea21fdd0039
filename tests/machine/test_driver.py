"""The driver version recorded with every run: from NVML / amdsmi / the amdgpu module, never a banner line."""

from __future__ import annotations

import subprocess

from tests.fakes.amdsmi_fake import FakeAmdGpu, FakeAmdSmi
from tests.fakes.pynvml_fake import FakeGpu, FakePynvml
from xmfu.harness.machine.driver import driver_version

# `rocm-smi --showdriverversion` begins with blank lines and a banner (rocm-smi output as in ROCm/ROCm#2410)
ROCM_SMI = ("\n\n========================= ROCm System Management Interface =========================\n"
            "=========================== Version of System Component ============================\n"
            "Driver version: 6.1.5\n"
            "====================================================================================\n")


def _run_printing(text):
    def run(cmd, **kw):
        return subprocess.CompletedProcess(cmd, 0, stdout=text, stderr="")
    return run


def test_rocm_driver_from_amdsmi():
    assert driver_version("rocm", amdsmi=FakeAmdSmi("6.2.0")) == ("6.8.5", "amdsmi_get_gpu_driver_info")


def test_rocm_driver_from_the_amdgpu_module_then_rocm_smi_never_its_banner(tmp_path):
    version = tmp_path / "version"
    version.write_text("6.8.5\n")
    broken = FakeAmdSmi("7.0.2", [FakeAmdGpu(driver_version="")])  # 7.0 says "N/A"
    assert driver_version("rocm", amdsmi=broken, sysfs=version) == ("6.8.5", "/sys/module/amdgpu/version")
    found, source = driver_version("rocm", amdsmi=broken, sysfs=tmp_path / "absent", which=lambda _: "/x",
                                   run=_run_printing(ROCM_SMI))
    assert found == "6.1.5" and source == "rocm-smi --showdriverversion"
    nothing, why = driver_version("rocm", amdsmi=broken, sysfs=tmp_path / "absent", which=lambda _: None)
    assert nothing is None and "N/A" in why


def test_nvidia_driver_from_nvml_else_nvidia_smi():
    assert driver_version("cuda", nvml=FakePynvml([FakeGpu()])) == ("570.86.15", "nvmlSystemGetDriverVersion")
    broken = object()  # a pynvml whose every call fails (no libnvidia-ml.so.1, no driver)
    found = driver_version("cuda", nvml=broken, which=lambda _: "/x", run=_run_printing("575.51.03\n"))
    assert found == ("575.51.03", "nvidia-smi --query-gpu=driver_version")


def test_no_driver_on_a_cpu():
    assert driver_version("cpu") == (None, "no GPU driver on a cpu platform")
