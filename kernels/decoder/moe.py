"""Fused mixture-of-experts: routing, token alignment by expert, and a grouped GEMM.

As serving engines run MoE layers (the approach of vLLM's and SGLang's
``fused_moe``; this code is our own):

1. the router gives each token ``k`` experts and weights (:func:`route_softmax`,
   :func:`route_sqrtsoftplus`);
2. :func:`align` sorts the ``T x k`` (token, expert) pairs by expert and pads
   each expert's run to a multiple of ``BLOCK_M``, so every block of rows belongs
   to one expert (``sorted_ids`` [P], ``block_expert`` [P / BLOCK_M], the used
   length ``num_padded`` [1]); all on the device with fixed shapes (P =
   ``T k + E (BLOCK_M - 1)``), so a step sits in a CUDA graph;
3. :func:`grouped_gemm` multiplies each block of gathered rows by its expert's
   weights: gate and up for every pair, SiLU-and-multiply, then down, scaled by
   the routing weight; blocks past ``num_padded`` exit at once;
4. the ``k`` results of a token are summed.

Only experts some token picked are read: the step's weight bytes follow the
distinct experts its tokens touch, as the cost model's MoE term says.
"""
from __future__ import annotations

from functools import partial

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from dspark_sim.kernels.decoder.fused import silu_mul
from dspark_sim.kernels.decoder.moe_align import MAX_PAIRS, align_fused
from dspark_sim.kernels.decoder.moe_fp8 import grouped_gemm_fp8
from dspark_sim.kernels.decoder.moe_route import route_fused


def route_softmax(logits: torch.Tensor, k: int, impl: str = "torch"):
    """Qwen3-MoE routing: softmax over experts, top ``k``, weights renormalised.
    ``logits [T, E]`` -> ``(weights [T, k] fp32, ids [T, k] int64)``; ``impl="triton"``: one
    launch (:mod:`.moe_route`)."""
    if impl == "triton":
        return route_fused(logits, k)
    probs = logits.float().softmax(-1)
    weight, ids = probs.topk(k, dim=-1)
    return weight / weight.sum(-1, keepdim=True), ids


def route_sqrtsoftplus(logits: torch.Tensor, bias: torch.Tensor, k: int, scale: float, impl: str = "torch"):
    """DeepSeek-V4 routing: scores ``sqrt(softplus(logits))``, top ``k`` of score + bias,
    weights the chosen scores normalised and times ``scale`` (``routed_scaling_factor``);
    ``impl="triton"``: one launch (:mod:`.moe_route`)."""
    if impl == "triton":
        return route_fused(logits, k, bias, scale)
    scores = F.softplus(logits.float()).sqrt()
    ids = (scores + bias.float()).topk(k, dim=-1).indices
    weight = scores.gather(1, ids)
    return weight / (weight.sum(-1, keepdim=True) + 1e-20) * scale, ids


def block_m(tokens: int, k: int, experts: int) -> int:
    """Rows per block: the expected rows an expert gets, rounded to 16, 32 or 64."""
    rows = tokens * k / experts
    return 16 if rows <= 16 else 32 if rows <= 32 else 64


def align(ids: torch.Tensor, experts: int, bm: int, impl: str = "torch"):
    """``(sorted_ids [P] int32, block_expert [P / bm] int32, num_padded [1] int32)``.

    ``ids [T, k]``: each pair ``p = t k + j`` lands in its expert's run, runs padded
    to ``bm`` rows with the sentinel ``T k``; ``num_padded`` rows are in use. ``impl="triton"``
    and at most ``MAX_PAIRS`` pairs: one launch (:mod:`.moe_align`), the same tensors."""
    if impl == "triton" and ids.numel() <= MAX_PAIRS:
        return align_fused(ids, experts, bm)
    flat = ids.reshape(-1)
    n = flat.numel()
    total = n + experts * (bm - 1)
    total = -(-total // bm) * bm
    counts = torch.zeros(experts, dtype=torch.int64, device=ids.device)
    counts.scatter_add_(0, flat, torch.ones_like(flat))
    padded = (counts + bm - 1) // bm * bm
    ends = torch.cumsum(padded, 0)
    order = torch.argsort(flat, stable=True)
    expert_of = flat[order]
    first = torch.cumsum(counts, 0) - counts  # rank of a pair within its expert's run
    dest = (ends - padded)[expert_of] + torch.arange(n, device=ids.device) - first[expert_of]
    sorted_ids = torch.full((total,), n, dtype=torch.int32, device=ids.device)
    sorted_ids.scatter_(0, dest, order.to(torch.int32))
    starts = torch.arange(0, total, bm, device=ids.device)
    block_expert = torch.searchsorted(ends, starts, right=True).clamp_(max=experts - 1).to(torch.int32)
    return sorted_ids, block_expert, ends[-1:].to(torch.int32)


@triton.jit(do_not_specialize=["num_pairs"])
def _grouped_gemm_kernel(a, w, out, sorted_ids, block_expert, num_padded, weights, num_pairs, num_experts,
                         N, K, stride_am, stride_we, stride_wn, stride_om,
                         TOP_K: tl.constexpr, ROWS_ARE_PAIRS: tl.constexpr, SCALE: tl.constexpr,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    if pid_m * BLOCK_M >= tl.load(num_padded):
        return
    e = tl.load(block_expert + pid_m).to(tl.int64)
    if e >= num_experts:  # pairs routed to another rank's experts: nothing to do here
        return
    pairs = tl.load(sorted_ids + pid_m * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    live = pairs < num_pairs
    rows = pairs if ROWS_ARE_PAIRS else pairs // TOP_K
    n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    kk = tl.arange(0, BLOCK_K)
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for k0 in range(0, K, BLOCK_K):
        x = tl.load(a + rows[:, None] * stride_am + (k0 + kk)[None, :],
                    mask=live[:, None] & ((k0 + kk)[None, :] < K), other=0.0)
        b = tl.load(w + e * stride_we + n[None, :] * stride_wn + (k0 + kk)[:, None],
                    mask=(n[None, :] < N) & ((k0 + kk)[:, None] < K), other=0.0)
        acc += tl.dot(x, b)
    if SCALE:
        acc *= tl.load(weights + pairs, mask=live, other=0.0)[:, None]
    tl.store(out + pairs[:, None] * stride_om + n[None, :], acc.to(out.dtype.element_ty),
             mask=live[:, None] & (n[None, :] < N))


def grouped_gemm(a, w, sorted_ids, block_expert, num_padded, pairs: int, top_k: int, bm: int,
                 weights=None, rows_are_pairs: bool = False) -> torch.Tensor:
    """``out [pairs, N]``: row ``p`` of ``a`` (``a [T, K]`` gathered by token ``p // k``, or
    ``a [pairs, K]`` when ``rows_are_pairs``) times expert ``w [E, N, K]``'s block,
    times ``weights [pairs]`` (fp32) when given. Blocks of expert ``E`` (the drop bucket of
    :func:`local_ids`) are skipped and their rows left unwritten."""
    N, K = w.shape[1], w.shape[2]
    assert a.stride(1) == 1 and w.stride(2) == 1
    out = torch.empty(pairs, N, dtype=a.dtype, device=a.device)
    bn = min(64, max(16, triton.next_power_of_2(N)))
    bk = min(64, max(16, triton.next_power_of_2(K)))
    grid = (sorted_ids.numel() // bm, triton.cdiv(N, bn))
    _grouped_gemm_kernel[grid](a, w, out, sorted_ids, block_expert, num_padded,
                               weights if weights is not None else out, pairs, w.shape[0], N, K,
                               a.stride(0), w.stride(0), w.stride(1), out.stride(0),
                               TOP_K=top_k, ROWS_ARE_PAIRS=rows_are_pairs, SCALE=weights is not None,
                               BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, num_warps=4, num_stages=3)
    return out


def local_ids(ids: torch.Tensor, first: int, count: int):
    """``(ids [T, k] in 0..count, local [T, k] bool)``: expert ids of this rank's experts
    ``first .. first + count - 1`` renumbered from 0; pairs routed elsewhere go to the drop
    bucket ``count`` (expert parallelism)."""
    local = (ids >= first) & (ids < first + count)
    return torch.where(local, ids - first, count), local


def fused_moe(x: torch.Tensor, gate_up: torch.Tensor, down: torch.Tensor, weights: torch.Tensor,
              ids: torch.Tensor, impl: str = "triton", first_expert: int | None = None) -> torch.Tensor:
    """Routed experts' output ``[T, H]`` in ``x.dtype``.

    x ``[T, H]``; gate_up ``[E, 2I, H]``; down ``[E, H, I]`` (tensors, or both
    :class:`.moe_fp8.BlockFp8`: the block-scaled FP8 path); weights ``[T, k]`` fp32 and
    ids ``[T, k]`` int64 from a router. ``first_expert``: the tensors hold experts
    ``first_expert .. first_expert + E - 1`` of a larger set (expert parallel); pairs routed to
    other experts contribute nothing. ``impl="torch"``: the per-expert loop reference."""
    E = gate_up.shape[0]
    local = None
    if first_expert is not None:
        ids, local = local_ids(ids, first_expert, E)
    fp8 = not isinstance(gate_up, torch.Tensor)  # experts in FP8 blocks (.moe_fp8.quantize_moe_)
    if impl == "torch":
        return moe_ref(x, *((gate_up.dequant(), down.dequant()) if fp8 else (gate_up, down)), weights, ids)
    T, k = ids.shape
    bm = block_m(T, k, E)
    sorted_ids, block_expert, num_padded = align(ids, E + (local is not None), bm, impl)
    gemm = partial(grouped_gemm_fp8, out_dtype=x.dtype) if fp8 else grouped_gemm
    h = gemm(x, gate_up, sorted_ids, block_expert, num_padded, T * k, k, bm)
    h = silu_mul(h, impl)
    y = gemm(h, down, sorted_ids, block_expert, num_padded, T * k, k, bm,
             weights=weights.reshape(-1).float().contiguous(), rows_are_pairs=True)
    y = y.view(T, k, -1)
    if local is not None:  # rows of dropped pairs were never written
        y = torch.where(local[:, :, None], y, 0)
    return y.sum(1, dtype=torch.float32).to(x.dtype)


def moe_ref(x, gate_up, down, weights, ids) -> torch.Tensor:
    """Torch reference of :func:`fused_moe`: each expert's tokens through it, one at a time
    (eager only: the split has data-dependent shapes). Ids ``E`` (the drop bucket) are skipped."""
    out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    flat = ids.flatten()
    order = flat.argsort()
    counts = torch.bincount(flat, minlength=gate_up.shape[0]).tolist()
    tokens = order // ids.shape[1]
    start = 0
    for e, n in enumerate(counts):
        if n and e < gate_up.shape[0]:
            idx = tokens[start:start + n]
            gate, up = F.linear(x[idx], gate_up[e].to(x.dtype)).chunk(2, dim=-1)
            y = F.linear(F.silu(gate) * up, down[e].to(x.dtype))
            w = weights.flatten()[order[start:start + n]]
            out.index_add_(0, idx, y.float() * w[:, None])
        start += n
    return out.to(x.dtype)


__all__ = ["route_softmax", "route_sqrtsoftplus", "align", "grouped_gemm", "fused_moe", "moe_ref", "block_m", "local_ids"]
