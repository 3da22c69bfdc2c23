"""DeepSeek-V4 attention kernels: window compression, indexer scores, sparse attention.

Token ``t`` of a step sits at ``positions[t]`` of the request whose page-table row
is ``token_rows[t]``; a request's tokens are contiguous in the step. Per layer:

* :func:`compress`: a token that completes a window of ``ratio`` positions pools
  the window (and, for the overlapping CSA series, the window before) into one
  compressed entry: a softmax over slots of gate + position bias, per feature,
  weighting the projected values. Slots come from this step's projections when
  the position is in the step, else from the request's ring of recent projections.
* :func:`index_scores`: the lightning indexer's score of every compressed entry a
  query may see, ``sum_h w_h relu(q_h . k)`` (``-inf`` past the query's entries).
* :func:`sparse_attention`: shared-KV multi-query attention of each token over its
  sliding window (paged cache), its chosen compressed entries (a top-k list) or
  all of them, and a per-head sink logit.

Every launch has fixed shapes (CUDA-graph safe). The torch references below each
kernel take the same arguments.
"""
from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

LOG2E = 1.4426950408889634


# -- compression ---------------------------------------------------------------------------
@triton.jit
def _compress_kernel(buf, ring, bias, out, positions, token_rows, num_tokens,
                     stride_b, stride_r, RATIO: tl.constexpr, SERIES: tl.constexpr, D: tl.constexpr,
                     RING: tl.constexpr, BLOCK_D: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    pos = tl.load(positions + t).to(tl.int64)
    if (pos + 1) % RATIO != 0:
        return
    row = tl.load(token_rows + t).to(tl.int64)
    dd = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    m = tl.full([BLOCK_D], -1.0e30, tl.float32)
    den = tl.zeros([BLOCK_D], tl.float32)
    acc = tl.zeros([BLOCK_D], tl.float32)
    zero = dd * 0  # scalars below become vectors of the block: masks stay vectors
    for j in range(SERIES * RATIO):
        half = j // RATIO + (2 - SERIES)  # 0: the window before (CSA's first series), 1: this one
        p = pos - (2 - half) * RATIO + 1 + j % RATIO + zero
        col = (half - (2 - SERIES)) * D + dd
        src = t - (pos - p)
        inside = (src >= 0) & (src < num_tokens)
        same = inside & (tl.load(token_rows + src, mask=inside, other=-1).to(tl.int64) == row) \
            & (tl.load(positions + src, mask=inside, other=-1).to(tl.int64) == p)
        slot = row * RING + p % RING
        here = (p >= 0) & same
        there = (p >= 0) & (same == 0)
        kv = tl.load(buf + src * stride_b + col, mask=here, other=0.0).to(tl.float32) \
            + tl.load(ring + slot * stride_r + col, mask=there, other=0.0).to(tl.float32)
        g = tl.load(buf + src * stride_b + SERIES * D + col, mask=here, other=0.0).to(tl.float32) \
            + tl.load(ring + slot * stride_r + SERIES * D + col, mask=there, other=0.0).to(tl.float32)
        g += tl.load(bias + (j % RATIO) * SERIES * D + col).to(tl.float32)
        g = tl.where(p >= 0, g, -1.0e30)
        m_new = tl.maximum(m, g)
        scale = tl.exp(m - m_new)
        w = tl.exp(g - m_new)
        den = den * scale + w
        acc = acc * scale + w * kv
        m = m_new
    tl.store(out + t * D + dd, acc / den)


def compress(buf, ring, bias, positions, token_rows, ratio: int, series: int, dim: int,
             ring_size: int, impl: str = "triton") -> torch.Tensor:
    """Pooled entries ``[T, dim]`` fp32 (rows of tokens that complete no window: zeros).

    buf ``[T, 2 * series * dim]``: this step's projections, values then gates (``series``
    2: the previous-window series first); ring ``[(rows + 1) * ring_size, same]``: earlier
    positions at ``row * ring_size + position % ring_size``; bias ``[ratio, series * dim]``."""
    if impl == "torch":
        return compress_ref(buf, ring, bias, positions, token_rows, ratio, series, dim, ring_size)
    T = buf.shape[0]
    out = torch.zeros(T, dim, dtype=torch.float32, device=buf.device)  # rows that complete nothing: 0
    block = min(dim, 128)
    if T:
        _compress_kernel[(T, dim // block)](buf, ring, bias, out, positions, token_rows, T,
                                            buf.stride(0), ring.stride(0), RATIO=ratio, SERIES=series,
                                            D=dim, RING=ring_size, BLOCK_D=block, num_warps=2)
    return out


def compress_ref(buf, ring, bias, positions, token_rows, ratio, series, dim, ring_size) -> torch.Tensor:
    """Torch reference of :func:`compress` (zeros on rows that complete no window)."""
    T = buf.shape[0]
    out = torch.zeros(T, dim, dtype=torch.float32, device=buf.device)
    pos, rows = positions.long(), token_rows.long()
    where = {(int(r), int(p)): t for t, (r, p) in enumerate(zip(rows.tolist(), pos.tolist()))}
    for t in range(T):
        p0, r = int(pos[t]), int(rows[t])
        if (p0 + 1) % ratio:
            continue
        vals, gates = [], []
        for j in range(series * ratio):
            half = j // ratio if series == 2 else 1
            p = p0 - (2 - half) * ratio + 1 + j % ratio
            col = (half - (2 - series)) * dim
            if p < 0:
                continue
            src = buf[where[(r, p)]] if (r, p) in where else ring[r * ring_size + p % ring_size]
            vals.append(src[col:col + dim].float())
            gates.append(src[series * dim + col:series * dim + col + dim].float()
                         + bias[j % ratio, col:col + dim].float())
        w = torch.stack(gates).softmax(0)
        out[t] = (w * torch.stack(vals)).sum(0)
    return out


# -- the lightning indexer ------------------------------------------------------------------
@triton.jit
def _index_kernel(q, w, keys, out, positions, token_rows, stride_qt, stride_qh, max_entries,
                  RATIO: tl.constexpr, HEADS: tl.constexpr, D: tl.constexpr, BLOCK_S: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    s = tl.program_id(1) * BLOCK_S + tl.arange(0, BLOCK_S)
    valid = (tl.load(positions + t).to(tl.int64) + 1) // RATIO
    live = s < valid
    if tl.program_id(1) * BLOCK_S >= valid:
        tl.store(out + t * max_entries + s, tl.full([BLOCK_S], float("-inf"), tl.float32),
                 mask=s < max_entries)
        return
    row = tl.load(token_rows + t).to(tl.int64)
    h = tl.arange(0, HEADS)
    d = tl.arange(0, D)
    qv = tl.load(q + t * stride_qt + h[:, None] * stride_qh + d[None, :])
    k = tl.load(keys + (row * max_entries + s)[:, None] * D + d[None, :], mask=live[:, None], other=0.0)
    sc = tl.maximum(tl.dot(qv, tl.trans(k)), 0.0)  # [HEADS, BLOCK_S]
    wt = tl.load(w + t * HEADS + h)
    total = tl.sum(sc * wt[:, None], 0)
    tl.store(out + t * max_entries + s, tl.where(live, total, float("-inf")), mask=s < max_entries)


def index_scores(q, w, keys, positions, token_rows, ratio: int, max_entries: int,
                 impl: str = "triton") -> torch.Tensor:
    """Scores ``[T, max_entries]`` fp32 of each compressed entry for each query token.

    q ``[T, heads, dim]``; w ``[T, heads]`` fp32 (head weights, scales folded in);
    keys ``[rows * max_entries + 1, dim]``: entry ``e`` of row ``r`` at ``r * max_entries + e``."""
    if impl == "torch":
        return index_scores_ref(q, w, keys, positions, token_rows, ratio, max_entries)
    T, heads, dim = q.shape
    out = torch.empty(T, max_entries, dtype=torch.float32, device=q.device)
    block = 64
    if T:
        _index_kernel[(T, triton.cdiv(max_entries, block))](
            q, w, keys, out, positions, token_rows, q.stride(0), q.stride(1), max_entries,
            RATIO=ratio, HEADS=heads, D=dim, BLOCK_S=block, num_warps=4)
    return out


def index_scores_ref(q, w, keys, positions, token_rows, ratio, max_entries) -> torch.Tensor:
    """Torch reference of :func:`index_scores`."""
    T = q.shape[0]
    out = torch.full((T, max_entries), float("-inf"), dtype=torch.float32, device=q.device)
    for t in range(T):
        n = (int(positions[t]) + 1) // ratio
        if n:
            r = int(token_rows[t])
            k = keys[r * max_entries: r * max_entries + n].float()
            out[t, :n] = ((q[t].float() @ k.T).clamp(min=0) * w[t, :, None]).sum(0)
    return out


# -- sparse attention ----------------------------------------------------------------------
@triton.jit
def _online(qv, k, m_i, l_i, acc, keep, scale):
    s = tl.dot(qv, tl.trans(k)) * scale
    s = tl.where(keep[None, :], s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))
    p = tl.exp2(s - m_new[:, None])
    alpha = tl.exp2(m_i - m_new)
    return m_new, l_i * alpha + tl.sum(p, 1), acc * alpha[:, None] + tl.dot(p.to(k.dtype), k)


@triton.jit
def _sparse_attn_kernel(q, k_cache, comp, topk, sinks, out, positions, token_rows, page_table,
                        stride_qt, stride_qh, stride_pt, stride_k, max_entries, heads, sm_scale,
                        WINDOW: tl.constexpr, RATIO: tl.constexpr, MODE: tl.constexpr, TOPK: tl.constexpr,
                        D: tl.constexpr, PAGE: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    hm = h < heads
    pos = tl.load(positions + t).to(tl.int64)
    row = tl.load(token_rows + t).to(tl.int64)
    d = tl.arange(0, D)
    qv = tl.load(q + t * stride_qt + h[:, None] * stride_qh + d[None, :], mask=hm[:, None], other=0.0)
    scale = sm_scale * 1.4426950408889634
    m_i = tl.full([BLOCK_H], -1.0e30, tl.float32)
    l_i = tl.zeros([BLOCK_H], tl.float32)
    acc = tl.zeros([BLOCK_H, D], tl.float32)
    lo = tl.maximum(pos - WINDOW + 1, 0)
    for n in range(lo, pos + 1, BLOCK_N):  # the sliding window, from the paged cache
        offs = n + tl.arange(0, BLOCK_N)
        keep = offs <= pos
        page = tl.load(page_table + row * stride_pt + offs // PAGE, mask=keep, other=0).to(tl.int64)
        k = tl.load(k_cache + (page * PAGE + offs % PAGE)[:, None] * stride_k + d[None, :],
                    mask=keep[:, None], other=0.0)
        m_i, l_i, acc = _online(qv, k, m_i, l_i, acc, keep, scale)
    valid = (pos + 1) // RATIO
    if MODE == 1:  # the indexer's top-k entries
        for j in range(0, TOPK, BLOCK_N):
            jj = j + tl.arange(0, BLOCK_N)
            idx = tl.load(topk + t * TOPK + jj, mask=jj < TOPK, other=-1).to(tl.int64)
            keep = (idx >= 0) & (idx < valid)
            k = tl.load(comp + (row * max_entries + idx)[:, None] * D + d[None, :], mask=keep[:, None],
                        other=0.0)
            m_i, l_i, acc = _online(qv, k, m_i, l_i, acc, keep, scale)
    if MODE == 2:  # every entry
        for s0 in range(0, valid, BLOCK_N):
            e = s0 + tl.arange(0, BLOCK_N)
            keep = e < valid
            k = tl.load(comp + (row * max_entries + e)[:, None] * D + d[None, :], mask=keep[:, None],
                        other=0.0)
            m_i, l_i, acc = _online(qv, k, m_i, l_i, acc, keep, scale)
    sink = tl.load(sinks + h, mask=hm, other=0.0).to(tl.float32) * 1.4426950408889634
    m_new = tl.maximum(m_i, sink)
    alpha = tl.exp2(m_i - m_new)
    l_i = l_i * alpha + tl.exp2(sink - m_new)
    o = acc * alpha[:, None] / l_i[:, None]
    tl.store(out + (t * heads + h)[:, None] * D + d[None, :], o.to(out.dtype.element_ty), mask=hm[:, None])


def sparse_attention(q, k_cache, comp, topk, sinks, batch, window: int, ratio: int, max_entries: int,
                     impl: str = "triton") -> torch.Tensor:
    """Attention output ``[T, H, D]`` for queries ``q [T, H, D]``.

    k_cache ``[slots, 1, D]`` (K = V, the window's keys); comp ``[rows * max_entries + 1, D]``
    compressed entries (None for a window-only layer); topk ``[T, K]`` int64 entry indices
    (-1: none) or None to attend every entry; sinks ``[H]`` fp32 sink logits; batch: the
    step's :class:`~.batch.Batch` (positions, token_rows, page_table, page_size)."""
    if impl == "torch":
        return sparse_attention_ref(q, k_cache, comp, topk, sinks, batch, window, ratio, max_entries)
    T, H, D = q.shape
    out = torch.empty(T, H, D, dtype=q.dtype, device=q.device)
    mode = 0 if comp is None else (1 if topk is not None else 2)
    block_h = 16
    if T:
        _sparse_attn_kernel[(T, triton.cdiv(H, block_h))](
            q, k_cache, comp if comp is not None else q, topk if topk is not None else batch.positions,
            sinks, out, batch.positions, batch.token_rows, batch.page_table, q.stride(0), q.stride(1),
            batch.page_table.stride(0), k_cache.stride(0), max_entries, H, 1.0 / math.sqrt(D),
            WINDOW=window, RATIO=max(ratio, 1), MODE=mode, TOPK=topk.shape[1] if topk is not None else 1,
            D=D, PAGE=batch.page_size, BLOCK_H=block_h, BLOCK_N=16, num_warps=4, num_stages=1)
    return out


def sparse_attention_ref(q, k_cache, comp, topk, sinks, batch, window, ratio, max_entries) -> torch.Tensor:
    """Torch reference of :func:`sparse_attention`, one token at a time, fp32."""
    T, H, D = q.shape
    out = torch.zeros_like(q)
    P = batch.page_size
    for t in range(T):
        pos, row = int(batch.positions[t]), int(batch.token_rows[t])
        span = torch.arange(max(0, pos - window + 1), pos + 1, device=q.device)
        slots = batch.page_table[row, span // P].long() * P + span % P
        keys = [k_cache[slots, 0].float()]
        if comp is not None:
            valid = (pos + 1) // ratio
            idx = torch.arange(valid, device=q.device) if topk is None else topk[t][(topk[t] >= 0)
                                                                                    & (topk[t] < valid)]
            keys.append(comp[row * max_entries + idx.long()].float())
        k = torch.cat(keys)
        s = q[t].float() @ k.T / math.sqrt(D)  # [H, keys]
        s = torch.cat([s, sinks.float()[:, None]], 1).softmax(-1)[:, :-1]
        out[t] = (s @ k).to(q.dtype)
    return out


__all__ = ["compress", "compress_ref", "index_scores", "index_scores_ref", "sparse_attention",
           "sparse_attention_ref"]
