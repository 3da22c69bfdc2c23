"""Attention of ragged query windows over a paged KV cache.

One kernel serves prefill chunks, verify windows, plain decode and the drafter's
block: request ``r`` owns queries ``q_start[r] .. q_start[r]+q_len[r]-1`` at the
last ``q_len[r]`` positions of its ``kv_len[r]`` cached keys, whose pages are
listed in row ``rows[r]`` of ``page_table``. ``causal`` masks keys after each
query's position; the DSpark block attends bidirectionally (``causal=False``).
Every shape is fixed by ``Attn`` integers, so the launch can sit in a CUDA graph.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import triton
import triton.language as tl


@dataclass(frozen=True, slots=True)
class Attn:
    """Launch shape: ``block_t`` query tokens per program, ``chunks`` programs per
    request, ``splits`` programs along the keys (flash-decoding), ``causal``."""

    block_t: int
    chunks: int
    splits: int
    causal: bool = True


def plan(max_q: int, num_reqs: int, kv_heads: int, group: int, num_sms: int = 132,
         causal: bool = True) -> Attn:
    """Pick a launch shape for requests of at most ``max_q`` queries each."""
    gpad = triton.next_power_of_2(group)
    block_t = min(triton.next_power_of_2(max(max_q, 1)), max(1, 64 // gpad))
    chunks = triton.cdiv(max_q, block_t)
    programs = num_reqs * kv_heads * chunks
    splits = 1 if chunks > 1 else min(16, triton.next_power_of_2(triton.cdiv(2 * num_sms, programs)))
    return Attn(block_t, chunks, splits, causal)


# The token and chunk counts of a prefill step vary from step to step: specialising on them
# (== 1, divisible by 16) would compile new binaries while serving (about a second each).
@triton.jit(do_not_specialize=["num_tokens", "chunks"])
def _attn_kernel(q, k_cache, v_cache, out, part_o, part_lse,
                 rows, q_start, q_len, kv_len, page_table,
                 stride_qt, stride_qh, stride_ks, stride_kh, stride_pt, num_tokens, num_heads, sm_scale,
                 chunks, GROUP: tl.constexpr, GPAD: tl.constexpr, D: tl.constexpr, PAGE: tl.constexpr,
                 BLOCK_T: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 SPLITS: tl.constexpr, CAUSAL: tl.constexpr):
    pid = tl.program_id(0)
    kvh = tl.program_id(1)
    split = tl.program_id(2)
    r = pid // chunks  # a runtime value: a prefill's chunk count varies step to step
    chunk = pid % chunks
    ql = tl.load(q_len + r)
    if chunk * BLOCK_T >= ql:
        return
    kl = tl.load(kv_len + r)
    qs = tl.load(q_start + r)
    row = tl.load(rows + r).to(tl.int64)
    i = tl.arange(0, BLOCK_M)
    t = chunk * BLOCK_T + i // GPAD  # token within the request
    g = i % GPAD
    valid = (i // GPAD < BLOCK_T) & (t < ql) & (g < GROUP)
    head = kvh * GROUP + g
    tok = (qs + t).to(tl.int64)
    d = tl.arange(0, D)
    q_ptr = q + tok[:, None] * stride_qt + head[:, None] * stride_qh + d[None, :]
    qv = tl.load(q_ptr, mask=valid[:, None], other=0.0)
    qpos = kl - ql + t
    end = kl
    if CAUSAL:
        end = tl.minimum(kl, kl - ql + chunk * BLOCK_T + BLOCK_T)
    per = tl.cdiv(tl.cdiv(end, SPLITS), BLOCK_N) * BLOCK_N
    lo = split * per
    hi = tl.minimum(end, lo + per)
    m_i = tl.full([BLOCK_M], -1.0e30, tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    scale = sm_scale * 1.4426950408889634
    for n in range(lo, hi, BLOCK_N):
        offs = n + tl.arange(0, BLOCK_N)
        inside = offs < hi
        page = tl.load(page_table + row * stride_pt + offs // PAGE, mask=inside, other=0)
        slot = page.to(tl.int64) * PAGE + offs % PAGE
        kv_off = slot[:, None] * stride_ks + kvh * stride_kh + d[None, :]
        k = tl.load(k_cache + kv_off, mask=inside[:, None], other=0.0)
        s = tl.dot(qv, tl.trans(k)) * scale
        keep = inside[None, :]
        if CAUSAL:
            keep = keep & (offs[None, :] <= qpos[:, None])
        s = tl.where(keep, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.exp2(s - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_cache + kv_off, mask=inside[:, None], other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    o = acc / tl.maximum(l_i, 1.0e-30)[:, None]
    if SPLITS == 1:
        o_ptr = out + (tok[:, None] * num_heads + head[:, None]) * D + d[None, :]
        tl.store(o_ptr, o.to(out.dtype.element_ty), mask=valid[:, None])
    else:
        base = (split * num_tokens + tok) * num_heads + head  # [SPLITS, T, H] index
        tl.store(part_o + base[:, None] * D + d[None, :], o, mask=valid[:, None])
        lse = tl.where(l_i > 0, m_i + tl.log2(tl.maximum(l_i, 1.0e-30)), float("-inf"))
        tl.store(part_lse + base, lse, mask=valid)


@triton.jit(do_not_specialize=["num_tokens"])
def _combine_kernel(out, part_o, part_lse, num_tokens, num_heads,
                    D: tl.constexpr, SPLITS: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1)
    s = tl.arange(0, SPLITS)
    idx = (s * num_tokens + t) * num_heads + h
    lse = tl.load(part_lse + idx)
    w = tl.exp2(lse - tl.max(lse, 0))
    w = w / tl.sum(w, 0)
    d = tl.arange(0, D)
    o = tl.load(part_o + idx[:, None] * D + d[None, :])
    res = tl.sum(o * w[:, None], 0)
    tl.store(out + (t * num_heads + h) * D + d, res.to(out.dtype.element_ty))


def attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta, shape: Attn,
              impl: str = "triton") -> torch.Tensor:
    """Attention output ``[T, H, D]`` for queries ``q [T, H, D]``.

    ``k_cache``/``v_cache``: ``[slots, KVH, D]`` (slot = page * page_size + offset).
    ``meta``: a ``Batch`` (rows, q_start, q_len, kv_len [R] int32; page_table
    [rows, pages] int32; page_size). Query tokens not owned by any request are
    left unwritten.
    """
    if impl == "torch":
        return attention_ref(q, k_cache, v_cache, meta, shape.causal)
    T, H, D = q.shape
    KVH = k_cache.shape[1]
    assert q.stride(2) == 1 and k_cache.stride(2) == 1 and D == triton.next_power_of_2(D)
    group = H // KVH
    gpad = triton.next_power_of_2(group)
    block_m = max(16, shape.block_t * gpad)
    num_reqs = meta.q_len.shape[0]
    out = torch.empty(T, H, D, device=q.device, dtype=q.dtype)
    if shape.splits > 1:
        part_o = torch.empty(shape.splits, T, H, D, device=q.device, dtype=torch.float32)
        part_lse = torch.empty(shape.splits, T, H, device=q.device, dtype=torch.float32)
    else:
        part_o = part_lse = out
    qc = q  # rows may be strided (a view of the fused qkv output)
    grid = (num_reqs * shape.chunks, KVH, shape.splits)
    _attn_kernel[grid](qc, k_cache, v_cache, out, part_o, part_lse,
                       meta.rows, meta.q_start, meta.q_len, meta.kv_len, meta.page_table,
                       qc.stride(0), qc.stride(1), k_cache.stride(0), k_cache.stride(1),
                       meta.page_table.stride(0), T, H, 1.0 / math.sqrt(D), shape.chunks,
                       GROUP=group, GPAD=gpad, D=D, PAGE=meta.page_size, BLOCK_T=shape.block_t,
                       BLOCK_M=block_m, BLOCK_N=64, SPLITS=shape.splits,
                       CAUSAL=shape.causal, num_warps=4, num_stages=2)
    if shape.splits > 1:
        _combine_kernel[(T, H)](out, part_o, part_lse, T, H, D=D, SPLITS=shape.splits)
    return out


def attention_ref(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta,
                  causal: bool = True) -> torch.Tensor:
    """Torch reference of :func:`attention`: every request padded to the longest, fp32."""
    out = torch.zeros_like(q)
    q_len, kv_len = meta.q_len.long(), meta.kv_len.long()
    live = q_len > 0
    if not bool(live.any()):
        return out
    q_len, kv_len = q_len[live], kv_len[live]
    q_start, rows = meta.q_start.long()[live], meta.rows.long()[live]
    H, KVH, D = q.shape[1], k_cache.shape[1], q.shape[2]
    P, L, Q = meta.page_size, int(kv_len.max()), int(q_len.max())
    pos = torch.arange(L, device=q.device)
    slots = meta.page_table[rows][:, pos // P].long() * P + pos % P  # [R, L]
    k = k_cache[slots].float().repeat_interleave(H // KVH, dim=2)  # [R, L, H, D]
    v = v_cache[slots].float().repeat_interleave(H // KVH, dim=2)
    i = torch.arange(Q, device=q.device)
    tok = (q_start[:, None] + i[None, :]).clamp(max=q.shape[0] - 1)  # [R, Q]
    qq = q[tok].float()  # [R, Q, H, D]
    s = torch.einsum("rqhd,rkhd->rhqk", qq, k) / math.sqrt(D)
    keep = pos[None, None, :] < kv_len[:, None, None]  # [R, 1, L]
    if causal:
        qpos = kv_len[:, None] - q_len[:, None] + i[None, :]  # [R, Q]
        keep = keep & (pos[None, None, :] <= qpos[:, :, None])
    o = torch.einsum("rhqk,rkhd->rqhd", s.masked_fill(~keep[:, None], float("-inf")).softmax(-1), v)
    valid = i[None, :] < q_len[:, None]
    out[tok[valid]] = o[valid].to(q.dtype)
    return out
