"""Shared fixtures. Triton's interpreter must be chosen before triton is first imported."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator

os.environ.setdefault("TRITON_INTERPRET", "1")
# XLA's CPU compiler takes seconds per training step and the suite compiles the same small programs many times (in
# this process, in the other xdist worker, in the end-to-end subprocesses, which inherit the environment): share
# JAX's persistent compilation cache between them. Keyed by the program, JAX's version and flags, it changes no
# number a test checks, only how often XLA compiles.
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR",
                      os.path.join(tempfile.gettempdir(), f"xmfu-tests-jax-cache-{os.getuid()}"))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.2")
# Most of an XLA CPU compile is LLVM optimizing the generated code; the tests check numbers and records, not speed,
# so they compile at backend optimization level 0 (measured here: the tiny training step's compile 4.6 s -> 2.0 s,
# the JAX dp/fsdp end-to-end run 56 s -> 37 s), and with XLA's older elemental emitters for fusions instead of its
# MLIR fusion emitters (the same operations, generated faster: with an empty compilation cache, preparing the tiny
# training step took 10.2 and 10.0 s of CPU, 5.3 and 5.1 s without them; the JAX dp/fsdp run 45.5 s -> 25.2 s).
# The flags go into XLA_FLAGS, which each bundle's environment records; benchmarks and users' runs keep XLA's
# defaults. Tests that need forced host devices add to it: xla_flags(). XLA aborts the process on a flag it does not
# know, so the emitter flag is passed only to the jaxlib series it was measured with (constraints.txt): jaxlib 0.11
# no longer has it ("Unknown flag in XLA_FLAGS: --xla_cpu_use_fusion_emitters=false", scripts/compat.sh cuda13-2026).
os.environ["XLA_FLAGS"] = " ".join(dict.fromkeys([
    *os.environ.get("XLA_FLAGS", "").split(), "--xla_backend_optimization_level=0",
    *(["--xla_cpu_use_fusion_emitters=false"] if importlib.util.find_spec("jaxlib") and tuple(
        int(part) for part in importlib.metadata.version("jaxlib").split(".")[:2]) == (0, 10) else [])]))

# The two xdist workers are two tenants of the two cores, the pathology docs/measurement.md ("Threads on a CPU")
# describes: torch's OpenMP pool in each worker (and in each `xmfu` process a test starts, which inherits this
# environment) would take both cores and spin-wait for them. One thread per worker, as torchrun gives each of several
# processes on a host, and idle threads that sleep. The tests check numbers and records, not speed; the tests of
# xmfu's own thread settings (tests/machine/test_threads.py) set their environment themselves.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# Inductor compiles its C++ kernels in a pool of worker processes, one per core by default. In the suite both cores
# are already busy with the two xdist workers, so the pool adds only its processes' start-up: compiling in the test's
# own process, the two torch.compile tests took 122 s of CPU here instead of 135 s.
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

import pytest

from xmfu.harness.config.run_settings import parse_run_config
from xmfu.harness.engine.context import RunContext
from xmfu.harness.machine.platform import DeviceInfo, Platform, cpu_device

# The frameworks a stack may lack (scripts/compat.sh's rocm64 profile has no JAX, as AMD's rocm/pytorch image has
# none). A test that needs one that is not installed is skipped, naming it, instead of failing; so is a test whose
# backend refuses this stack with one of the reasons below (the reason a run's row would carry). Where every
# framework is installed at a supported version (make test), none of this skips anything.
OPTIONAL_FRAMEWORKS = ("jax", "jaxlib", "optax", "torch", "triton")
ENVIRONMENT_REASONS = ("is not installed (pip install 'xmfu[", "is older than xmfu supports",
                       "interpreter cannot run xmfu's kernels", "use jax 0.5 or later")


def refused_here(framework: str) -> str | None:
    """Why every backend of `framework` ("jax", "triton") reports skipped on this stack's CPU, whatever the case, or
    None where they run: JAX not installed (scripts/compat.sh rocm64) or older than its floor, a Triton interpreter
    too old for xmfu's kernels. The reason is the one their rows carry. A test about behaviour that needs the
    framework checks that refusal and skips; where every framework is installed (make test), this is None."""
    from xmfu.harness.machine import compat

    if framework == "triton":
        return compat.triton_interpreter_too_old()
    if importlib.util.find_spec(framework) is None:
        return f"{framework} is not installed (pip install 'xmfu[{framework}]')"
    return compat.too_old(framework)


# A second matmul backend beside torch, for a run with a speedup against its torch baseline: JAX's where it runs,
# else (a stack without JAX) torch.matmul under a test plug-in's name (tests/engine/plugin_samples.py), so what is
# checked of a speedup row does not wait for JAX.
SECOND_MATMUL = "tests.engine.plugin_samples:Matmul" if refused_here("jax") else "jax"


def _missing_framework(exc: BaseException) -> str | None:
    from xmfu.harness.machine import compat

    if compat.triton_interpreter_too_old():  # e.g. a test that imports the kernels: "0 active drivers"
        text = str(exc)
        if "0 active drivers" in text or "only 0-dimensional arrays can be converted" in text:
            return compat.triton_interpreter_too_old()
    if isinstance(exc, ModuleNotFoundError) and exc.name:
        top = exc.name.split(".")[0]
        if top in OPTIONAL_FRAMEWORKS and importlib.util.find_spec(top) is None:
            return f"{top} is not installed here"
    text = str(exc)
    return text if any(reason in text for reason in ENVIRONMENT_REASONS) else None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    try:
        return (yield)
    except Exception as exc:
        why = _missing_framework(exc)
        if why is None:
            raise
        pytest.skip(f"this stack cannot run it: {why.splitlines()[0][:300]}")


def xla_flags(host_devices: int) -> str:
    """XLA_FLAGS for a subprocess with `host_devices` forced CPU devices, keeping the suite's own flags."""
    return f"{os.environ['XLA_FLAGS']} --xla_force_host_platform_device_count={host_devices}"


@pytest.fixture(autouse=True)
def _no_jax_join_outlives_its_test() -> Iterator[None]:
    """A test that joins a fake jax.distributed (tests/machine/test_detect.py) leaves jax_distributed._join saying N
    processes joined; a later in-process run that is interrupted then takes itself for a multi-process JAX run and
    leaves by os._exit (run.py `_leave`), which ends the xdist worker ("worker 'gw0' crashed"). Each test starts
    with the record as it was."""
    from xmfu.harness.machine import jax_distributed

    saved = dict(jax_distributed._join)
    yield
    jax_distributed._join.clear()
    jax_distributed._join.update(saved)


@pytest.fixture(scope="session", autouse=True)
def _absl_writes_to_the_real_stderr() -> None:
    """absl's log handler (optax imports absl.logging) keeps the sys.stderr of the moment it was made, which under
    pytest is pytest's own capture file, and closes that stream when logging is reconfigured unless it is the
    current sys.stderr. An in-process `xmfu run` under capsys reconfigures logging (Hydra's dictConfig closes every
    handler ever made), so the handler closed pytest's capture file and every later test in that worker errored.
    Pointed at the process's real stderr, which absl never closes, the handler leaves pytest's file alone."""
    try:
        from absl import logging as absl_logging
    except ImportError:
        return
    absl_logging.get_absl_handler().python_handler.setStream(sys.__stderr__)


@pytest.fixture
def cli(capsys, monkeypatch, tmp_path) -> Callable[..., subprocess.CompletedProcess]:
    """`xmfu ARGS` in this process through the CLI's `main`, run from tmp_path: exit status, stdout and stderr as
    from a subprocess, without a process's seconds of imports."""
    from xmfu.harness.cli.main import main

    def run(*args: str) -> subprocess.CompletedProcess:
        monkeypatch.chdir(tmp_path)
        capsys.readouterr()
        code = main(list(args))
        out, err = capsys.readouterr()
        return subprocess.CompletedProcess(["xmfu", *args], code, out, err)

    return run


@pytest.fixture
def inductor_quick_cpu_build() -> Iterator[None]:
    """torch.compile on a CPU built for the tests' speed, not the kernels': Inductor's C++ wrapper builds each compiled
    graph as one library instead of one per kernel (fewer g++ runs, each paying the fixed cost of loading the 154 MB
    precompiled header and linking), and the kernels are scalar loops instead of SIMD ones (the same operations;
    choosing the vector tiling and building vector code is most of the rest). The one-block training step, CPU
    (user+sys) with its g++ runs, measured here in alternating runs: Inductor's defaults 85 and 98 s; the C++ wrapper
    76 and 64 s, then 63 and 62 s; the C++ wrapper with scalar kernels 52 and 55 s; the same losses to 6 digits.
    Users' runs keep Inductor's defaults."""
    import torch._inductor.config as inductor_config

    # config.patch, Inductor's own way: monkeypatch.setattr raised AttributeError for cpp_wrapper on torch 2.6
    with inductor_config.patch({"cpp_wrapper": True, "cpp.simdlen": 0}):
        yield


def _expected_seconds(item: pytest.Item) -> float:
    slow = item.get_closest_marker("slow")
    return slow.kwargs.get("seconds", 10) if slow else 0


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests marked slow run first, the slowest (`@pytest.mark.slow(seconds=N)`, measured cold on 2 cores) first
    of all: pytest-xdist hands each worker a contiguous share and the idle one steals from the other's tail, so a
    slow test at the end of a queue would leave one core idle while it finishes."""
    items.sort(key=_expected_seconds, reverse=True)  # stable: the rest keep their order


QUICK_TIMING = {"warmup_s": 0.0, "warmup_min_iters": 1, "min_samples": 3, "max_samples": 6, "round_samples": 3,
                "target_rel_ci": 0.5, "max_time_s": 1.0, "bootstrap_resamples": 100}


def run_config(**overrides):
    data = {"workload": {"name": "matmul", "sizes": [64]}, "backends": ["torch"], "dtype": "fp32",
            "timing": dict(QUICK_TIMING), "mamf": {}}
    data.update(overrides)
    return parse_run_config(data, {"matmul": ["torch", "triton", "jax"], "fake": ["good", "bad", "absent",
                                                                                 "wrong"]})


@pytest.fixture
def cpu_ctx() -> RunContext:
    return RunContext(run_config(), Platform("cpu", (cpu_device(),), "test"))


def gpu_device(name: str, sms: int | None = None, memory_gb: float = 80, **kw) -> DeviceInfo:
    return DeviceInfo(kind=kw.pop("kind", "cuda"), name=name, vendor=kw.pop("vendor", "nvidia"),
                      memory_bytes=int(memory_gb * 1e9), multiprocessors=sms, **kw)
