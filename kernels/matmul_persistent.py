"""A persistent Triton GEMM, C = A @ B, fp32 accumulation: the published structure beside kernels/matmul.py's
tutorial-03 one, so that one run measures old against new.

Structure (Triton's tutorial 09, python/tutorials/09-persistent-matmul.py, triton-lang/triton at 02936a19:
`matmul_kernel_persistent` and `matmul_kernel_descriptor_persistent`):
- persistent: the grid is one program per SM/CU (NUM_SMS); each loops over output tiles tile_id = pid, pid + NUM_SMS,
  ... in tutorial 03's grouped order (GROUP_M rows of tiles at a time, so consecutive tiles share B from L2), and the
  tile loop is flattened into the K loop on NVIDIA (`tl.range(..., flatten=True)`) so loads of the next tile overlap
  the epilogue of this one (where the installed Triton has `flatten`: RANGE_FLATTENS);
- tensor descriptors (TMA) on NVIDIA Hopper and later: loads and stores of whole tiles by the copy engine, with
  out-of-bounds elements zero-filled on load and dropped on store, so neither the K tail nor the edges are masked
  in software. The installed Triton (3.9) has both host-side descriptors (triton.tools.tensor_descriptor.
  TensorDescriptor, which the interpreter also takes) and device-side ones (tl.make_tensor_descriptor, which needs a
  global allocator, triton.set_allocator); this kernel uses the host-side ones, the tile shape set per autotune config
  by a pre_hook. Elsewhere (AMD, NVIDIA before sm90, operands TMA cannot address) the plain-pointer persistent kernel
  runs; `plan` says which and why.

AMD's guidance (ROCm's Triton fork, python/perf-kernels/streamk/persistent_matmul.py at 4d3e9b8f, `persistent_gemm`):
- MI300-class parts are 6 or 8 compute dies (XCDs), each with its own L2, and the dispatcher hands workgroups to them
  round robin (workgroup i runs on XCD i % NUM_XCDS). The kernel remaps its program id so that the programs on one
  XCD get consecutive ids, hence consecutive (grouped) tiles that share A and B in that XCD's L2:
  pid -> (pid % NUM_XCDS) * (NUM_SMS // NUM_XCDS) + pid // NUM_XCDS. This is a permutation of 0..NUM_SMS-1 only when
  the grid is exactly NUM_SMS programs and NUM_XCDS divides NUM_SMS, so the remapped launch is always NUM_SMS wide
  (programs whose first tile is past the last one return at once), as in ROCm's kernel;
- BLOCK_K 64 with 256x256 / 256x128 tiles, num_stages 2, waves_per_eu / matrix_instr_nonkdim / kpack, and an EVEN_K
  specialisation: when K % BLOCK_K == 0 no load is masked; otherwise every K step but the last is unmasked and only
  the tail step masks K (`loop_k -= 1` and a peeled last step).
NVIDIA's configs are tutorial 09's (128 x 128|256 tiles, BLOCK_K 64 and 128, 3-4 stages, 4-8 warps).

Offsets: as kernels/matmul.py, int32 unless an operand's element offset can reach 2**31 (INT64, a separate variant).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from xmfu.kernels.fit import gemm_pruner
from xmfu.kernels.matmul_persistent_configs import autotune_configs, interpreting, with_descriptor_shapes

try:  # host-side tensor descriptors: Triton 3.4 and later
    from triton.tools.tensor_descriptor import TensorDescriptor
except ImportError:  # pragma: no cover - older Triton: the plain-pointer kernel only
    TensorDescriptor = None


# tl.range's `flatten` hint, which tutorial 09 passes, is newer than xmfu's Triton floor (3.2): without it the tile
# loop is a plain loop.
RANGE_FLATTENS = "flatten" in inspect.signature(tl.range.__init__).parameters


# As kernels/matmul.py: shape, layout, input precision; Triton adds every tensor argument's dtype itself
# (Autotuner.run). The descriptor kernel's arguments are descriptors, not tensors, so DTYPES carries the dtypes.
KEY = ["M", "N", "K", "stride_am", "stride_ak", "stride_bk", "stride_bn", "stride_cm", "stride_cn", "INPUT_PRECISION"]
TMA_KEY = ["M", "N", "K", "A_COLMAJOR", "B_COLMAJOR", "INPUT_PRECISION", "DTYPES"]


@triton.jit
def _tile(tile_id, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    """Tutorial 03's grouped order: tile_id -> (pid_m, pid_n), GROUP_M tile rows at a time."""
    num_pid_in_group = GROUP_M * num_pid_n
    first_pid_m = (tile_id // num_pid_in_group) * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((tile_id % num_pid_in_group) % group_size_m)
    pid_n = (tile_id % num_pid_in_group) // group_size_m
    return pid_m, pid_n


@triton.jit
def _first_tile(NUM_SMS: tl.constexpr, NUM_XCDS: tl.constexpr):
    """This program's first tile: its id, remapped on a multi-die AMD part so that the NUM_SMS // NUM_XCDS programs
    the dispatcher puts on one XCD (every NUM_XCDS-th id) get consecutive ids (ROCm persistent_gemm)."""
    pid = tl.program_id(axis=0)
    if NUM_XCDS > 1:
        pid = (pid % NUM_XCDS) * (NUM_SMS // NUM_XCDS) + pid // NUM_XCDS
    return pid


# fp8 on NVIDIA Hopper: how many K products the tensor cores' reduced-precision fp8 accumulator may sum before they
# join the fp32 accumulator. Not 0, as kernels/matmul.py passes: Triton 3.9 will not use wgmma for an fp8 dot into
# fp32 with max_num_imprecise_acc < 32 (supportMMA, lib/Analysis/Utility.cpp: "We cannot use MMA_V3 if we need to
# accumulate in F32 within the MMA op") and falls back to mma.sync on operands widened to fp16 (checked here by
# compiling for sm90). 128 is CUTLASS's default promotion for its sm90 fp8 GEMM without fast accumulation
# (mma_promotion_interval = 4 wgmma instructions of K 32, collective/sm90_mma_tma_gmma_ss_warpspecialized_fp8.hpp),
# the mode torch._scaled_mm uses by default (use_fast_accum=False); Triton requires it <= BLOCK_K (semantic.dot), so
# BLOCK_K 64 configs promote every 64. Elsewhere 0 (AMD's MFMA accumulates fp8 products in fp32).
FP8_PROMOTION = 128


def _imprecise(args: dict) -> int:
    return min(FP8_PROMOTION, args["BLOCK_K"]) if args["FP8_WGMMA"] else 0


@triton.jit
def _dot(a, b, acc, INPUT_PRECISION: tl.constexpr, UPCAST: tl.constexpr, IMPRECISE: tl.constexpr):
    if UPCAST:
        # Triton's interpreter mis-computes tl.dot on bf16 operands; bf16 (and fp8) products are exact in fp32
        a = a.to(tl.float32)
        b = b.to(tl.float32)
    return tl.dot(a, b, acc, input_precision=INPUT_PRECISION, max_num_imprecise_acc=IMPRECISE)


@triton.jit
def _pointer_tile(
    a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    tile_id, tile_id_c, num_pid_m, num_pid_n,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, EVEN_K: tl.constexpr,
    INPUT_PRECISION: tl.constexpr, UPCAST: tl.constexpr, INT64: tl.constexpr, IMPRECISE: tl.constexpr,
):
    """One output tile: tile_id's A rows and B columns, stored at tile_id_c's (the same tile, counted apart)."""
    pid_m, pid_n = _tile(tile_id, num_pid_m, num_pid_n, GROUP_M)
    offs_am = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M  # (BLOCK_M,) wrapped: rows past M are never stored
    offs_bn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N  # (BLOCK_N,)
    offs_k = tl.arange(0, BLOCK_K)
    step_a = BLOCK_K * stride_ak
    step_b = BLOCK_K * stride_bk
    if INT64:  # as kernels/matmul.py: an element offset past 2**31 would wrap in int32
        offs_am = offs_am.to(tl.int64)
        offs_bn = offs_bn.to(tl.int64)
        offs_k = offs_k.to(tl.int64)
        step_a = BLOCK_K * tl.cast(stride_ak, tl.int64)
        step_b = BLOCK_K * tl.cast(stride_bk, tl.int64)
    a_ptrs = a_ptr + offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak  # (BLOCK_M, BLOCK_K)
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn  # (BLOCK_K, BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    k_full = K // BLOCK_K  # K steps that need no mask; EVEN_K: all of them
    for _ in range(k_full):
        acc = _dot(tl.load(a_ptrs), tl.load(b_ptrs), acc, INPUT_PRECISION, UPCAST, IMPRECISE)
        a_ptrs += step_a
        b_ptrs += step_b
    if not EVEN_K:  # the K tail: the one masked step
        k_left = K - k_full * BLOCK_K
        a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        acc = _dot(a, b, acc, INPUT_PRECISION, UPCAST, IMPRECISE)

    pid_m, pid_n = _tile(tile_id_c, num_pid_m, num_pid_n, GROUP_M)
    offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    if INT64:
        offs_cm = offs_cm.to(tl.int64)
        offs_cn = offs_cn.to(tl.int64)
    c_ptrs = c_ptr + offs_cm[:, None] * stride_cm + offs_cn[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(offs_cm[:, None] < M) & (offs_cn[None, :] < N))


# Each part tries the configs that fit it (kernels/fit.py).
@triton.autotune(configs=autotune_configs(), key=KEY, prune_configs_by=gemm_pruner("pointer"))
@triton.heuristics({"EVEN_K": lambda args: args["K"] % args["BLOCK_K"] == 0, "IMPRECISE": _imprecise})
@triton.jit
def _persistent_kernel(
    a_ptr, b_ptr, c_ptr, M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    NUM_SMS: tl.constexpr, NUM_XCDS: tl.constexpr, FLATTEN: tl.constexpr, EVEN_K: tl.constexpr,
    INPUT_PRECISION: tl.constexpr, UPCAST: tl.constexpr, INT64: tl.constexpr, FP8_WGMMA: tl.constexpr,
    IMPRECISE: tl.constexpr,
):
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_tiles = num_pid_m * num_pid_n
    start = _first_tile(NUM_SMS, NUM_XCDS)
    # Tutorial 09 counts the epilogue's tile separately (tile_id_c): with flatten=True, a value used in both the
    # loop's prologue and epilogue trips a Blackwell pipelining bug.
    tile_id_c = start - NUM_SMS
    if FLATTEN:  # a constexpr branch: a Triton without tl.range's `flatten` (RANGE_FLATTENS) never reads it
        for tile_id in tl.range(start, num_tiles, NUM_SMS, flatten=True):
            tile_id_c += NUM_SMS
            _pointer_tile(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm,
                          stride_cn, tile_id, tile_id_c, num_pid_m, num_pid_n, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M,
                          EVEN_K, INPUT_PRECISION, UPCAST, INT64, IMPRECISE)
    else:
        for tile_id in range(start, num_tiles, NUM_SMS):
            tile_id_c += NUM_SMS
            _pointer_tile(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm,
                          stride_cn, tile_id, tile_id_c, num_pid_m, num_pid_n, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M,
                          EVEN_K, INPUT_PRECISION, UPCAST, INT64, IMPRECISE)


@triton.jit
def _tma_tile(a_desc, b_desc, c_desc, K, tile_id, tile_id_c, num_pid_m, num_pid_n,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
              A_COLMAJOR: tl.constexpr, B_COLMAJOR: tl.constexpr, INPUT_PRECISION: tl.constexpr,
              UPCAST: tl.constexpr, IMPRECISE: tl.constexpr):
    # A_COLMAJOR: A is the transpose of a row-major (K, M) array, described as that array and loaded as (BLOCK_K,
    # BLOCK_M) tiles, then transposed in registers (tutorial 09 does this for B, stored (N, K): `tl.dot(a, b.T)`).
    pid_m, pid_n = _tile(tile_id, num_pid_m, num_pid_n, GROUP_M)
    offs_am = pid_m * BLOCK_M
    offs_bn = pid_n * BLOCK_N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for ki in range(tl.cdiv(K, BLOCK_K)):  # the tail step reads zeros past K (the descriptors' padding): no mask
        offs_k = ki * BLOCK_K
        a = a_desc.load([offs_k, offs_am]).T if A_COLMAJOR else a_desc.load([offs_am, offs_k])
        b = b_desc.load([offs_bn, offs_k]).T if B_COLMAJOR else b_desc.load([offs_k, offs_bn])
        acc = _dot(a, b, acc, INPUT_PRECISION, UPCAST, IMPRECISE)
    pid_m, pid_n = _tile(tile_id_c, num_pid_m, num_pid_n, GROUP_M)
    c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(c_desc.dtype))  # rows and columns past M, N dropped


@triton.autotune(configs=with_descriptor_shapes(autotune_configs()), key=TMA_KEY, prune_configs_by=gemm_pruner("tma"))
@triton.heuristics({"IMPRECISE": _imprecise})
@triton.jit
def _persistent_tma_kernel(
    a_desc, b_desc, c_desc, M, N, K,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    NUM_SMS: tl.constexpr, FLATTEN: tl.constexpr, A_COLMAJOR: tl.constexpr, B_COLMAJOR: tl.constexpr,
    INPUT_PRECISION: tl.constexpr, UPCAST: tl.constexpr, DTYPES: tl.constexpr, FP8_WGMMA: tl.constexpr,
    IMPRECISE: tl.constexpr,
):
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_tiles = num_pid_m * num_pid_n
    start = tl.program_id(axis=0)
    tile_id_c = start - NUM_SMS
    if FLATTEN:
        for tile_id in tl.range(start, num_tiles, NUM_SMS, flatten=True):
            tile_id_c += NUM_SMS
            _tma_tile(a_desc, b_desc, c_desc, K, tile_id, tile_id_c, num_pid_m, num_pid_n, BLOCK_M, BLOCK_N, BLOCK_K,
                      GROUP_M, A_COLMAJOR, B_COLMAJOR, INPUT_PRECISION, UPCAST, IMPRECISE)
    else:
        for tile_id in range(start, num_tiles, NUM_SMS):
            tile_id_c += NUM_SMS
            _tma_tile(a_desc, b_desc, c_desc, K, tile_id, tile_id_c, num_pid_m, num_pid_n, BLOCK_M, BLOCK_N, BLOCK_K,
                      GROUP_M, A_COLMAJOR, B_COLMAJOR, INPUT_PRECISION, UPCAST, IMPRECISE)


# The largest tile edge any config above uses (see kernels/matmul.py's TILE_MAX).
TILE_MAX = 256
INT32_MAX = 2**31 - 1
UPCAST_IN_INTERPRETER = (torch.bfloat16, torch.float8_e4m3fn, torch.float8_e4m3fnuz)
INTERPRETER_SMS = 2  # few programs, each looping over several tiles: the persistent path, exercised on a CPU


def needs_int64_offsets(*tensors: torch.Tensor) -> bool:
    """Whether an element offset the pointer kernel forms, up to one tile past an operand's edges, can pass
    INT32_MAX (the descriptor kernel forms none: the copy engine addresses the tile)."""
    return any(sum((size + TILE_MAX) * abs(stride) for size, stride in zip(t.shape, t.stride(), strict=True))
               > INT32_MAX for t in tensors)


@dataclass(frozen=True)
class Plan:
    kernel: str  # "tma" (tensor descriptors) | "pointer"
    why: str  # why this kernel: what made the descriptor kernel unusable, or that it was usable
    num_sms: int
    num_xcds: int  # 1: no XCD remap
    int64: bool
    flatten: bool  # the tile loop flattened into the K loop (tutorial 09, NVIDIA, where tl.range has `flatten`)


def _colmajor(t: torch.Tensor) -> bool | None:
    """False: rows contiguous; True: columns contiguous (the transpose of a row-major array); None: neither."""
    if t.stride(1) == 1:
        return False
    return True if t.stride(0) == 1 else None


def tma_refusal(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, device_ok: bool) -> str | None:
    """Why the descriptor kernel cannot take these operands, or None. `device_ok`: the device has TMA."""
    if TensorDescriptor is None or not hasattr(tl, "tensor_descriptor"):
        return f"triton {triton.__version__} has no host-side tensor descriptors"
    if not device_ok:
        return "tensor descriptors (TMA) need an NVIDIA GPU of compute capability 9.0+"
    if _colmajor(a) is None or _colmajor(b) is None or _colmajor(out) is not False:
        return "TMA needs each operand's rows or columns contiguous (and the output's rows)"
    for t in (a, b, out):
        lead = t.stride(0) if t.stride(1) == 1 else t.stride(1)
        if t.data_ptr() % 16 or (lead * t.element_size()) % 16:
            return "TMA needs 16-byte aligned bases and row strides; an operand here is not"
    return None


def device_has_tma(device: torch.device) -> bool:
    """NVIDIA Hopper (sm90) and later: tutorial 09's supports_tma (`get_device_capability()[0] >= 9`)."""
    if device.type != "cuda" or getattr(torch.version, "hip", None):
        return False
    return torch.cuda.get_device_capability(device)[0] >= 9


def plan(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, num_sms: int | None = None, num_xcds: int = 1,
         use_tma: bool | None = None) -> Plan:
    """Which kernel runs on these operands. `num_sms`: programs in the grid (the device's SM/CU count; a few in the
    interpreter); `num_xcds`: the part's compute dies (AMD MI300-class: 6 or 8; 1 elsewhere); `use_tma`: None asks
    the device, True/False forces the choice where the operands allow it (tests run both in the interpreter)."""
    if num_sms is None:
        # the SM/CU count is a torch.cuda device property (CUDA and ROCm): no torch.accelerator equivalent exists
        num_sms = (INTERPRETER_SMS if interpreting() or a.device.type != "cuda"
                   else torch.cuda.get_device_properties(a.device).multi_processor_count)
    if num_xcds > 1 and num_sms % num_xcds:
        num_xcds = 1  # the remap is a permutation only when the dies hold equal shares of the programs
    # as tutorial 09 on NVIDIA; ROCm's persistent kernel does not flatten
    flatten = RANGE_FLATTENS and not interpreting() and not getattr(torch.version, "hip", None)
    why = tma_refusal(a, b, out, device_has_tma(a.device) if use_tma is None else use_tma)
    if why is None:
        return Plan("tma", "tensor descriptors (TMA)", num_sms, 1, False, flatten)
    return Plan("pointer", why, num_sms, num_xcds, needs_int64_offsets(a, b, out), flatten)


def matmul(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, input_precision: str | None = None,
           chosen: Plan | None = None) -> torch.Tensor:
    """out = a @ b with the persistent kernel `chosen` (default: `plan(a, b, out)`). fp8 inputs accumulate in fp32
    into `out`'s dtype, as kernels/matmul.py."""
    M, K = a.shape
    K2, N = b.shape
    if K != K2 or out.shape != (M, N):
        raise ValueError(f"shape mismatch: a {tuple(a.shape)}, b {tuple(b.shape)}, out {tuple(out.shape)}")
    p = chosen or plan(a, b, out)
    upcast = interpreting() and a.dtype in UPCAST_IN_INTERPRETER
    fp8_wgmma = fp8_promotes(a)
    if p.kernel == "tma":
        _launch_tma(a, b, out, p, input_precision, upcast, fp8_wgmma)
        return out

    def grid(meta: dict) -> tuple[int]:
        if p.num_xcds > 1:  # the remap needs all NUM_SMS programs (module docstring)
            return (p.num_sms,)
        return (min(p.num_sms, triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"])),)

    _persistent_kernel[grid](
        a, b, out, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), out.stride(0), out.stride(1),
        NUM_SMS=p.num_sms, NUM_XCDS=p.num_xcds, FLATTEN=p.flatten, INPUT_PRECISION=input_precision, UPCAST=upcast,
        INT64=p.int64, FP8_WGMMA=fp8_wgmma,
    )
    return out


def _launch_tma(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, p: Plan, input_precision: str | None,
                upcast: bool, fp8_wgmma: bool) -> None:
    M, K = a.shape
    N = b.shape[1]
    a_col, b_col = bool(_colmajor(a)), bool(_colmajor(b))
    # the block shapes are placeholders: each config's pre_hook sets its own (with_descriptor_shapes)
    a_desc = TensorDescriptor.from_tensor(a.T if a_col else a, [16, 16])
    b_desc = TensorDescriptor.from_tensor(b.T if b_col else b, [16, 16])
    c_desc = TensorDescriptor.from_tensor(out, [16, 16])

    def grid(meta: dict) -> tuple[int]:
        return (min(p.num_sms, triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"])),)

    _persistent_tma_kernel[grid](
        a_desc, b_desc, c_desc, M, N, K, NUM_SMS=p.num_sms, FLATTEN=p.flatten, A_COLMAJOR=a_col, B_COLMAJOR=b_col,
        INPUT_PRECISION=input_precision, UPCAST=upcast, DTYPES=f"{a.dtype}->{out.dtype}", FP8_WGMMA=fp8_wgmma,
    )


FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)  # NVIDIA's fp8 types (the fnuz ones are AMD's)


def fp8_promotes(a: torch.Tensor) -> bool:
    """Whether fp8 products sum in the tensor cores' own accumulator between promotions (FP8_PROMOTION): fp8 on an
    NVIDIA GPU. Not in the interpreter (which computes every product in fp32) nor on AMD."""
    return (a.dtype in FP8 and a.device.type == "cuda" and not getattr(torch.version, "hip", None)
            and not interpreting())


def best_config(kernel: str = "pointer") -> str | None:
    """The autotuner's choice for the last shape it tuned with `kernel` (None before the first call)."""
    cfg = getattr(_persistent_tma_kernel if kernel == "tma" else _persistent_kernel, "best_config", None)
    return str(cfg) if cfg is not None else None
