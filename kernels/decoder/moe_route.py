"""MoE routing in one launch: scores, top-k and normalised weights of each token.

In torch ops a router's softmax or sqrt-softplus, top-k, gather and normalisation are
five to nine kernels a MoE layer; here one program per token does them in registers,
picking the ``k`` experts by repeated arg-max (descending, as ``topk`` orders them).
Ties between equal scores may pick another of the tied experts than ``topk`` does.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _route_kernel(logits, bias, weights, ids, E, stride_l, scale,
                  K: tl.constexpr, KP: tl.constexpr, EP: tl.constexpr, SQRT_SOFTPLUS: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    e = tl.arange(0, EP)
    m = e < E
    x = tl.load(logits + t * stride_l + e, mask=m, other=float("-inf")).to(tl.float32)
    if SQRT_SOFTPLUS:  # softplus as torch computes it (x past 20: x), then its square root
        sp = tl.where(x > 20.0, x, tl.where(x < -15.0, tl.exp(x), tl.log(1.0 + tl.exp(x))))
        score = tl.sqrt(tl.where(m, sp, 0.0))
        sel = tl.where(m, score + tl.load(bias + e, mask=m, other=0.0).to(tl.float32), float("-inf"))
    else:  # softmax over the experts
        p = tl.exp(x - tl.max(x, 0))
        score = p / tl.sum(p, 0)
        sel = tl.where(m, score, float("-inf"))
    kk = tl.arange(0, KP)
    w = tl.zeros([KP], tl.float32)
    idx = tl.zeros([KP], tl.int64)
    for j in tl.static_range(K):
        best = tl.argmax(sel, 0)
        w = tl.where(kk == j, tl.sum(tl.where(e == best, score, 0.0), 0), w)
        idx = tl.where(kk == j, best.to(tl.int64), idx)
        sel = tl.where(e == best, float("-inf"), sel)
    if SQRT_SOFTPLUS:
        w = w / (tl.sum(w, 0) + 1e-20) * scale
    else:
        w = w / tl.sum(w, 0)
    tl.store(weights + t * K + kk, w, mask=kk < K)
    tl.store(ids + t * K + kk, idx, mask=kk < K)


def route_fused(logits: torch.Tensor, k: int, bias: torch.Tensor | None = None, scale: float = 1.0):
    """``(weights [T, k] fp32, ids [T, k] int64)``: with ``bias``, DeepSeek-V4's sqrt-softplus
    routing (:func:`.moe.route_sqrtsoftplus`), else Qwen3's softmax (:func:`.moe.route_softmax`)."""
    T, E = logits.shape
    weights = torch.empty(T, k, dtype=torch.float32, device=logits.device)
    ids = torch.empty(T, k, dtype=torch.int64, device=logits.device)
    if T:
        _route_kernel[(T,)](logits, bias if bias is not None else logits, weights, ids, E, logits.stride(0), scale,
                            K=k, KP=triton.next_power_of_2(k), EP=triton.next_power_of_2(E),
                            SQRT_SOFTPLUS=bias is not None, num_warps=4 if E > 128 else 2)
    return weights, ids


__all__ = ["route_fused"]
