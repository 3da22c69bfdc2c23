"""Qwen3 building blocks: RMSNorm, RoPE, GQA attention, SwiGLU MLP, MoE, a layer.

Weights are plain parameters with Hugging Face shapes (``[out, in]``); q/k/v and
gate/up are fused into one matmul each. Every forward works on a flat token
axis ``[T, hidden]`` described by a :class:`~.batch.Batch`.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from dspark_sim.kernels.decoder.attention import Attn, attention
from dspark_sim.kernels.decoder.fused import add_rms_norm, norm_rope_, silu_mul
from dspark_sim.kernels.decoder.moe import fused_moe, route_softmax


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, impl: str = "torch") -> torch.Tensor:
    """RMSNorm over the last axis, computed in fp32, returned in ``x.dtype``."""
    return add_rms_norm(x, None, weight, eps, impl)[0]


class Rope:
    """Rotary tables ``cos``/``sin`` ``[max_pos, D/2]`` fp32 (half-split rotation)."""

    def __init__(self, head_dim: int, theta: float, max_pos: int, device):
        inv = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
        ang = torch.arange(max_pos, dtype=torch.float64)[:, None] * inv[None, :]
        self.cos = ang.cos().float().to(device)
        self.sin = ang.sin().float().to(device)


def _reduce(module, x: torch.Tensor) -> torch.Tensor:
    """The row-parallel output summed over the ranks (unchanged on one GPU)."""
    return x if module.shard is None else module.shard.all_reduce(x)


class Attention(nn.Module):
    """GQA self-attention with Qwen3's per-head q/k RMSNorm, over the paged cache.
    Under tensor parallelism (:mod:`.shard`) it holds a rank's heads and sums ``o`` over ranks."""

    shard = None

    def __init__(self, spec, dtype):
        super().__init__()
        self.h, self.kvh, self.d = spec.num_heads, spec.num_kv_heads, spec.head_dim
        self.eps = spec.rms_norm_eps
        self.qk_norm = spec.qk_norm
        qkv = (self.h + 2 * self.kvh) * self.d
        self.qkv = nn.Parameter(torch.empty(qkv, spec.hidden_size, dtype=dtype))
        self.o = nn.Parameter(torch.empty(spec.hidden_size, self.h * self.d, dtype=dtype))
        self.q_norm = nn.Parameter(torch.ones(self.d, dtype=dtype))
        self.k_norm = nn.Parameter(torch.ones(self.d, dtype=dtype))

    def _rotate(self, x, q_heads, positions, rope, impl) -> None:
        """q/k RMSNorm (Qwen3) and RoPE, in place on ``x [T, heads, D]``."""
        w_q = (self.q_norm if q_heads else self.k_norm) if self.qk_norm else None
        norm_rope_(x, q_heads, w_q, self.k_norm if self.qk_norm else None, rope.cos, rope.sin,
                   positions, self.eps, impl)

    def write_kv(self, x, positions, slots, rope, k_cache, v_cache, impl: str = "torch") -> None:
        """Project ``x [T, hidden]`` to keys/values only and store them (drafter context)."""
        kv = F.linear(x, self.qkv[self.h * self.d:]).view(-1, 2 * self.kvh, self.d)
        self._rotate(kv[:, :self.kvh], 0, positions, rope, impl)
        k_cache.index_copy_(0, slots, kv[:, :self.kvh])
        v_cache.index_copy_(0, slots, kv[:, self.kvh:])

    def forward(self, x, batch, slots, rope, k_cache, v_cache, shape: Attn, impl: str):
        """Store this step's keys/values, attend, project: ``[T, hidden]``."""
        h, kvh = self.h, self.kvh
        qkv = F.linear(x, self.qkv).view(-1, h + 2 * kvh, self.d)
        self._rotate(qkv[:, :h + kvh], h, batch.positions, rope, impl)
        k_cache.index_copy_(0, slots, qkv[:, h:h + kvh])
        v_cache.index_copy_(0, slots, qkv[:, h + kvh:])
        o = attention(qkv[:, :h], k_cache, v_cache, batch, shape, impl)
        return _reduce(self, F.linear(o.view(-1, h * self.d), self.o))


class Mlp(nn.Module):
    """SwiGLU: ``down(silu(gate(x)) * up(x))`` with gate and up fused (a rank's slice of the
    width under tensor parallelism, summed over ranks)."""

    shard = None

    def __init__(self, hidden: int, inter: int, dtype):
        super().__init__()
        self.gate_up = nn.Parameter(torch.empty(2 * inter, hidden, dtype=dtype))
        self.down = nn.Parameter(torch.empty(hidden, inter, dtype=dtype))

    def forward(self, x, impl: str = "torch"):
        return _reduce(self, F.linear(silu_mul(F.linear(x, self.gate_up), impl), self.down))


class Moe(nn.Module):
    """Qwen3-MoE block: softmax router, top-k experts, renormalised weights, run by the fused
    kernels of :mod:`.moe` (CUDA-graph safe); ``impl="torch"`` runs the per-expert loop
    reference (eager only). Under expert parallelism (:mod:`.shard`) it holds experts
    ``first_expert ..`` and the ranks' outputs are summed, or exchanged by all-to-all (:mod:`.ep`)."""

    shard = None
    first_expert = None

    def __init__(self, spec, dtype):
        super().__init__()
        e, h, i = spec.num_experts, spec.hidden_size, spec.moe_intermediate_size
        self.top_k = spec.experts_per_token
        self.router = nn.Parameter(torch.empty(e, h, dtype=dtype))
        self.gate_up = nn.Parameter(torch.empty(e, 2 * i, h, dtype=dtype))
        self.down = nn.Parameter(torch.empty(e, h, i, dtype=dtype))

    def forward(self, x, impl: str = "torch"):
        if self.shard is not None and self.shard.moe_comm == "a2a":
            from dspark_sim.kernels.decoder.ep import moe_all_to_all
            return moe_all_to_all(self, x, impl)
        weight, ids = route_softmax(F.linear(x, self.router), self.top_k, impl)
        return _reduce(self, fused_moe(x, self.gate_up, self.down, weight, ids, impl, self.first_expert))


class Layer(nn.Module):
    """Pre-norm decoder layer with a carried residual (one fused add+norm per sublayer).

    ``forward(x, residual)`` returns ``(x, residual)``; the layer's output hidden
    state is their sum. Pass ``residual=None`` to the first layer.
    """

    def __init__(self, spec, dtype, moe: bool = False):
        super().__init__()
        self.eps = spec.rms_norm_eps
        self.attn = Attention(spec, dtype)
        self.mlp = Moe(spec, dtype) if moe else Mlp(spec.hidden_size, spec.intermediate_size, dtype)
        self.norm1 = nn.Parameter(torch.ones(spec.hidden_size, dtype=dtype))
        self.norm2 = nn.Parameter(torch.ones(spec.hidden_size, dtype=dtype))

    def forward(self, x, residual, batch, slots, rope, k_cache, v_cache, shape: Attn, impl: str):
        h, residual = add_rms_norm(x, residual, self.norm1, self.eps, impl)
        h = self.attn(h, batch, slots, rope, k_cache, v_cache, shape, impl)
        h, residual = add_rms_norm(h, residual, self.norm2, self.eps, impl)
        return self.mlp(h, impl), residual
