"""Data-parallel strategies of the training step and what their communication costs: pure data and formulas.

Bytes each rank sends per step follow nccl-tests' conventions (doc/PERFORMANCE.md): an all-reduce of S bytes
sends 2(n-1)/n·S per rank (ring), an all-gather whose output is S bytes or a reduce-scatter whose input is S
bytes sends (n-1)/n·S per rank. That per-rank traffic divided by the time is what nccl-tests calls the bus
bandwidth, so `comm_achieved_gbps` below reads on the same scale as the collectives workload's busbw.

- DDP (Li et al., "PyTorch Distributed: Experiences on Accelerating Data Parallel Training", VLDB 2020):
  every gradient is all-reduced once per step, in buckets overlapped with the backward: 2(n-1)/n · G.
- FSDP (Zhao et al., "PyTorch FSDP", VLDB 2023), the ZeRO-3 schedule (Rajbhandari et al., "ZeRO", SC 2020,
  §7.2.2: 3Ψ per step against data parallelism's 2Ψ): each layer's parameters are all-gathered before its
  forward and again before its backward, and its gradients reduce-scattered after it:
  (n-1)/n · (P_fwd + P_bwd + G). torch's FSDP2 (`fully_shard`) keeps the root group's parameters gathered
  from forward to backward (torch/distributed/fsdp/_fully_shard/_fully_shard.py: reshard_after_forward is
  False for the root), pads each parameter's dim 0 to a multiple of n (_fsdp_param.py, _fsdp_collectives.py:
  torch.chunk shards, chunk 0's size for all), all-gathers in the MixedPrecisionPolicy's param_dtype and
  reduce-scatters in its reduce_dtype.
- JAX `dp`: parameters replicated, batch sharded; XLA all-reduces the gradients: 2(n-1)/n · G.
- JAX `fsdp`: parameters and optimizer state sharded on dim 0 over the data axis (NamedSharding), gathered
  where used; the textbook schedule is ZeRO-3's above with fp32 parameters, unpadded. XLA chooses the real
  collectives, and need not follow it (on 4 CPU devices, jax 0.10.2, the tiny model's fsdp step compiled 12
  all-gathers and one gradient all-reduce, no reduce-scatter). So a JAX row's figure is what the compiled
  program does, the collectives read from its optimised HLO (`compiled`), with the textbook schedule's figure
  beside it (`nominal`) for reference only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from xmfu.workloads.collectives.spec import bus_factor
from xmfu.workloads.transformer.spec import ModelSpec, TrainSpec

STRATEGIES = {"torch": ("ddp", "fsdp", "ep"), "jax": ("dp", "fsdp", "ep")}  # besides "none", the single-device step
MOE_NOT_DISTRIBUTED = ("a mixture-of-experts preset runs across devices as ep (experts split over the ranks or "
                       "devices, all-to-all dispatch and combine: torch and JAX); ddp, fsdp and dp are not built for "
                       "one (their parity checks and byte formulas are a dense model's)")
GRAD_BYTES = 4  # gradients are fp32 on every strategy: fp32 master weights (bf16 = autocast / reduce_dtype fp32)
FSDP_PARAM_BYTES = {"fp32": 4, "bf16": 2}  # torch FSDP2 all-gathers in MixedPrecisionPolicy.param_dtype
ROOT = "root"


@dataclass(frozen=True)
class Collective:
    """One collective of a step: nccl-tests' S (the buffer, the whole output, or the whole input)."""

    op: str  # all_reduce | all_gather | reduce_scatter
    size_bytes: int
    phase: str  # forward | backward
    dtype: str = "fp32"

    def sent_per_rank(self, n: int) -> float:
        factor = bus_factor(self.op, n)
        return self.size_bytes * factor if factor is not None else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"op": self.op, "size_bytes": self.size_bytes, "phase": self.phase, "dtype": self.dtype}


def fsdp_groups(model: ModelSpec) -> dict[str, list[tuple[int, ...]]]:
    """The parameter groups per-layer sharding makes: one per block, and the root (embedding, final norm,
    output layer), each all-gathered and reduce-scattered as one collective (fully_shard's docstring)."""
    groups: dict[str, list[tuple[int, ...]]] = {}
    for name, shape in model.weight_shapes().items():
        key = ".".join(name.split(".")[:2]) if name.startswith("layers.") else ROOT
        groups.setdefault(key, []).append(shape)
    return groups


def padded_numel(shape: tuple[int, ...], n: int) -> int:
    """Elements of a parameter as FSDP2 moves it: dim 0 padded up to a multiple of n."""
    return math.ceil(shape[0] / n) * n * math.prod(shape[1:])


def ddp_collectives(model: ModelSpec, bucket_bytes: list[int] | None = None) -> list[Collective]:
    """DDP's all-reduces: the given buckets, or one all-reduce of every gradient (same bytes sent)."""
    total = model.param_counts()["total"] * GRAD_BYTES
    return [Collective("all_reduce", b, "backward") for b in (bucket_bytes or [total])]


def fsdp_collectives(model: ModelSpec, dtype: str, n: int, *, padded: bool = True,
                     param_bytes: int | None = None, root_regathered: bool = False) -> list[Collective]:
    """Forward all-gather, backward all-gather (not for the root unless `root_regathered`), reduce-scatter,
    per group in forward order."""
    per_param = param_bytes or FSDP_PARAM_BYTES[dtype]
    gather_dtype = "bf16" if per_param == 2 else "fp32"
    fwd, bwd, rs = [], [], []
    for name, shapes in fsdp_groups(model).items():
        numel = sum(padded_numel(s, n) if padded else math.prod(s) for s in shapes)
        fwd.append(Collective("all_gather", numel * per_param, "forward", gather_dtype))
        if name != ROOT or root_regathered:
            bwd.append(Collective("all_gather", numel * per_param, "backward", gather_dtype))
        rs.append(Collective("reduce_scatter", numel * GRAD_BYTES, "backward"))
    return fwd + bwd + rs


def nominal_collectives(parallel: str, framework: str, model: ModelSpec, dtype: str, n: int) -> list[Collective]:
    """What the strategy implies, before any framework detail: DDP/dp one gradient all-reduce; torch FSDP2 as
    fully_shard moves it; JAX fsdp the ZeRO-3 schedule on fp32 parameters, unpadded, every group re-gathered."""
    if parallel in ("ddp", "dp"):
        return ddp_collectives(model)
    if framework == "jax":
        return fsdp_collectives(model, dtype, n, padded=False, param_bytes=4, root_regathered=True)
    return fsdp_collectives(model, dtype, n)


def bytes_per_rank(collectives: list[Collective], n: int) -> float:
    return float(sum(c.sent_per_rank(n) for c in collectives))


def formula(parallel: str) -> str:
    if parallel in ("ddp", "dp"):
        return "2(n-1)/n x gradient bytes (ring all-reduce; Li et al. VLDB 2020, nccl-tests bus factor)"
    return ("(n-1)/n x (all-gathered parameter bytes forward + backward + reduce-scattered gradient bytes) "
            "(ZeRO-3, Rajbhandari et al. SC 2020 §7.2.2; PyTorch FSDP, Zhao et al. VLDB 2023)")


def scaling_efficiency(per_device_tflops: float, single_device_tflops: float) -> float:
    """Per-device throughput of the strategy over the single-device step's: MFU per device / single-device MFU
    (the peak cancels). Under weak scaling that is t_single / t; under strong scaling t_single / (n·t)."""
    return per_device_tflops / single_device_tflops


def overlap(exposed_s: float, total_s: float) -> tuple[float | None, str | None]:
    """1 - exposed/total, the share of communication hidden behind compute; clamped into [0, 1] with the
    reason when noise puts it outside (exposed < 0: the step ran faster than without its collectives;
    exposed > total: the step lost more time than its collectives take alone)."""
    if total_s <= 0:
        return None, "no communication time measured"
    raw = 1 - exposed_s / total_s
    if raw > 1:
        return 1.0, (f"clamped from {raw:.3g}: the step with its collectives measured {-exposed_s:.3g} s faster "
                     "than without them (noise, or the no-communication variant is slower for other reasons)")
    if raw < 0:
        return 0.0, (f"clamped from {raw:.3g}: the step lost {exposed_s:.3g} s to communication, more than its "
                     f"collectives take alone ({total_s:.3g} s): contention or synchronisation beyond the "
                     "collectives themselves")
    return raw, None


def nominal(run: TrainSpec, framework: str) -> dict[str, Any]:
    """The bytes each rank sends per step as the strategy implies, with the formula and its sources."""
    collectives = nominal_collectives(run.parallel, framework, run.model, run.dtype, run.devices)
    return {"bytes_per_rank": bytes_per_rank(collectives, run.devices), "formula": formula(run.parallel),
            "collectives_per_step": len(collectives)}


COMPILED_FORMULA = ("nccl-tests bus factors over the collectives in XLA's compiled step (its optimised HLO, "
                    "notes.hlo_collectives): all-reduce 2(n-1)/n x S, all-gather and reduce-scatter (n-1)/n x S, "
                    "all-to-all (n-1)/n x S (S: the per-rank buffer)")


def compiled(found: list[Collective], run: TrainSpec) -> dict[str, Any]:
    """The bytes each rank sends per step as the compiled program issues them (JAX: XLA picks the collectives),
    with the textbook schedule's figure beside it under `textbook`."""
    textbook = nominal(run, "jax")
    return {"bytes_per_rank": bytes_per_rank(found, run.devices), "formula": COMPILED_FORMULA,
            "collectives_per_step": len(found), "textbook": textbook}


EP_FORMULA = ("per MoE block: 2 x (rows sent to other ranks + rows received from other ranks) x d_model x activation "
              "bytes (dispatch and combine, forward and reversed in the backward), from this step's routing; plus the "
              "replicated parameters' gradient all-reduce, 2(n-1)/n x their fp32 bytes (nccl-tests alltoall and "
              "all-reduce conventions)")


def ep_problem(spec: ModelSpec, n: int) -> str | None:
    """Why `spec` cannot run expert-parallel over n ranks or devices, or None."""
    if not spec.moe:
        return f"ep splits a mixture of experts' experts over the ranks; model {spec.name} is dense"
    if spec.n_experts % n:
        return f"ep needs the {spec.n_experts} experts to split evenly over the {n} ranks"
    return None


def ep_exchange_bytes(send: list[int], recv: list[int], rank: int, row_bytes: int) -> float:
    """Bytes `rank` puts on links in one MoE block's exchanges over one step. send[q] rows go to rank q (dispatch),
    recv[q] rows come from rank q and go back to it (combine); the backward runs both reversed, the combine's
    gradient out as many rows as the dispatch sent, the dispatch's as many as it received. Rows a rank keeps never
    leave it (nccl-tests alltoall: (n-1)/n of an even split leaves)."""
    return 2.0 * ((sum(send) - send[rank]) + (sum(recv) - recv[rank])) * row_bytes


def ep_bytes_per_rank(exchange_bytes: float, replicated_params: int, n: int) -> float:
    """One rank's bytes per ep step: its exchanges plus its share of the replicated gradients' ring all-reduce."""
    return float(exchange_bytes + 2 * (n - 1) / n * replicated_params * GRAD_BYTES)
