"""The child process of `xmfu kernels`: compiles its share of the kernels for one vendor's targets and prints one
JSON line per compile. `python -m xmfu.harness.kernelcheck.worker` with the request on stdin (sweep.py writes it).

Triton's launch path, without a GPU: the kernels' own launch code runs on meta tensors (catalog.py) with every
`kernel[grid](...)` captured, and each capture is compiled as the autotuner would compile it (each config's
pre_hook, the heuristics, `JITFunction.run(..., warmup=True)`, which specialises the arguments and compiles without
launching). Triton asks its driver for the target; a stand-in answers with the GPUTarget, since no GPU driver is
here. On AMD targets `torch.version.hip` is set first, so the kernels' modules pick the configs they pick under
ROCm (they choose per vendor at import time), and on NVIDIA ones the persistent GEMM's fp8 promotion is the one a
launch on an NVIDIA GPU takes (`fp8_promotes` asks the tensors' device, which meta tensors do not have).

Its environment (sweep.py): TRITON_CACHE_DIR and TRITON_HOME in the run's temporary folder, TRITON_ALWAYS_COMPILE
(every compile runs ptxas, whose log is the register count), TRITON_DUMP_PTXAS_LOG, no TRITON_INTERPRET.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import resource
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from xmfu.harness.kernelcheck.catalog import ENTRIES, Entry, Job, label
from xmfu.harness.kernelcheck.facts import Facts, amd_facts, dots_in, nvidia_facts
from xmfu.harness.kernelcheck.targets import TARGETS, Target

HIP_VERSION = "6.4.0"  # what torch.version.hip says in the AMD worker: any ROCm build makes the kernels pick AMD's


@dataclass
class Launch:
    kernel: Any  # the Autotuner, Heuristics or JITFunction launched
    args: tuple
    kwargs: dict
    label: str = ""


class _Driver:
    """Triton's driver as JITFunction.run asks it: the target, a device, a stream."""

    def __init__(self, target: Any) -> None:
        self.target = target

    def get_current_target(self) -> Any:
        return self.target

    def get_current_device(self) -> str:
        return f"{self.target.backend}:{self.target.arch}"

    def get_current_stream(self, device: Any = None) -> int:
        return 0

    def is_active(self) -> bool:
        return True

    def get_benchmarker(self) -> Any:  # Triton 3.2's Autotuner asks for it when a kernel module is imported
        def bench(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("xmfu kernels compiles; it never times a kernel")
        return bench


_CAPTURED: list[Launch] = []


def _capture_launches() -> None:
    from triton.runtime.jit import KernelInterface

    def getitem(self: Any, grid: Any) -> Any:
        return lambda *args, **kwargs: _CAPTURED.append(Launch(self, args, kwargs))

    KernelInterface.__getitem__ = getitem


def _jit(kernel: Any) -> Any:
    from triton.runtime.jit import JITFunction

    while not isinstance(kernel, JITFunction):
        kernel = kernel.fn
    return kernel


def _label(launches: list[Launch]) -> None:
    """The jit function's name; where one entry launches a function more than once (the STREAM kernels), the
    constexprs that differ between its launches too."""
    for launch in launches:
        name = _jit(launch.kernel).__name__
        same = [other for other in launches if _jit(other.kernel).__name__ == name]
        differ = {k: v for k, v in launch.kwargs.items() if any(o.kwargs.get(k) != v for o in same)}
        launch.label = name + (f"[{', '.join(f'{k}={v}' for k, v in differ.items())}]" if differ else "")


def config_params(config: Any) -> dict[str, Any]:
    extra = {"num_ctas": config.num_ctas, "maxnreg": config.maxnreg}
    return {**config.kwargs, "warps": config.num_warps, "stages": config.num_stages,
            **{k: v for k, v in extra.items() if v not in (None, 1)}}


def _fresh(jit: Any) -> None:
    """Forget the kernels `jit` compiled in this process, so that this compile runs the whole compiler and prints
    its ptxas log: JITFunction.run returns an in-process compiled kernel for the same specialisation without
    compiling (TRITON_ALWAYS_COMPILE bypasses only the cache on disk), and two entries launch the same function
    with the same arguments (kernels/flash_attention.py and flash_attention_fa2.py share _attn_bwd_delta)."""
    for name in ("device_caches", "cache"):  # Triton 3.3+ | 3.2
        cache = getattr(jit, name, None)
        if isinstance(cache, dict):
            cache.clear()


def _configs(launch: Launch) -> list[tuple[dict[str, Any], Any]]:
    """(params, compile) per config the launch would try: the autotuner's (after its own pruning), or the launch's
    own options."""
    from triton.runtime.autotuner import Autotuner

    kernel, args, kwargs = launch.kernel, launch.args, launch.kwargs
    jit = _jit(kernel)
    if not isinstance(kernel, Autotuner):
        names = {"num_warps": "warps", "num_stages": "stages"}
        options = {names[k]: v for k, v in kwargs.items() if k in names}
        return [(options, lambda: _fresh(jit) or kernel.run(*args, grid=(1,), warmup=True, **kwargs))]
    named = dict(zip(kernel.arg_names, args, strict=False))  # positional ones only; the rest are in kwargs
    kernel.nargs = named
    out = []
    for config in kernel.prune_configs(kwargs):
        def compile_config(config: Any = config) -> Any:
            _fresh(jit)
            if config.pre_hook is not None:  # the descriptors' block shapes (matmul_persistent)
                config.pre_hook({**named, **kwargs, **config.all_kwargs()})
            return kernel.fn.run(*args, grid=(1,), warmup=True, **kwargs, **config.all_kwargs())
        out.append((config_params(config), compile_config))
    return out


def plan(entries: list[Entry], targets: list[Target], dtypes: set[str] | None, quick: bool) -> list[Job]:
    """Every (kernel, config, dtype, target) to compile, in a fixed order; a launch that fails is one job whose
    compile raises its error."""
    from triton.runtime.driver import driver

    from xmfu.harness.kernelcheck import pallas

    jobs: list[Job] = []
    for target in targets:
        driver.set_active(_Driver(target.gpu_target()))
        for entry in [e for e in entries if e.targets(target)]:
            offered = entry.swept(target, dtypes)
            for dtype in (["bf16"] if quick and "bf16" in offered else offered[:1] if quick else offered):
                found = pallas.jobs(entry, dtype, target) if entry.name == "pallas_matmul" else \
                    _launch_jobs(entry, dtype, target)
                jobs += [j for j in found if not quick or j.config_index == 0]
    if quick:  # one launch of each function: the first
        seen: set[tuple[str, str, str]] = set()
        jobs = [j for j in jobs if (k := (j.entry, j.kernel.split("[")[0], j.target)) not in seen and not seen.add(k)]
    return jobs


def _launch_jobs(entry: Entry, dtype: str, target: Target) -> list[Job]:
    _CAPTURED.clear()
    try:
        entry.launch(dtype, target)
    except Exception as exc:  # the launch code refused: that is the answer for this entry
        def fail(exc: Exception = exc) -> Any:
            raise exc
        return [Job(entry.name, "(launch)", "-", 0, dtype, target.name, fail)]
    launches = list(_CAPTURED)
    _label(launches)
    return [Job(entry.name, launch.label, label(params), i, dtype, target.name, run, params)
            for launch in launches for i, (params, run) in enumerate(_configs(launch))]


@contextlib.contextmanager
def _stderr_to(path: str) -> Any:
    """fd 2 into `path` while compiling: MLIR and LLVM print their diagnostics there, not into the exception."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(path, "w") as sink:
        os.dup2(sink.fileno(), 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def compile_job(job: Job, scratch: str) -> dict[str, Any]:
    """One compile: its Facts or the compiler's message (with the diagnostics it printed)."""
    from triton.runtime.driver import driver

    target = TARGETS[job.target]
    if job.skipped:
        return {**_identity(job), "error": None, "facts": None, "warnings": [], "seconds": 0.0,
                "skipped": job.skipped}
    driver.set_active(_Driver(target.gpu_target()))
    log, diagnostics = io.StringIO(), os.path.join(scratch, "stderr.txt")
    start, cpu = time.perf_counter(), _cpu_seconds()
    facts: Facts | None = None
    error = None
    try:
        with _stderr_to(diagnostics), contextlib.redirect_stdout(log):
            compiled = job.compile()
        facts = read_facts(compiled, target, log.getvalue(), scratch)
    except Exception as exc:
        error = " ".join(f"{type(exc).__name__}: {exc}".split())[:1500]
    said = Path(diagnostics).read_text() if os.path.exists(diagnostics) else ""
    if error and said.strip():
        error += " | compiler said: " + " ".join(said.split())[-1500:]
    return {**_identity(job), "error": error, "facts": asdict(facts) if facts else None,
            "warnings": [] if error else warnings_in(said), "seconds": round(time.perf_counter() - start, 2),
            "cpu_seconds": round(_cpu_seconds() - cpu, 2)}


def _cpu_seconds() -> float:
    """CPU time of this process and of its finished children (ptxas, the AMD linker): a compile's cost, whatever
    else the machine runs meanwhile."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def _identity(job: Job) -> dict[str, Any]:
    return {"entry": job.entry, "kernel": job.kernel, "config": job.config, "params": job.params,
            "config_index": job.config_index, "dtype": job.dtype, "target": job.target}


def warnings_in(said: str) -> list[str]:
    """The compiler's warnings about this kernel (Triton's UserWarnings: a deprecated option overwritten...), once
    each, without the source line Python repeats under them."""
    found = [line.split("UserWarning:", 1)[1].strip() for line in said.splitlines() if "UserWarning:" in line]
    return [w for w in dict.fromkeys(found) if "TRITON_DEFAULT_FP_FUSION" not in w]


def ptxas_verbose(ptx: str, target: Target, scratch: str) -> str:
    """ptxas -v on the kernel's PTX, for a Triton that does not print its own ptxas log (3.2 has no
    TRITON_DUMP_PTXAS_LOG): the same binary (the one Triton ships) and architecture, Triton's own flags aside."""
    import subprocess

    try:  # the ptxas Triton itself runs for this architecture (3.9: ptxas-blackwell, the newer, for sm90 and on)
        from triton.backends.nvidia.compiler import get_ptxas

        ptxas = get_ptxas(target.capability).path
    except (ImportError, AttributeError, TypeError):
        from triton.backends.nvidia.compiler import _path_to_binary

        ptxas = _path_to_binary("ptxas")[0]
    source = os.path.join(scratch, "kernel.ptx")
    Path(source).write_text(ptx)
    arch = f"sm_{target.capability}{'a' if target.capability >= 90 else ''}"
    done = subprocess.run([ptxas, "-v", f"--gpu-name={arch}", source, "-o", source + ".o"], capture_output=True,
                          text=True, check=True)
    return done.stdout + done.stderr


def read_facts(compiled: Any, target: Target, ptxas_log: str, scratch: str = "") -> Facts:
    meta, dots = compiled.metadata, dots_in(compiled.asm["ttir"])
    if target.nvidia and "registers" not in ptxas_log:
        ptxas_log = ptxas_verbose(compiled.asm["ptx"], target, scratch or tempfile.gettempdir())
    if target.nvidia:
        return nvidia_facts(compiled.asm["ptx"], ptxas_log, meta.shared, meta.num_warps, meta.num_stages, dots,
                            getattr(meta, "tmem_size", None))
    return amd_facts(compiled.asm["amdgcn"], meta.shared, meta.num_warps, meta.num_stages, dots)


def _prepare(vendor: str, first: Target) -> None:
    import torch
    from triton.runtime.driver import driver

    if vendor == "amd":
        torch.version.hip = HIP_VERSION
    driver.set_active(_Driver(first.gpu_target()))  # before the kernels' modules: their autotuners ask for it
    _capture_launches()
    if vendor == "nvidia":
        from xmfu.kernels import matmul_persistent as gemm

        gemm.fp8_promotes = lambda a: a.dtype in gemm.FP8  # as on an NVIDIA GPU (module docstring)


def main() -> None:
    request = json.loads(sys.stdin.read())
    out = os.fdopen(os.dup(1), "w", buffering=1)  # the JSON lines: this process's own copy of the pipe
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # so no ptxas or linker child holds the pipe open (Triton's
    #                                               printed ptxas log goes to sys.stdout, redirected per compile)
    targets = [TARGETS[name] for name in request["targets"]]
    _prepare(request["vendor"], targets[0])
    entries = [ENTRIES[name] for name in request["entries"]]
    jobs = plan(entries, targets, set(request["dtypes"]) if request.get("dtypes") else None, request["quick"])
    mine = list(enumerate(jobs))[request["shard"]::request["shards"]]
    print(json.dumps({"planned": len(mine)}), file=out)
    parent = os.getppid()
    with tempfile.TemporaryDirectory(dir=os.environ.get("TRITON_HOME")) as scratch:
        for seq, job in mine:
            if os.getppid() != parent:  # the sweep is gone: nobody reads what follows
                return
            print(json.dumps({"seq": seq, **compile_job(job, scratch)}), file=out)


if __name__ == "__main__":
    main()
