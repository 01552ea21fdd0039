"""Triton's own front end, run for a GPU target on a CPU: a kernel lowered to Triton IR (TTIR) as the compiler would
for that target, without a GPU, a driver or ptxas.

This is what `triton.compile` does first (triton 3.9, triton/compiler/compiler.py: make_backend(target),
backend.parse_options, ASTSource.make_ir); the target's options decide which dot input precisions and fp8 types
a kernel may use (backends/amd/compiler.py HIPOptions, backends/nvidia/compiler.py CUDAOptions), so a kernel that
would fail to compile for a device fails here too, with the compiler's own message.

It runs in a child process: under TRITON_INTERPRET=1 (the tests' setting) `triton.jit` makes interpreter stand-ins,
tl.cdiv and the rest of triton.language.standard included, which the code generator cannot lower.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def compile_errors(module: str, kernel: str, cases: list[dict[str, Any]]) -> list[str | None]:
    """For each case {"device": "gfx950" | "sm90" ..., "signature": {arg: "*fp32" | "i32"}, "constants": {...}}:
    None where `module.kernel` lowers for the device, else the compiler's message."""
    return [one["error"] for one in lowered(module, kernel, cases)]


def lowered(module: str, kernel: str, cases: list[dict[str, Any]]) -> list[dict[str, str | None]]:
    """For each case as in compile_errors: {"error": the compiler's message or None, "ttir": the TTIR or None}."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-m", "tests.workloads.triton_front_end", module, kernel],
                          input=json.dumps(cases), capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    if done.returncode:
        raise RuntimeError(done.stderr[-3000:])
    return json.loads(done.stdout.splitlines()[-1])


def _lower(fn: Any, device: str, signature: dict[str, str], constants: dict[str, Any]) -> str:
    from triton._C.libtriton import ir
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.compiler.compiler import make_backend

    # gfx names are AMD targets (wavefront 64), smNN ones NVIDIA (warp 32)
    target = (GPUTarget("hip", device, 64) if device.startswith("gfx")
              else GPUTarget("cuda", int(device.removeprefix("sm")), 32))
    backend = make_backend(target)
    options = backend.parse_options({})
    context = ir.context()
    ir.load_dialects(context)
    backend.load_dialects(context)
    source = ASTSource(fn, {**signature, **{name: "constexpr" for name in constants}}, constants)
    return str(source.make_ir(target, options, backend.get_codegen_implementation(options),
                              backend.get_module_map(), context))


def _compile(fn: Any, case: dict[str, Any]) -> dict[str, Any]:
    """The whole of `triton.compile` for the case's target, through ptxas (a cubin) or the AMD linker (an hsaco),
    both shipped with Triton: TTGIR shows what the target's passes made of the kernel (pipelining, TMA, MMA).
    case["compile"]: the options (num_warps, num_stages, ...); case["divisible"]: the arguments a launch would
    specialise as multiples of 16 (pointers and ints, triton/backends/compiler.py), without which no load is
    vectorised or pipelined."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    device, signature, constants = case["device"], case["signature"], case["constants"]
    target = (GPUTarget("hip", device, 64) if device.startswith("gfx")
              else GPUTarget("cuda", int(device.removeprefix("sm")), 32))
    attrs = {(fn.arg_names.index(name),): [["tt.divisibility", 16]] for name in case.get("divisible", ())}
    source = ASTSource(fn, {**signature, **{name: "constexpr" for name in constants}}, constants, attrs)
    compiled = triton.compile(source, target=target, options=case["compile"])
    return {"error": None, "ttir": compiled.asm["ttir"], "ttgir": compiled.asm["ttgir"],
            "shared": compiled.metadata.shared, "binary": next(k for k in ("cubin", "hsaco") if k in compiled.asm),
            "ptx": compiled.asm.get("ptx")}


def compiled(module: str, cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each case as in compile_errors, plus "kernel" (its name in `module`), "compile" and "divisible" (_compile):
    {"error", "ttir", "ttgir", "shared" (bytes), "binary" ("cubin" | "hsaco"), "ptx" (NVIDIA's, else None)}. One
    process for all of them."""
    with tempfile.TemporaryDirectory() as cache:  # the compiler's cache, never the user's ~/.triton
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
        env.update(PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]), TRITON_CACHE_DIR=cache,
                   TRITON_DEFAULT_FP_FUSION="1")  # Triton 3.9's default, stated (it warns when unset)
        done = subprocess.run([sys.executable, "-m", "tests.workloads.triton_front_end", module, ""],
                              input=json.dumps(cases), capture_output=True, text=True, env=env, cwd=ROOT,
                              timeout=600)
    if done.returncode:
        raise RuntimeError(done.stderr[-3000:])
    return json.loads(done.stdout.splitlines()[-1])


def _main(module: str, kernel: str) -> None:
    import importlib

    from triton.runtime.jit import JITFunction

    def jit(name: str) -> JITFunction:
        fn = getattr(importlib.import_module(module), name)
        while not isinstance(fn, JITFunction):
            fn = fn.fn  # an Autotuner (or a heuristics wrapper) around the jit function
        return fn

    out = []
    for case in json.loads(sys.stdin.read()):
        fn = jit(case.get("kernel") or kernel)
        try:
            if "compile" in case:
                out.append(_compile(fn, case))
            else:
                out.append({"error": None, "ttir": _lower(fn, case["device"], case["signature"], case["constants"])})
        except Exception as e:  # the compiler's message is the answer
            out.append({"error": f"{type(e).__name__}: {e}", "ttir": None})
    print(json.dumps(out))


if __name__ == "__main__":
    _main(sys.argv[1], sys.argv[2])
