"""Fused elementwise kernels of a layer: (add +) RMSNorm, q/k RMSNorm + RoPE, SwiGLU.

Inside a CUDA graph every kernel still costs a launch gap on the GPU, and a
Qwen3 layer written as plain torch ops runs ~65 kernels (8B at batch 1: twice
the weight-read time). These three kernels bring it to about a dozen. Each
has a torch reference (``impl="torch"``) that the CPU tests compare against.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _add_rms_kernel(x, res, w, out, res_out, stride_x, stride_r, H, eps,
                    HAS_RES: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    i = tl.arange(0, BLOCK)
    m = i < H
    v = tl.load(x + row * stride_x + i, mask=m, other=0.0).to(tl.float32)
    if HAS_RES:
        v += tl.load(res + row * stride_r + i, mask=m, other=0.0).to(tl.float32)
        tl.store(res_out + row * H + i, v.to(res_out.dtype.element_ty), mask=m)
    var = tl.sum(v * v, 0) / H
    y = v * tl.rsqrt(var + eps) * tl.load(w + i, mask=m, other=0.0).to(tl.float32)
    tl.store(out + row * H + i, y.to(out.dtype.element_ty), mask=m)


def add_rms_norm(x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor, eps: float,
                 impl: str = "triton"):
    """``(norm(x + residual) * weight, x + residual)``; with no residual, ``(norm(x), x)``.

    x, residual: ``[T, H]`` (rows contiguous); weight ``[H]``. Sums in fp32.
    """
    if impl == "torch":
        s = x if residual is None else (x.float() + residual.float()).to(x.dtype)
        f = s.float()
        y = f * torch.rsqrt(f.pow(2).mean(-1, keepdim=True) + eps) * weight.float()
        return y.to(x.dtype), s
    T, H = x.shape
    out = torch.empty(T, H, dtype=x.dtype, device=x.device)
    res_out = torch.empty_like(out) if residual is not None else x
    if T:
        _add_rms_kernel[(T,)](x, residual if residual is not None else x, weight, out, res_out,
                              x.stride(0), residual.stride(0) if residual is not None else 0, H, eps,
                              HAS_RES=residual is not None, BLOCK=triton.next_power_of_2(H),
                              num_warps=4 if H <= 4096 else 8)
    return out, res_out


@triton.jit
def _norm_rope_kernel(x, w_q, w_k, cos, sin, pos, stride_t, stride_h, q_heads, eps,
                      NORM: tl.constexpr, HALF: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1)
    j = tl.arange(0, HALF)
    base = x + t * stride_t + h * stride_h
    a = tl.load(base + j).to(tl.float32)
    b = tl.load(base + HALF + j).to(tl.float32)
    if NORM:
        r = tl.rsqrt((tl.sum(a * a, 0) + tl.sum(b * b, 0)) / (2 * HALF) + eps)
        wq = h < q_heads
        w_a = tl.where(wq, tl.load(w_q + j), tl.load(w_k + j)).to(tl.float32)
        w_b = tl.where(wq, tl.load(w_q + HALF + j), tl.load(w_k + HALF + j)).to(tl.float32)
        a = (a * r).to(x.dtype.element_ty).to(tl.float32) * w_a
        b = (b * r).to(x.dtype.element_ty).to(tl.float32) * w_b
        a = a.to(x.dtype.element_ty).to(tl.float32)
        b = b.to(x.dtype.element_ty).to(tl.float32)
    p = tl.load(pos + t).to(tl.int64)
    c = tl.load(cos + p * HALF + j)
    s = tl.load(sin + p * HALF + j)
    tl.store(base + j, (a * c - b * s).to(x.dtype.element_ty))
    tl.store(base + HALF + j, (b * c + a * s).to(x.dtype.element_ty))


def norm_rope_(x: torch.Tensor, q_heads: int, w_q, w_k, cos, sin, positions, eps: float,
               impl: str = "triton") -> None:
    """In place on ``x [T, heads, D]`` (a strided view is fine): per-head RMSNorm (weight
    ``w_q`` for heads below ``q_heads``, else ``w_k``; none when ``w_q`` is None), then
    half-split RoPE at ``positions [T]`` with tables ``cos``/``sin`` ``[max_pos, D/2]``."""
    T, heads, D = x.shape
    if impl == "torch":
        v = x.float()
        if w_q is not None:
            normed = (v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype).float()
            w = torch.cat([w_q.float().expand(q_heads, D), w_k.float().expand(heads - q_heads, D)])
            v = (normed * w).to(x.dtype).float()
        c = cos[positions.long()][:, None, :]
        s = sin[positions.long()][:, None, :]
        a, b = v.chunk(2, dim=-1)
        x.copy_(torch.cat([a * c - b * s, b * c + a * s], -1).to(x.dtype))
        return
    assert x.stride(2) == 1
    if T:
        w = w_q if w_q is not None else cos
        _norm_rope_kernel[(T, heads)](x, w, w_k if w_k is not None else cos, cos, sin, positions,
                                      x.stride(0), x.stride(1), q_heads, eps,
                                      NORM=w_q is not None, HALF=D // 2, num_warps=1)


@triton.jit
def _silu_mul_kernel(x, out, inter, BLOCK: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    i = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    m = i < inter
    g = tl.load(x + t * 2 * inter + i, mask=m, other=0.0).to(tl.float32)
    u = tl.load(x + t * 2 * inter + inter + i, mask=m, other=0.0).to(tl.float32)
    y = (g / (1.0 + tl.exp(-g))).to(out.dtype.element_ty).to(tl.float32) * u
    tl.store(out + t * inter + i, y.to(out.dtype.element_ty), mask=m)


def silu_mul(x: torch.Tensor, impl: str = "triton") -> torch.Tensor:
    """SwiGLU activation of ``x [T, 2I]`` (gate then up): ``silu(gate) * up``, ``[T, I]``."""
    if impl == "torch":
        gate, up = x.chunk(2, dim=-1)
        return torch.nn.functional.silu(gate) * up
    T, two = x.shape
    inter = two // 2
    out = torch.empty(T, inter, dtype=x.dtype, device=x.device)
    block = 1024
    if T:
        _silu_mul_kernel[(T, triton.cdiv(inter, block))](x.contiguous(), out, inter, BLOCK=block)
    return out
