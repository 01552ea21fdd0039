"""The collectives XLA put into a compiled JAX step, and those collectives timed alone with the collectives
workload's machinery (workloads/collectives/jax.py: the same shard_map'd lax collectives over a 1-D mesh of the
step's devices) at the sizes the step moves.

Sizes come from the optimised HLO text: each instruction `name = <shape> <op>(...)` whose op is a collective.
On GPUs XLA makes some of them asynchronous: `all-reduce-start` returns its result, `all-gather-start`
(operands, results), and a reduce-scatter or all-to-all wrapped in `async-start` prints, under the HLO printer's
default async syntax sugar, as `reduce-scatter-start` / `all-to-all-start` with the async shape ((operands),
results[, context]) and no wrapped computation (xla/hlo/ir/hlo_instruction.cc, hlo_module.cc Print); the
results are element 1 of either tuple. Printed unsugared, the `async-start` line is not a collective op and the
plain instruction inside the wrapped computation is counted. The `-done` halves are not counted. S is nccl-tests':
the buffer (all-reduce), the whole output (all-gather), the whole input (reduce-scatter: n x its result), the
per-rank buffer (all-to-all).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import numpy as np

from xmfu.harness.machine.dtypes import DTYPES
from xmfu.workloads.collectives.jax import lax_collective, shard_map_api
from xmfu.workloads.collectives.spec import CollectiveCase
from xmfu.workloads.transformer.parallel import Collective

HLO_OPS = {"all-reduce": "all_reduce", "all-gather": "all_gather", "reduce-scatter": "reduce_scatter",
           "all-to-all": "all_to_all"}
ELEMENT_BYTES = {"f64": 8, "f32": 4, "s32": 4, "u32": 4, "bf16": 2, "f16": 2, "s16": 2, "u16": 2, "s8": 1, "u8": 1,
                 "pred": 1, "f8e4m3fn": 1, "f8e5m2": 1, "f8e4m3fnuz": 1, "f8e5m2fnuz": 1}
DTYPE_NAMES = {"f32": "fp32", "bf16": "bf16", "f16": "fp16"}  # what the collectives workload can time
_COMMENT = re.compile(r"/\*.*?\*/")  # the printer numbers long tuples: /*index=5*/
_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?[\w.-]+\s*=\s*(?P<shape>.+?)\s+"
                          r"(?P<op>all-reduce|all-gather|reduce-scatter|all-to-all)(?P<start>-start)?\(", re.MULTILINE)
_ARRAY = re.compile(r"([a-z][a-z0-9]*)\[([0-9,]*)\]")


def _arrays(shape: str) -> list[tuple[str, int]]:
    """(element type, bytes) of every array in an HLO shape, a tuple's members in order."""
    out = []
    for element, dims in _ARRAY.findall(shape):
        count = math.prod(int(d) for d in dims.split(",") if d) if dims else 1
        out.append((element, count * ELEMENT_BYTES.get(element, 4)))
    return out


def _tuple_elements(shape: str) -> list[str]:
    """The top-level elements of an HLO tuple shape `(a, (b, c), d)`; a non-tuple shape is its own element."""
    shape = shape.strip()
    if not shape.startswith("("):
        return [shape]
    out, depth, start = [], 0, 1
    for i, ch in enumerate(shape):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 1:
            out.append(shape[start:i])
            start = i + 1
    out.append(shape[start:shape.rindex(")")])
    return [e.strip() for e in out]


def hlo_collectives(hlo: str, n: int) -> list[Collective]:
    """The collectives of an optimised HLO module, in text order, with nccl-tests' S for each."""
    found = []
    for match in _INSTRUCTION.finditer(_COMMENT.sub("", hlo)):
        arrays = _arrays(match.group("shape"))
        if not arrays:
            continue
        op = HLO_OPS[match.group("op")]
        elements = _tuple_elements(match.group("shape"))
        if match.group("start") and op != "all_reduce" and len(elements) > 1:  # results: element 1
            arrays = _arrays(elements[1])
        size = sum(b for _, b in arrays)
        if op == "reduce_scatter":
            size *= n
        found.append(Collective(op, size, "step", DTYPE_NAMES.get(arrays[0][0], "fp32")))
    return found


def summary(collectives: list[Collective]) -> dict[str, Any]:
    counts: dict[str, int] = {}
    for c in collectives:
        counts[c.op] = counts.get(c.op, 0) + 1
    return {"counts": counts, "bytes": sum(c.size_bytes for c in collectives)}


def collectives_alone(collectives: list[Collective], devices: list[Any]) -> Callable[[], Any]:
    """One step's collectives as one compiled program: shard_map over a 1-D mesh of the step's devices applying
    each collective (collectives/jax.py lax_collective) to its own buffer, every output returned so none is
    dropped. One program, as the step is: separately dispatched programs with collectives can deadlock XLA's
    CPU runtime (a rendezvous waits for device threads busy in another program), and on a GPU would add a
    launch per collective. XLA may combine them as it combines the step's."""
    import jax
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    n = len(devices)
    mesh = Mesh(np.array(devices), ("x",))  # lax_collective's axis name
    buffers: dict[tuple[int, str], Any] = {}  # inputs are only read: one per size and type
    inputs, ops = [], []
    for c in collectives:
        lay = CollectiveCase(c.op, c.size_bytes, c.dtype, in_place=False, mode="throughput").layout(n)
        key = (n * lay.input_count, c.dtype)
        if key not in buffers:
            host = np.zeros(key[0], DTYPES[c.dtype].storage)
            buffers[key] = jax.make_array_from_callback(host.shape, NamedSharding(mesh, P("x")),
                                                        lambda index, h=host: h[index])
        inputs.append(buffers[key])
        ops.append(lax_collective(c.op))
    if not ops:
        return lambda: None

    def body(*blocks):
        return tuple(op(block) for op, block in zip(ops, blocks, strict=True))

    _, shard_map = shard_map_api(jax)
    specs = tuple(P("x") for _ in ops)
    compiled = jax.jit(shard_map(body, mesh=mesh, in_specs=specs, out_specs=specs)).lower(*inputs).compile()
    return lambda: compiled(*inputs)
