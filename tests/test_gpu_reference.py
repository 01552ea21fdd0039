"""The GPU reference script's plumbing (the full run is `make gpu-reference`, a benchmark, not a test)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("gpu_reference", ROOT / "benchmarks" / "gpu_reference.py")
gpu_reference = importlib.util.module_from_spec(spec)
sys.modules["gpu_reference"] = gpu_reference  # dataclasses look their module up
spec.loader.exec_module(gpu_reference)


def test_device_folder_names():
    assert gpu_reference.slug("NVIDIA H100 80GB HBM3", 8) == "nvidia-h100-80gb-hbm3-x8"
    assert gpu_reference.slug("AMD Instinct MI300X", 1) == "amd-instinct-mi300x-x1"


def test_collectives_run_one_rank_per_gpu_under_torchrun(tmp_path):
    part = next(p for p in gpu_reference.PARTS if p.name == "collectives-torch")
    full = gpu_reference.command(part, tmp_path, smoke=False, gpus=8)
    assert full[1:4] == ["-m", "torch.distributed.run", "--standalone"] and "--nproc_per_node=8" in full
    smoke = gpu_reference.command(part, tmp_path, smoke=True, gpus=1)
    assert "--nproc_per_node=2" in smoke and "scale=smoke" in smoke


def test_every_part_composes_at_both_sizes():
    from xmfu.harness.hydra_app import validate_job
    from xmfu.workloads.catalog import build_registry

    for part in gpu_reference.PARTS:
        for extra in ((), part.smoke):
            validate_job([*part.args, *extra], build_registry())
