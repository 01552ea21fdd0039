"""Attention O = softmax(scale · Q Kᵀ + mask) V: shapes, causal alignment, FLOPs, bytes and the reference.

Layout is torch's (B, H, S, D) everywhere in xmfu; a backend with another layout (JAX: B, S, H, D)
converts explicitly. GQA: query head h reads key/value head h // (heads / kv_heads).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import product
from typing import Any, ClassVar

import numpy as np

from xmfu.harness.engine.case import Check
from xmfu.harness.engine.declare import POSITIVE, POSITIVE_INT, ConfigError, Number, OneOf, as_list, boolean, setting
from xmfu.harness.engine.structured import parse_section
from xmfu.harness.machine.dtypes import DTYPES, uniform_inputs
from xmfu.workloads.attention import reference

ALIGNMENTS = ("top_left", "bottom_right")  # torch SDPA is_causal / FlashAttention >= 2.1
MODES = ("fwd", "bwd", "fwd_bwd")
# exact: the (i, j) score entries the mask keeps, top-left or bottom-right as the case's alignment says (the work a
# kernel that skips masked tiles does). fa2: the FlashAttention-2 benchmark's count, a causal mask as half of
# seq_q·seq_kv whatever the shape; right for square shapes only (to within the diagonal): at seq_q=1024,
# seq_kv=4096, top-left, it counts 2,097,152 entries per head where the mask keeps 524,800, 4x.
CONVENTIONS = ("exact", "fa2")
GRADS = ("dq", "dk", "dv")
# max |X - Xref| / max |Xref| per output; gradients accumulate over a whole sequence, so they get more room.
TOLERANCE = {"fp32": (2e-4, 1e-3), "tf32": (5e-3, 2e-2), "bf16": (2e-2, 5e-2), "fp16": (5e-3, 2e-2)}
FULL_CHECK_LIMIT = 2**26  # B*H*Sq*Skv above this: compare two kv-head groups instead of every head


@dataclass(frozen=True)
class AttentionSettings:
    """`workload=attention`: softmax(scale QKᵀ + mask)V, layout (B, H, S, D). Cases: seq_q x seq_kv x head_dim x
    causal x mode. Settings that take a list sweep it."""

    name: str = setting("attention", "the workload")
    batch: int | None = setting(4, "sequences per case (null: named by batch_seq)", POSITIVE_INT)
    heads: int | None = setting(32, "query heads (null: derived from model_dim)", POSITIVE_INT)
    kv_heads: int | None = setting(None, "null = heads (MHA); a divisor of heads = GQA", POSITIVE_INT)
    seq_q: Any = setting((4096, 8192), "query sequence lengths", POSITIVE_INT)
    seq_kv: Any = setting(None, "key/value sequence lengths; null = seq_q", POSITIVE_INT)
    head_dim: Any = setting((128,), "head dimensions", POSITIVE_INT)
    causal: Any = setting((False, True), "causal masks: false, true or both")
    alignment: str = setting("top_left", "the causal diagonal when seq_q != seq_kv: top_left (torch SDPA) | "
                             "bottom_right (FlashAttention >= 2.1)", OneOf(ALIGNMENTS))
    scale: Number | None = setting(None, "null = 1/sqrt(head_dim)", POSITIVE)
    mode: Any = setting(("fwd", "fwd_bwd"), "passes timed", OneOf(MODES))
    batch_seq: Any = setting(None, "[[batch, seq], ...]: pairs instead of batch x seq_q (FlashAttention's "
                             "benchmark shapes)", POSITIVE_INT)
    model_dim: int | None = setting(None, "heads = model_dim / head_dim instead of `heads` (FlashAttention's "
                                    "benchmark: 2048)", POSITIVE_INT)
    flop_convention: str = setting("exact", "exact (the score entries the causal mask keeps, per alignment) | fa2 "
                                   "(FlashAttention-2's benchmark: causal = half of seq_q x seq_kv, whatever the "
                                   "shape)", OneOf(CONVENTIONS))
    deterministic: bool = setting(False, "the deterministic backward of FlashAttention and AITER (their "
                                  "`deterministic=`, passed to both and recorded in their rows; AITER's own default "
                                  "is true, FlashAttention's false); other backends have no such switch")


@dataclass(frozen=True)
class AttentionCase:
    batch: int
    heads: int  # query heads
    kv_heads: int
    seq_q: int
    seq_kv: int
    head_dim: int
    causal: bool
    alignment: str  # which diagonal a causal mask keeps when seq_q != seq_kv
    scale: float
    dtype: str
    mode: str  # fwd | bwd | fwd_bwd
    flop_convention: str = AttentionSettings.flop_convention
    seed: int = 0
    deterministic: bool = AttentionSettings.deterministic  # FlashAttention's and AITER's deterministic= (backward)

    workload: ClassVar[str] = "attention"

    @property
    def group(self) -> int:
        return self.heads // self.kv_heads

    @property
    def causal_offset(self) -> int:
        """Query i may see keys j <= i + offset (0 for top-left; seq_kv - seq_q for bottom-right)."""
        return self.seq_kv - self.seq_q if self.alignment == "bottom_right" else 0

    @property
    def case_id(self) -> str:
        mask = f"causal-{self.alignment}" if self.causal else "full"
        return (f"attention-{self.dtype}-{self.mode}-b{self.batch}-h{self.heads}kv{self.kv_heads}-"
                f"q{self.seq_q}-k{self.seq_kv}-d{self.head_dim}-{mask}")

    def params(self) -> dict[str, Any]:
        out = {"batch": self.batch, "heads": self.heads, "kv_heads": self.kv_heads, "seq_q": self.seq_q,
               "seq_kv": self.seq_kv, "head_dim": self.head_dim, "causal": self.causal,
               "alignment": self.alignment if self.causal else None, "scale": self.scale, "mode": self.mode}
        return {**out, "deterministic": True} if self.deterministic else out  # named only where asked

    def visible_scores(self) -> int:
        """Score entries (i, j) the mask keeps, per (batch, head)."""
        if not self.causal:
            return self.seq_q * self.seq_kv
        i = np.arange(self.seq_q)
        return int(np.clip(i + self.causal_offset + 1, 0, self.seq_kv).sum())

    def flops(self) -> float:
        # Forward = two matmuls (Q Kᵀ, P V), 2 FLOPs per multiply-add: 4·B·H·D per score entry; softmax not
        # counted. Backward = 2.5x forward (four matmuls, plus recomputing Q Kᵀ). FlashAttention-2 paper §4
        # and its benchmark script; Triton tutorial 06. `exact` counts the entries the mask keeps, for either
        # alignment (visible_scores; FlashAttention-3's hopper/benchmark_attn.py counts the bottom-right causal
        # mask as seq_q·(max(0, seq_kv - seq_q) + seq_kv)/2, the same up to the diagonal); `fa2` counts a causal
        # mask as half of seq_q·seq_kv, which only a square shape makes true (CONVENTIONS above).
        per_entry = 4.0 * self.batch * self.heads * self.head_dim
        if self.flop_convention == "fa2":
            entries = self.seq_q * self.seq_kv * (0.5 if self.causal else 1.0)
        else:
            entries = float(self.visible_scores())
        return per_entry * entries * {"fwd": 1.0, "bwd": 2.5, "fwd_bwd": 3.5}[self.mode]

    def min_flops(self) -> float:
        """The roofline floor's FLOPs (harness/machine/roofline.py): the score entries the mask keeps, whatever the
        convention credits (fa2's half of seq_q·seq_kv is up to seq_kv/seq_q times them on a short top-left block)."""
        per_entry = 4.0 * self.batch * self.heads * self.head_dim
        return per_entry * self.visible_scores() * {"fwd": 1.0, "bwd": 2.5, "fwd_bwd": 3.5}[self.mode]

    def bytes_moved(self) -> float:
        # Compulsory traffic. Forward reads Q, K, V and writes O. Backward reads Q, K, V, O, dO and writes
        # dQ, dK, dV. K and V are kv_heads wide (GQA). Score matrices never leave the chip in a fused kernel.
        item = DTYPES[self.dtype].itemsize
        q = self.batch * self.heads * self.seq_q * self.head_dim * item
        kv = self.batch * self.kv_heads * self.seq_kv * self.head_dim * item
        fwd = 2 * q + 2 * kv
        bwd = 4 * q + 4 * kv
        return float({"fwd": fwd, "bwd": bwd, "fwd_bwd": fwd + bwd}[self.mode])

    def inputs(self) -> dict[str, np.ndarray]:
        """q, k, v and the upstream gradient do, float32 arrays rounded to the dtype, (B, H, S, D)."""
        return _inputs(self)

    def check_rows(self) -> dict[str, tuple[np.ndarray, np.ndarray]] | None:
        """None: every head. Large cases: the first and last (batch, kv head) groups, as index arrays
        (batch, head) for q-shaped outputs and (batch, kv_head) for dk/dv."""
        if self.batch * self.heads * self.seq_q * self.seq_kv <= FULL_CHECK_LIMIT:
            return None
        groups = [(0, 0), (self.batch - 1, self.kv_heads - 1)]
        qb = np.array([b for b, g in groups for _ in range(self.group)])
        qh = np.array([g * self.group + r for _, g in groups for r in range(self.group)])
        kb, kh = np.array([b for b, _ in groups]), np.array([g for _, g in groups])
        return {"out": (qb, qh), "dq": (qb, qh), "dk": (kb, kh), "dv": (kb, kh)}

    def check(self, result: dict[str, np.ndarray]) -> Check:
        ref = reference.attention(self, self.inputs(), self.check_rows())
        names = ["out"] if self.mode == "fwd" else ["out", *GRADS]
        tol_out, tol_grad = TOLERANCE[self.dtype]
        errors = {}
        for name in names:
            got, want = result[name], ref[name]
            scale = float(np.max(np.abs(want))) or 1.0
            errors[name] = float(np.max(np.abs(got - want))) / scale if got.shape == want.shape else math.inf
        worst = max(names, key=lambda n: errors[n] / (tol_out if n == "out" else tol_grad))
        tol = tol_out if worst == "out" else tol_grad
        sel = self.check_rows()
        checked = ("every head" if sel is None else f"{len(sel['out'][0])} query heads in 2 kv-head groups") + \
            f"; errors {', '.join(f'{n}={e:.2g}' for n, e in errors.items())}"
        return Check(errors[worst] <= tol, errors[worst], tol, f"max|X-Xref|/max|Xref| ({worst})", checked)


@lru_cache(maxsize=1)
def _inputs(case: AttentionCase) -> dict[str, np.ndarray]:
    q_shape = (case.batch, case.heads, case.seq_q, case.head_dim)
    kv_shape = (case.batch, case.kv_heads, case.seq_kv, case.head_dim)
    return uniform_inputs(case.seed, {"q": q_shape, "k": kv_shape, "v": kv_shape, "do": q_shape}, case.dtype)


def _sweep(s: AttentionSettings) -> dict[str, list[Any]]:
    """The swept settings as lists (each takes one value or a list; their elements are checked when parsed)."""
    return {"seq_q": [] if s.seq_q is None else as_list(s.seq_q),
            "seq_kv": [None] if s.seq_kv is None else as_list(s.seq_kv),
            "head_dim": as_list(s.head_dim),
            "causal": [boolean("workload.causal", c) for c in as_list(s.causal)],
            "mode": as_list(s.mode)}


def _batch_seq(s: AttentionSettings, sweep: dict[str, list[Any]]) -> list[tuple[int, int | None]]:
    """(batch, seq_q) pairs: `batch_seq` names them (FlashAttention's benchmark keeps batch x seq fixed: 32 x 512
    ... 1 x 16384), otherwise one batch for every seq_q of the sweep."""
    pairs = s.batch_seq
    if not pairs:
        if s.batch is None:
            raise ConfigError("workload.batch", "is null without workload.batch_seq", "a positive integer")
        if not sweep["seq_q"]:
            raise ConfigError("workload.seq_q", "is empty", "a list of sequence lengths, or workload.batch_seq")
        return [(s.batch, sq) for sq in sweep["seq_q"]]
    named = [k for k in ("batch", "seq_q") if getattr(s, k) is not None]
    if named:  # never ignore a setting silently
        raise ConfigError(f"workload.{named[0]}", "is set together with workload.batch_seq, which names batch and "
                          "sequence length in pairs", f"workload.{named[0]}=null, or workload.batch_seq=null")
    out = []
    for i, pair in enumerate(as_list(pairs)):
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            raise ConfigError(f"workload.batch_seq[{i}]", f"{pair!r} is not [batch, seq]", "two positive integers")
        out.append((pair[0], pair[1]))
    return out


def _heads(s: AttentionSettings, head_dim: int) -> tuple[int, int]:
    """(heads, kv_heads); with `model_dim`, heads = model_dim / head_dim (FlashAttention's benchmark: 2048)."""
    if s.model_dim is not None:
        if s.heads is not None:
            raise ConfigError("workload.heads", "is set together with workload.model_dim, which derives heads",
                              "workload.heads=null, or workload.model_dim=null")
        if s.model_dim % head_dim:
            raise ConfigError("workload.model_dim", f"{s.model_dim} is not a multiple of head_dim={head_dim}",
                              "a multiple of every head_dim")
        heads = s.model_dim // head_dim
    elif s.heads is None:
        raise ConfigError("workload.heads", "is null without workload.model_dim", "a positive integer")
    else:
        heads = s.heads
    kv_heads = s.kv_heads or heads
    if heads % kv_heads:
        raise ConfigError("workload.kv_heads", f"{kv_heads} does not divide heads={heads}",
                          "a divisor of heads (GQA groups must be equal)")
    return heads, kv_heads


def expand(workload: Mapping[str, Any], dtype: str, seed: int) -> Sequence[AttentionCase]:
    """Cases: (batch, seq_q) pairs x seq_kv x head_dim x causal x mode."""
    s = parse_section("workload", AttentionSettings, workload)
    if dtype not in TOLERANCE:
        raise ConfigError("dtype", f"{dtype} is not an attention dtype", ", ".join(TOLERANCE))
    sweep = _sweep(s)
    deterministic = boolean("workload.deterministic", s.deterministic)
    cases = []
    for (batch, sq), skv, d, causal, mode in product(_batch_seq(s, sweep), sweep["seq_kv"], sweep["head_dim"],
                                                     sweep["causal"], sweep["mode"]):
        skv = sq if skv is None else skv
        if causal and s.alignment == "bottom_right" and sq > skv:
            raise ConfigError("workload.seq_q", f"bottom_right causal with seq_q={sq} > seq_kv={skv} leaves "
                              "query rows with no visible key", "seq_q <= seq_kv, or alignment=top_left")
        heads, kv_heads = _heads(s, d)
        scale = float(s.scale) if s.scale is not None else 1 / math.sqrt(d)
        cases.append(AttentionCase(batch, heads, kv_heads, sq, skv, d, causal, s.alignment, scale, dtype, mode,
                                   s.flop_convention, seed, deterministic))
    return cases
