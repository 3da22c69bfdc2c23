"""A DeepSeek-V4 target for the decoder: its layers at real width over the paged cache.

Built to time V4's cost (random weights; the profiler runs a slice of its layers and
scales by layer count), following the Hugging Face ``transformers`` implementation
(``models/deepseek_v4/modeling_deepseek_v4.py``): shared-KV multi-query attention
with low-rank queries and grouped low-rank outputs, a 128-token sliding window,
the CSA and HCA compressors, the lightning indexer and its top-k, attention sinks,
hyper-connections around every block, and the MoE (sqrt-softplus routing, one shared
expert) through the fused kernels of :mod:`.moe`.

Simplifications (none changes the work a step does, up to rounding): values, keys,
compressed entries and indexer keys are bf16 (the engines keep FP8 KV and FP8/FP4
indexer keys); RoPE is plain at the config's two bases (no YaRN scaling); the
first layers' hash routing uses the learned router; the SwiGLU clamp is left out;
every projection is one bf16 GEMM (the checkpoints' FP8 and FP4 weights are the
cost model's business). Per request, the compressors keep a ring of recent
projections (``RING_CSA``, ``RING_HCA`` positions) and the compressed entries and
indexer keys in slabs of ``max_entries``.

On the Triton path (``impl="triton"``) the hyper-connections, their merges and every RoPE
rotation are one kernel each (:mod:`.v4_fused`) and a step computes its compressors' slots
once for all layers; ``impl=UNFUSED`` keeps those as torch ops (the launch-bound path the
2026-12-01 slices timed), for A/B timing.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from dspark_sim.catalog.v4 import CSA
from dspark_sim.kernels.decoder.fused import add_rms_norm
from dspark_sim.kernels.decoder.layers import Mlp, rms_norm
from dspark_sim.kernels.decoder.moe import fused_moe, route_sqrtsoftplus
from dspark_sim.kernels.decoder.target import Target
from dspark_sim.kernels.decoder.v4_fused import hc_merge, hc_mix, rope_
from dspark_sim.kernels.decoder.v4_kernels import compress, index_scores, sparse_attention

COMPRESS_THETA = 160000.0  # compress_rope_theta of the V4 configs
ROUTED_SCALE = 1.5  # routed_scaling_factor (V4-Flash)
MAX_VERIFY = 16  # positions one request may add in a verify step (the drafts' limit)
RING_CSA = 32  # >= two windows of 4 and a verify window: what a CSA compressor reads back
RING_HCA = 256  # >= a window of 128 and a verify window
UNFUSED = "triton-unfused"  # impl: Triton kernels, hyper-connections and RoPE as torch ops (before v4_fused)


def fused(impl: str) -> bool:
    """Whether ``impl`` runs hyper-connections and RoPE through :mod:`.v4_fused`."""
    return impl not in ("torch", UNFUSED)


class RopeTable:
    """Interleaved RoPE tables ``cos``/``sin`` ``[max_pos, dim / 2]`` fp32 at one base."""

    def __init__(self, dim: int, theta: float, max_pos: int, device):
        inv = 1.0 / theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)
        ang = torch.arange(max_pos, dtype=torch.float64)[:, None] * inv[None, :]
        self.cos, self.sin = ang.cos().float().to(device), ang.sin().float().to(device)

    def apply_(self, x: torch.Tensor, positions: torch.Tensor, sign: float = 1.0, impl: str = "torch",
               norm_eps: float | None = None) -> None:
        """Rotate the trailing ``2 * dim/2`` channels of ``x [T, ..., D]`` in place, pairs
        (2i, 2i + 1) by the angle at ``positions [T]`` (``sign`` -1 rotates back); ``norm_eps``:
        each head RMS-normalised (no weight) first. ``impl="triton"``: one kernel."""
        if fused(impl):
            return rope_(x, self.cos, self.sin, positions, sign, norm_eps)
        if norm_eps is not None:
            x.copy_(_head_rms(x, norm_eps))
        half, positions = self.cos.shape[1], positions.long()
        r = x[..., -2 * half:].unflatten(-1, (half, 2)).float()
        shape = (x.shape[0],) + (1,) * (x.dim() - 2) + (half,)
        c = self.cos[positions].view(shape)
        s = self.sin[positions].view(shape) * sign
        a, b = r[..., 0], r[..., 1]
        x[..., -2 * half:] = torch.stack([a * c - b * s, b * c + a * s], -1).flatten(-2).to(x.dtype)


def _head_rms(x: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm without weight over the last axis (V4's per-head query norm)."""
    f = x.float()
    return (f * torch.rsqrt(f.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


class Compressor(nn.Module):
    """One compressed series of a layer: pools windows of ``ratio`` positions (``series``
    2: overlapping, CSA and its indexer) of ``dim`` features into a slab per request."""

    def __init__(self, ratio: int, series: int, dim: int, rows: int, max_pos: int, dtype, eps: float):
        super().__init__()
        self.ratio, self.series, self.dim, self.eps = ratio, series, dim, eps
        self.ring_size = RING_CSA if ratio == CSA else RING_HCA
        self.max_entries = -(-max_pos // ratio)
        self.bias = nn.Parameter(torch.zeros(ratio, series * dim, dtype=torch.float32))
        self.norm = nn.Parameter(torch.ones(dim, dtype=dtype))
        self.register_buffer("ring", torch.zeros(rows * self.ring_size + 1, 2 * series * dim, dtype=dtype),
                             persistent=False)
        self.register_buffer("entries", torch.zeros(rows * self.max_entries + 1, dim, dtype=dtype),
                             persistent=False)

    def forward(self, buf, positions, rows, rope: RopeTable, impl: str, plan=None) -> torch.Tensor:
        """Emit this step's completed entries from projections ``buf [T, 2 series dim]``;
        returns the entry slab ``[rows * max_entries + 1, dim]``. ``plan``: this step's
        :meth:`plan` (computed here when None)."""
        rope_pos, dest, ring_dest = plan if plan is not None else self.plan(positions, rows)
        pooled = compress(buf, self.ring, self.bias, positions, rows, self.ratio, self.series, self.dim,
                          self.ring_size, impl)
        out = rms_norm(pooled.to(self.norm.dtype), self.norm, self.eps, impl)
        rope.apply_(out, rope_pos, impl=impl)
        self.entries.index_copy_(0, dest, out)
        self.ring.index_copy_(0, ring_dest, buf)
        return self.entries

    def plan(self, positions, rows) -> tuple:
        """``(RoPE positions, entry slots, ring slots)`` of a step's tokens (a token that completes
        no window writes the trash entry): the same for every compressor of one :meth:`plan_key`,
        so a step computes it once per key, not once per layer."""
        pos, row = positions.long(), rows.long()
        entry = (pos + 1) // self.ratio - 1
        done = (pos + 1) % self.ratio == 0
        dest = torch.where(done, row * self.max_entries + entry, self.entries.shape[0] - 1)
        return entry.clamp(min=0) * self.ratio, dest, self._ring_slots(pos, row)

    def plan_key(self) -> tuple:
        return self.ratio, self.max_entries, self.ring_size, self.entries.shape[0], self.ring.shape[0]

    def _ring_slots(self, pos, row) -> torch.Tensor:
        """Ring slot of each token; a token whose position a later token of the step reuses
        goes to the trash row (no duplicate writes: deterministic)."""
        n, T = self.ring_size, pos.shape[0]
        dest = row * n + pos % n
        if T > n:
            later = (row[n:] == row[:-n]) & (pos[n:] == pos[:-n] + n)
            skip = torch.cat([later, torch.zeros(n, dtype=torch.bool, device=pos.device)])
            dest = torch.where(skip, self.ring.shape[0] - 1, dest)
        return dest

    def randomize_(self, gen) -> None:
        for t in (self.ring, self.entries):
            t.normal_(generator=gen)


def _shared_plan(c: Compressor, batch, plans: dict | None):
    """``c``'s plan for this step from ``plans`` (made and kept there on first use); None without."""
    if plans is None:
        return None
    key = c.plan_key()
    if key not in plans:
        plans[key] = c.plan(batch.positions, batch.token_rows)
    return plans[key]


class V4Attention(nn.Module):
    """One V4 attention block: its kind set by ``ratio`` (0 window only, 4 CSA, 128 HCA)."""

    def __init__(self, spec, ratio: int, dtype, rows: int, max_pos: int):
        super().__init__()
        v, h = spec.v4, spec.hidden_size
        self.v, self.ratio, self.eps = v, ratio, spec.rms_norm_eps
        series = 2 if ratio == CSA else 1
        self.widths = [v.q_lora_rank, v.head_dim] + ([2 * series * v.head_dim] if ratio else []) \
            + ([4 * v.index_head_dim, v.index_heads] if ratio == CSA else [])
        self.w_in = nn.Parameter(torch.empty(sum(self.widths), h, dtype=dtype))
        self.q_norm = nn.Parameter(torch.ones(v.q_lora_rank, dtype=dtype))
        self.q_b = nn.Parameter(torch.empty(v.num_heads * v.head_dim, v.q_lora_rank, dtype=dtype))
        self.kv_norm = nn.Parameter(torch.ones(v.head_dim, dtype=dtype))
        group_in = v.num_heads * v.head_dim // v.o_groups
        self.o_a = nn.Parameter(torch.empty(v.o_groups, group_in, v.o_lora_rank, dtype=dtype))
        self.o_b = nn.Parameter(torch.empty(h, v.o_groups * v.o_lora_rank, dtype=dtype))
        self.sinks = nn.Parameter(torch.zeros(v.num_heads, dtype=torch.float32))
        self.comp = Compressor(ratio, series, v.head_dim, rows, max_pos, dtype, self.eps) if ratio else None
        self.index = Compressor(CSA, 2, v.index_head_dim, rows, max_pos, dtype, self.eps) \
            if ratio == CSA else None
        if self.index is not None:
            self.index_q = nn.Parameter(torch.empty(v.index_heads * v.index_head_dim, v.q_lora_rank, dtype=dtype))

    def forward(self, x, batch, slots, k_cache, ropes, impl: str, plans: dict | None = None):
        """Attend ``x [T, hidden]`` over the window and compressed entries; store this step's
        key, projections and entries. ``ropes``: (main, compress) tables; ``plans``: the step's
        compressor plans by key, shared by the layers (filled on first use). The stages are
        methods so that the profiler can time each (:mod:`dspark_sim.kernels.profiler.layer_parts`)."""
        parts = self.project(x)
        q_res, q = self.queries(parts, batch, ropes, impl)
        self.store_key(parts, batch, slots, k_cache, ropes, impl)
        comp, keys = self.compress(parts, batch, ropes, impl, plans)
        topk = self.select(q_res, parts, keys, batch, ropes, impl)
        o = self.attend(q, k_cache, comp, topk, batch, impl)
        return self.output(o, batch, ropes, impl)

    def project(self, x) -> list:
        """The fused input projection, split: query, key, compressor and indexer inputs."""
        return F.linear(x, self.w_in).split(self.widths, dim=-1)

    def queries(self, parts, batch, ropes, impl: str):
        """``(q_res [T, q_lora_rank], q [T, heads, head_dim])``: normed low-rank and rotated queries."""
        v, T = self.v, parts[0].shape[0]
        q_res = rms_norm(parts[0].contiguous(), self.q_norm, self.eps, impl)
        q = F.linear(q_res, self.q_b).view(T, v.num_heads, v.head_dim)
        ropes[1 if self.ratio else 0].apply_(q, batch.positions, impl=impl, norm_eps=self.eps)
        return q_res, q

    def store_key(self, parts, batch, slots, k_cache, ropes, impl: str) -> None:
        """This step's shared key (= value) normed, rotated and written to the paged cache."""
        kv = rms_norm(parts[1].contiguous(), self.kv_norm, self.eps, impl)
        ropes[1 if self.ratio else 0].apply_(kv, batch.positions, impl=impl)
        k_cache.index_copy_(0, slots, kv.view(kv.shape[0], 1, self.v.head_dim))

    def compress(self, parts, batch, ropes, impl: str, plans: dict | None = None):
        """``(entries, indexer keys)``: the compressors' slabs after this step (None where absent)."""
        out = []
        for c, i in ((self.comp, 2), (self.index, 3)):
            out.append(None if c is None else
                       c(parts[i], batch.positions, batch.token_rows, ropes[1], impl, _shared_plan(c, batch, plans)))
        return tuple(out)

    def select(self, q_res, parts, keys, batch, ropes, impl: str):
        """The lightning indexer: entries ``[T, k]`` each query attends (-1: none); None without one."""
        if self.index is None:
            return None
        v, T = self.v, q_res.shape[0]
        q = F.linear(q_res, self.index_q).view(T, v.index_heads, v.index_head_dim)
        ropes[1].apply_(q, batch.positions, impl=impl)
        w = parts[4].float() * (v.index_heads ** -0.5 * v.index_head_dim ** -0.5)
        scores = index_scores(q, w, keys, batch.positions, batch.token_rows, CSA, self.index.max_entries, impl)
        vals, idx = scores.topk(min(v.index_topk, scores.shape[1]), dim=-1)
        return torch.where(torch.isinf(vals), -1, idx)

    def attend(self, q, k_cache, comp, topk, batch, impl: str):
        """Sparse attention over the window, the chosen (or all) entries and the sinks."""
        max_entries = self.comp.max_entries if self.comp is not None else 1
        return sparse_attention(q, k_cache, comp, topk, self.sinks, batch, self.v.sliding_window,
                                max(self.ratio, 1), max_entries, impl)

    def output(self, o, batch, ropes, impl: str):
        """The attention output rotated back, through the grouped low-rank output projection."""
        v, T = self.v, o.shape[0]
        ropes[1 if self.ratio else 0].apply_(o, batch.positions, sign=-1.0, impl=impl)
        grouped = torch.bmm(o.view(T, v.o_groups, -1).transpose(0, 1), self.o_a).transpose(0, 1)
        return F.linear(grouped.reshape(T, -1), self.o_b)


class HyperConnection(nn.Module):
    """Manifold-constrained hyper-connection: mixes ``hc_mult`` residual streams into a block's
    input and its output back into the streams (Sinkhorn-normalised mixing)."""

    def __init__(self, streams: int, hidden: int, iters: int, eps: float, final: bool = False):
        super().__init__()
        self.m, self.iters, self.eps, self.final = streams, iters, eps, final
        width = streams if final else (2 + streams) * streams
        self.fn = nn.Parameter(torch.empty(width, streams * hidden, dtype=torch.float32))
        self.base = nn.Parameter(torch.zeros(width, dtype=torch.float32))
        self.scale = nn.Parameter(torch.ones(1 if final else 3, dtype=torch.float32))

    def forward(self, streams: torch.Tensor, impl: str = "torch"):
        """``streams [T, m, H]`` -> ``(post [T, m], comb [T, m, m], block input [T, H])``
        (final: the collapsed stream alone). ``impl="triton"``: one GEMM and one kernel."""
        m = self.m
        flat = streams.flatten(1).float()
        if fused(impl):
            return hc_mix(streams, F.linear(flat, self.fn), self.base, self.scale, self.iters, self.eps, self.final)
        mix = F.linear(flat * torch.rsqrt(flat.pow(2).mean(-1, keepdim=True) + self.eps), self.fn)
        if self.final:
            pre = torch.sigmoid(mix * self.scale + self.base) + self.eps
            return (pre.unsqueeze(-1) * streams).sum(1).to(streams.dtype)
        pre, post, comb = mix.split([m, m, m * m], dim=-1)
        b_pre, b_post, b_comb = self.base.split([m, m, m * m])
        pre = torch.sigmoid(pre * self.scale[0] + b_pre) + self.eps
        post = post * self.scale[1] + b_post
        comb = torch.softmax((comb * self.scale[2] + b_comb).view(-1, m, m), -1) + self.eps
        comb = comb / (comb.sum(-2, keepdim=True) + self.eps)
        for _ in range(self.iters - 1):
            comb = comb / (comb.sum(-1, keepdim=True) + self.eps)
            comb = comb / (comb.sum(-2, keepdim=True) + self.eps)
        return 2 * torch.sigmoid(post), comb, (pre.unsqueeze(-1) * streams).sum(1).to(streams.dtype)


def merge(streams, y, post, comb, impl: str = "torch") -> torch.Tensor:
    """New streams: the block output ``y [T, H]`` spread by ``post`` plus the mixed old streams."""
    if fused(impl):
        return hc_merge(streams, y, post, comb)
    dtype = streams.dtype
    return post.to(dtype).unsqueeze(-1) * y.unsqueeze(1) + torch.matmul(comb.to(dtype).transpose(-1, -2), streams)


class V4Moe(nn.Module):
    """V4 MoE: sqrt-softplus router with a per-expert bias, top-k routed experts (fused
    kernels) and one shared expert."""

    def __init__(self, spec, dtype):
        super().__init__()
        e, h, i = spec.num_experts, spec.hidden_size, spec.moe_intermediate_size
        self.top_k = spec.experts_per_token
        self.router = nn.Parameter(torch.empty(e, h, dtype=dtype))
        self.register_buffer("bias", torch.zeros(e, dtype=torch.float32), persistent=False)
        self.gate_up = nn.Parameter(torch.empty(e, 2 * i, h, dtype=dtype))
        self.down = nn.Parameter(torch.empty(e, h, i, dtype=dtype))
        self.shared = Mlp(h, i * spec.num_shared_experts, dtype)

    def forward(self, x, impl: str):
        weight, ids = route_sqrtsoftplus(F.linear(x, self.router), self.bias, self.top_k, ROUTED_SCALE, impl)
        return fused_moe(x, self.gate_up, self.down, weight, ids, impl) + self.shared(x, impl)


class V4Layer(nn.Module):
    """Hyper-connections around V4 attention and the MoE."""

    def __init__(self, spec, ratio: int, dtype, rows: int, max_pos: int):
        super().__init__()
        v, h = spec.v4, spec.hidden_size
        self.eps = spec.rms_norm_eps
        self.attn_hc = HyperConnection(v.hc_mult, h, v.hc_sinkhorn_iters, self.eps)
        self.ffn_hc = HyperConnection(v.hc_mult, h, v.hc_sinkhorn_iters, self.eps)
        self.norm1 = nn.Parameter(torch.ones(h, dtype=dtype))
        self.norm2 = nn.Parameter(torch.ones(h, dtype=dtype))
        self.attn = V4Attention(spec, ratio, dtype, rows, max_pos)
        self.mlp = V4Moe(spec, dtype)

    def forward(self, streams, batch, slots, k_cache, ropes, impl: str, plans: dict | None = None):
        post, comb, x = self.attn_hc(streams, impl)
        y = self.attn(rms_norm(x, self.norm1, self.eps, impl), batch, slots, k_cache, ropes, impl, plans)
        streams = merge(streams, y, post, comb, impl)
        post, comb, x = self.ffn_hc(streams, impl)
        return merge(streams, self.mlp(rms_norm(x, self.norm2, self.eps, impl), impl), post, comb, impl)


class V4Target(Target):
    """DeepSeek-V4 target (a slice of its layers when ``spec`` is one): the decoder's target
    interface, random weights only, no drafter features."""

    def __init__(self, spec, dtype: torch.dtype, rows: int, max_pos: int):
        nn.Module.__init__(self)
        self.spec = spec
        v, h = spec.v4, spec.hidden_size
        self.embed = nn.Parameter(torch.empty(spec.vocab_size, h, dtype=dtype))
        self.layers = nn.ModuleList(V4Layer(spec, r, dtype, rows, max_pos) for r in v.compress_ratios)
        self.head_hc = HyperConnection(v.hc_mult, h, 0, spec.rms_norm_eps, final=True)
        self.norm = nn.Parameter(torch.ones(h, dtype=dtype))
        self.lm_head = nn.Parameter(torch.empty(spec.vocab_size, h, dtype=dtype))
        device = self.embed.device
        self.ropes = (RopeTable(v.rope_head_dim, spec.rope_theta, max_pos, device),
                      RopeTable(v.rope_head_dim, COMPRESS_THETA, max_pos, device))

    def forward(self, ids, batch, cache, rope, shape, impl: str, features: tuple[int, ...] = ()):
        """``(hidden [T, H], None)``: tokens ``ids [T]`` through the layers (``rope`` and
        ``shape`` belong to the Qwen3 path; V4 keeps its own tables and kernels)."""
        slots = batch.slots()
        x = F.embedding(ids, self.embed)
        streams = x.unsqueeze(1).expand(-1, self.spec.v4.hc_mult, -1).contiguous()
        plans = {}  # the compressors' slots, once a step for all layers
        for i, layer in enumerate(self.layers):
            streams = layer(streams, batch, slots, cache.k[i], self.ropes, impl, plans)
        return add_rms_norm(self.head_hc(streams, impl), None, self.norm, self.spec.rms_norm_eps, impl)[0], None

    def load(self, directory) -> None:
        raise NotImplementedError("the DeepSeek-V4 target runs with random weights (a cost slice)")

    def randomize_cache(self, gen) -> None:
        """N(0, 1) in every compressor ring and entry slab (timing never runs on zeros)."""
        for m in self.modules():
            if isinstance(m, Compressor):
                m.randomize_(gen)


__all__ = ["UNFUSED", "fused", "V4Target", "V4Layer", "V4Attention", "V4Moe", "HyperConnection", "Compressor", "RopeTable",
           "RING_CSA", "RING_HCA"]
