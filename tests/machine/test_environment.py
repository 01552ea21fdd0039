"""What environment.json records besides the devices: package versions and the allow-listed variables."""

from __future__ import annotations

from importlib import metadata

from xmfu.harness.machine import environment

# The GPU wheels whose versions decide the compiler and kernels a run gets (issue 25, item 14).
GPU_WHEELS = ("pytorch-triton", "pytorch-triton-rocm", "jax-cuda12-plugin", "jax-cuda12-pjrt",
              "jax-cuda13-plugin", "jax-cuda13-pjrt", "jax-rocm7-plugin", "jax-rocm7-pjrt")


def test_gpu_wheels_are_recorded_by_their_pypi_names(monkeypatch):
    installed = {"jax-rocm7-plugin": "0.7.1", "jax-rocm7-pjrt": "0.7.1", "pytorch-triton-rocm": "3.4.0",
                 "jax-cuda12-pjrt": "0.7.1", "pytorch-triton": "3.5.0+git1"}

    def version(name: str) -> str:
        if name in installed:
            return installed[name]
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", version)
    got = environment.package_versions()
    assert all(name in got for name in GPU_WHEELS)
    assert {k: got[k] for k in installed} == installed
    assert got["jax-cuda13-pjrt"] is None  # absent: None, never left out
