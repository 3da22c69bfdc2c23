"""DeepSeek-V4's small per-layer work in one kernel each: hyper-connections, their merge, RoPE.

Written as torch ops, a V4 layer's hyper-connections run their Sinkhorn normalisation
(``hc_sinkhorn_iters`` = 20 in the V4 configs) as some 80 tiny kernels each, twice a
layer, and every RoPE rotation (six a CSA layer) as a dozen more: several hundred
launches a layer, which inside a CUDA graph still cost a gap each and made the decode
step launch-bound (about 1 ms a layer at one request on an H200). Here each is one
launch, one program per token (or token and head):

* :func:`hc_mix`: the RMS of a token's streams, the pre / post / comb mixes from the
  streams' linear map (``mix``, one GEMM before this), the Sinkhorn iterations in
  registers, and the block input ``sum_i pre_i streams_i`` (the final collapse too);
* :func:`hc_merge`: new streams ``post_i y + sum_j comb_ji streams_j``;
* :func:`rope_`: the trailing rotary channels rotated in place (optionally after a
  weightless RMS norm of the head, V4's query norm), either direction.

Each has a torch reference in :mod:`.v4` (``impl="torch"``) that the tests compare against.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _hc_mix_kernel(streams, mix, base, scale, post, comb, x, H, eps,
                   M: tl.constexpr, ITERS: tl.constexpr, FINAL: tl.constexpr, BLOCK_H: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    i = tl.arange(0, M)
    hh = tl.arange(0, BLOCK_H)
    row = streams + t * M * H
    ss = tl.zeros([M, BLOCK_H], tl.float32)
    for h0 in range(0, H, BLOCK_H):  # the RMS over all M H features of the token
        m = (h0 + hh) < H
        s = tl.load(row + i[:, None] * H + (h0 + hh)[None, :], mask=m[None, :], other=0.0).to(tl.float32)
        ss += s * s
    r = tl.rsqrt(tl.sum(tl.sum(ss, 1), 0) / (M * H) + eps)
    W = M if FINAL else (2 + M) * M
    pre = tl.sigmoid(tl.load(mix + t * W + i) * r * tl.load(scale) + tl.load(base + i)) + eps
    if not FINAL:
        p = tl.load(mix + t * W + M + i) * r * tl.load(scale + 1) + tl.load(base + M + i)
        tl.store(post + t * M + i, 2.0 * tl.sigmoid(p))
        j = tl.arange(0, M)
        c = tl.load(mix + t * W + 2 * M + i[:, None] * M + j[None, :]) * r * tl.load(scale + 2) \
            + tl.load(base + 2 * M + i[:, None] * M + j[None, :])
        c = tl.exp(c - tl.max(c, 1)[:, None])
        c = c / tl.sum(c, 1)[:, None] + eps
        c = c / (tl.sum(c, 0)[None, :] + eps)
        for _ in range(ITERS - 1):
            c = c / (tl.sum(c, 1)[:, None] + eps)
            c = c / (tl.sum(c, 0)[None, :] + eps)
        tl.store(comb + t * M * M + i[:, None] * M + j[None, :], c)
    for h0 in range(0, H, BLOCK_H):  # the block input: the streams weighted by pre
        m = (h0 + hh) < H
        s = tl.load(row + i[:, None] * H + (h0 + hh)[None, :], mask=m[None, :], other=0.0).to(tl.float32)
        tl.store(x + t * H + h0 + hh, tl.sum(s * pre[:, None], 0).to(x.dtype.element_ty), mask=m)


def hc_mix(streams: torch.Tensor, mix: torch.Tensor, base: torch.Tensor, scale: torch.Tensor, iters: int,
           eps: float, final: bool):
    """``streams [T, M, H]`` (contiguous), ``mix [T, W]`` fp32 (the flattened streams times the
    hyper-connection's map, not yet normalised) -> ``(post [T, M], comb [T, M, M], x [T, H])``,
    or ``x`` alone when ``final``."""
    T, M, H = streams.shape
    post = torch.empty(T, M, dtype=torch.float32, device=streams.device)
    comb = torch.empty(T, M, M, dtype=torch.float32, device=streams.device)
    x = torch.empty(T, H, dtype=streams.dtype, device=streams.device)
    if T:
        _hc_mix_kernel[(T,)](streams, mix.contiguous(), base, scale, post, comb, x, H, eps, M=M, ITERS=iters,
                             FINAL=final, BLOCK_H=min(triton.next_power_of_2(H), 1024), num_warps=4)
    return x if final else (post, comb, x)


@triton.jit
def _hc_merge_kernel(streams, y, post, comb, out, H, M: tl.constexpr, BLOCK_H: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    hh = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    m = hh < H
    i = tl.arange(0, M)
    s = tl.load(streams + t * M * H + i[:, None] * H + hh[None, :], mask=m[None, :], other=0.0).to(tl.float32)
    ct = tl.load(comb + t * M * M + i[None, :] * M + i[:, None])  # ct[i, j] = comb[j, i]
    acc = tl.sum(ct[:, :, None] * s[None, :, :], 1)
    yv = tl.load(y + t * H + hh, mask=m, other=0.0).to(tl.float32)
    acc += tl.load(post + t * M + i)[:, None] * yv[None, :]
    tl.store(out + t * M * H + i[:, None] * H + hh[None, :], acc.to(out.dtype.element_ty), mask=m[None, :])


def hc_merge(streams: torch.Tensor, y: torch.Tensor, post: torch.Tensor, comb: torch.Tensor) -> torch.Tensor:
    """New streams ``[T, M, H]``: ``post_i y + sum_j comb_ji streams_j`` (fp32 sums)."""
    T, M, H = streams.shape
    out = torch.empty_like(streams)
    block = min(triton.next_power_of_2(H), 256)
    if T:
        _hc_merge_kernel[(T, triton.cdiv(H, block))](streams, y.contiguous(), post, comb, out, H, M=M,
                                                     BLOCK_H=block, num_warps=4)
    return out


@triton.jit
def _rope_kernel(x, cos, sin, positions, stride_t, stride_g, sign, eps,
                 D: tl.constexpr, HALF: tl.constexpr, NORM: tl.constexpr, BLOCK_D: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    row = x + t * stride_t + tl.program_id(1).to(tl.int64) * stride_g
    r = 1.0
    if NORM:  # weightless RMS over the head first; the channels before the rotary ones stored here
        d = tl.arange(0, BLOCK_D)
        v = tl.load(row + d, mask=d < D, other=0.0).to(tl.float32)
        r = tl.rsqrt(tl.sum(v * v, 0) / D + eps)
        tl.store(row + d, (v * r).to(x.dtype.element_ty), mask=d < D - 2 * HALF)
    p = tl.load(positions + t).to(tl.int64)
    k = tl.arange(0, HALF)
    c = tl.load(cos + p * HALF + k)
    s = tl.load(sin + p * HALF + k) * sign
    even = row + D - 2 * HALF + 2 * k
    a = tl.load(even).to(tl.float32) * r
    b = tl.load(even + 1).to(tl.float32) * r
    if NORM:  # the stored (rounded) normalised value is what the rotation reads
        a = a.to(x.dtype.element_ty).to(tl.float32)
        b = b.to(x.dtype.element_ty).to(tl.float32)
    tl.store(even, (a * c - b * s).to(x.dtype.element_ty))
    tl.store(even + 1, (b * c + a * s).to(x.dtype.element_ty))


def rope_(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, positions: torch.Tensor, sign: float = 1.0,
          norm_eps: float | None = None) -> None:
    """Rotate in place the trailing ``2 * HALF`` channels (pairs 2i, 2i + 1) of ``x [T, D]`` or
    ``[T, G, D]`` (last axis contiguous) by the angles at ``positions [T]`` (``cos``/``sin``
    ``[max_pos, HALF]`` fp32); ``norm_eps``: RMS-normalise each row over ``D`` first."""
    T, D = x.shape[0], x.shape[-1]
    G = x.shape[1] if x.dim() == 3 else 1
    assert x.stride(-1) == 1
    if T:
        _rope_kernel[(T, G)](x, cos, sin, positions, x.stride(0), x.stride(1) if x.dim() == 3 else 0, sign,
                             norm_eps or 0.0, D=D, HALF=cos.shape[1], NORM=norm_eps is not None,
                             BLOCK_D=triton.next_power_of_2(D), num_warps=1 if D <= 128 else 4)


__all__ = ["hc_mix", "hc_merge", "rope_"]
