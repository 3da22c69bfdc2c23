"""Experts at block-scaled FP8, as the engines run FP8 MoE checkpoints on Hopper.

The checkpoints of DeepSeek-V3/V4 (V4's FP8 conversion on Hopper) and the Qwen3 FP8
releases store each expert's weights in FP8 E4M3 with one fp32 scale per 128 x 128
block; SGLang and vLLM multiply them by activations quantised per token in groups of
128 (``per_token_group_quant_fp8``), accumulating in fp32 and applying both scales per
128-wide slice of the reduction. The same here, our own code:

* :func:`quantize_blocks`: a weight ``[E, N, K]`` -> :class:`BlockFp8` (FP8 values and
  ``[E, N / g, K / g]`` scales, amax / 448 per block);
* :func:`quantize_rows`: activations ``[R, K]`` -> FP8 and ``[R, K / g]`` scales (one kernel);
* :func:`grouped_gemm_fp8`: :func:`.moe.grouped_gemm` with FP8 operands (tensor-core FP8
  MMA on Hopper) and the two scales folded in per K slice;
* :func:`quantize_moe_`: a MoE module's experts replaced by their FP8 blocks in place;
  :func:`.moe.fused_moe` then runs this path (same alignment, SiLU and sum).

The step reads one byte a weight plus 4 / g^2 of scales: half the bf16 bytes.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0
GROUP = 128  # the checkpoints' block edge


@dataclass
class BlockFp8:
    """A ``[E, N, K]`` weight in FP8 with one fp32 scale per ``group x group`` block."""
    q: torch.Tensor      # [E, N, K] float8_e4m3fn
    scale: torch.Tensor  # [E, N / group, K / group] fp32
    group: int

    @property
    def shape(self):
        return self.q.shape

    def dequant(self) -> torch.Tensor:
        """The fp32 weight the blocks stand for (the torch reference's)."""
        g = self.group
        s = self.scale.repeat_interleave(g, 1).repeat_interleave(g, 2)
        return self.q.float() * s


def quantize_blocks(w: torch.Tensor, group: int = GROUP, chunk: int = 16) -> BlockFp8:
    """``w [E, N, K]`` (N and K multiples of ``group``) in FP8 blocks, scale amax / 448; ``chunk``
    experts at a time (the fp32 working copies of a whole V4 layer's experts would be tens of GB)."""
    E, N, K = w.shape
    if N % group or K % group:
        raise ValueError(f"expert weight {tuple(w.shape)}: N and K must be multiples of {group}")
    q = torch.empty(E, N, K, dtype=FP8, device=w.device)
    scale = torch.empty(E, N // group, K // group, dtype=torch.float32, device=w.device)
    for e in range(0, E, chunk):
        b = w[e:e + chunk].float().view(-1, N // group, group, K // group, group)
        s = b.abs().amax(dim=(2, 4)).clamp(min=1e-12) / FP8_MAX
        q[e:e + chunk] = (b / s[:, :, None, :, None]).clamp(-FP8_MAX, FP8_MAX).to(FP8).view(-1, N, K)
        scale[e:e + chunk] = s
    return BlockFp8(q, scale, group)


@triton.jit
def _quant_rows_kernel(x, q, s, stride_x, K, G: tl.constexpr):
    r = tl.program_id(0).to(tl.int64)
    g = tl.program_id(1)
    k = g * G + tl.arange(0, G)
    v = tl.load(x + r * stride_x + k).to(tl.float32)
    sc = tl.maximum(tl.max(tl.abs(v), 0), 1e-10) / 448.0
    y = tl.clamp(v / sc, -448.0, 448.0)
    # rounded to E4M3's grid (3 mantissa bits; subnormal steps of 2^-9) before the conversion,
    # which then is exact (the interpreter's own rounding mishandles a carry into the exponent)
    quantum = tl.exp2(tl.maximum(tl.floor(tl.log2(tl.abs(y))), -6.0) - 3.0)
    y = tl.where(y < 0, -1.0, 1.0) * tl.floor(tl.abs(y) / quantum + 0.5) * quantum
    tl.store(q + r * K + k, y.to(q.dtype.element_ty))
    tl.store(s + r * (K // G) + g, sc)


def quantize_rows(x: torch.Tensor, group: int = GROUP):
    """``x [R, K]`` -> ``(q [R, K] FP8, scale [R, K / group] fp32)``: per row and group of
    ``group`` columns, scale amax / 448 (the engines' per-token-group quantisation)."""
    R, K = x.shape
    q = torch.empty(R, K, dtype=FP8, device=x.device)
    s = torch.empty(R, K // group, dtype=torch.float32, device=x.device)
    if R:
        _quant_rows_kernel[(R, K // group)](x, q, s, x.stride(0), K, G=group, num_warps=1 if group <= 128 else 4)
    return q, s


@triton.jit(do_not_specialize=["num_pairs"])
def _gemm_fp8_kernel(a, a_s, w, w_s, out, sorted_ids, block_expert, num_padded, weights, num_pairs, num_experts,
                     N, K, stride_se, stride_sn, TOP_K: tl.constexpr, ROWS_ARE_PAIRS: tl.constexpr,
                     SCALE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, G: tl.constexpr):
    pid_m = tl.program_id(0)
    if pid_m * BLOCK_M >= tl.load(num_padded):
        return
    e = tl.load(block_expert + pid_m).to(tl.int64)
    if e >= num_experts:  # pairs routed to another rank's experts
        return
    pairs = tl.load(sorted_ids + pid_m * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    live = pairs < num_pairs
    rows = pairs if ROWS_ARE_PAIRS else pairs // TOP_K
    n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    nm = n < N
    kk = tl.arange(0, G)
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for k0 in range(0, K, G):
        x = tl.load(a + rows[:, None] * K + (k0 + kk)[None, :], mask=live[:, None], other=0.0)
        b = tl.load(w + e * N * K + n[None, :] * K + (k0 + kk)[:, None], mask=nm[None, :], other=0.0)
        sa = tl.load(a_s + rows * (K // G) + k0 // G, mask=live, other=0.0)
        sw = tl.load(w_s + e * stride_se + (n // G) * stride_sn + k0 // G, mask=nm, other=0.0)
        acc += tl.dot(x, b) * sa[:, None] * sw[None, :]
    if SCALE:
        acc *= tl.load(weights + pairs, mask=live, other=0.0)[:, None]
    tl.store(out + pairs[:, None] * N + n[None, :], acc.to(out.dtype.element_ty), mask=live[:, None] & nm[None, :])


def grouped_gemm_fp8(a, w: BlockFp8, sorted_ids, block_expert, num_padded, pairs: int, top_k: int, bm: int,
                     out_dtype, weights=None, rows_are_pairs: bool = False) -> torch.Tensor:
    """:func:`.moe.grouped_gemm` on FP8 blocks: ``a [T or pairs, K]`` (bf16/fp32) quantised per
    row and group here, times ``w``; ``out [pairs, N]`` in ``out_dtype``."""
    N, K = w.q.shape[1], w.q.shape[2]
    if a.device.type == "cuda" and w.group < 32:  # the interpreter takes any edge; a GPU's FP8 dot does not
        raise ValueError(f"block-FP8 MoE: block edge {w.group} < 32, the least K of an FP8 dot on a GPU")
    aq, a_s = quantize_rows(a, w.group)
    out = torch.empty(pairs, N, dtype=out_dtype, device=a.device)
    bn = min(w.group, 64, max(16, triton.next_power_of_2(N)))
    grid = (sorted_ids.numel() // bm, triton.cdiv(N, bn))
    _gemm_fp8_kernel[grid](aq, a_s, w.q, w.scale, out, sorted_ids, block_expert, num_padded,
                           weights if weights is not None else out, pairs, w.q.shape[0], N, K,
                           w.scale.stride(0), w.scale.stride(1), TOP_K=top_k, ROWS_ARE_PAIRS=rows_are_pairs,
                           SCALE=weights is not None, BLOCK_M=bm, BLOCK_N=bn, G=w.group, num_warps=4,
                           num_stages=3)
    return out


def quantize_moe_(module, group: int = GROUP) -> None:
    """Replace ``module.gate_up`` and ``module.down`` (``[E, N, K]`` parameters) by their FP8
    blocks; :func:`.moe.fused_moe` runs them through :func:`grouped_gemm_fp8`."""
    for name in ("gate_up", "down"):
        w = getattr(module, name)
        blocks = quantize_blocks(w.detach(), group)
        delattr(module, name)
        setattr(module, name, blocks)


__all__ = ["BlockFp8", "FP8", "GROUP", "quantize_blocks", "quantize_rows", "grouped_gemm_fp8", "quantize_moe_"]
