"""The MoE alignment by expert in one launch, for the few pairs of a decode or verify step.

:func:`.moe.align` in torch ops is some twenty-five kernels (counts, padding, a stable sort,
scatters, a search), each a launch gap inside the step's CUDA graph, for a step whose pairs
are a handful. Here one program does it all (counts by one-hot sums, padded runs by a
cumulative sum, each pair's rank among its expert's earlier pairs, the blocks' experts), in
the same layout and order as the torch version (stable: pairs of an expert by index), so
the two are interchangeable. Above ``MAX_PAIRS`` pairs (long prefill chunks) the torch ops
are faster than one program and :func:`.moe.align` keeps them.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

MAX_PAIRS = 4096  # the one-program kernel's limit (verify steps of up to 512 tokens at top-8)


@triton.jit
def _align_kernel(ids, sorted_ids, block_expert, num_padded, n, experts, total,
                  EP: tl.constexpr, BM: tl.constexpr, BLOCK: tl.constexpr):
    e = tl.arange(0, EP)
    counts = tl.zeros([EP], tl.int32)
    for p0 in range(0, n, BLOCK):
        p = p0 + tl.arange(0, BLOCK)
        x = tl.load(ids + p, mask=p < n, other=EP).to(tl.int32)
        counts += tl.sum((x[:, None] == e[None, :]).to(tl.int32), 0)
    padded = (counts + BM - 1) // BM * BM
    ends = tl.cumsum(padded, 0)
    run = ends - padded  # where each expert's next pair goes
    for q0 in range(0, total, BLOCK):  # the sentinel everywhere first
        q = q0 + tl.arange(0, BLOCK)
        tl.store(sorted_ids + q, tl.full([BLOCK], 0, tl.int32) + n, mask=q < total)
    tl.debug_barrier()
    for p0 in range(0, n, BLOCK):
        p = p0 + tl.arange(0, BLOCK)
        x = tl.load(ids + p, mask=p < n, other=EP).to(tl.int32)
        hot = (x[:, None] == e[None, :]).to(tl.int32)
        before = tl.cumsum(hot, 0) - hot  # earlier pairs of the same expert in this block
        dest = tl.sum(hot * (before + run[None, :]), 1)
        tl.store(sorted_ids + dest, p.to(tl.int32), mask=p < n)
        run += tl.sum(hot, 0)
    for b0 in range(0, total // BM, BLOCK):
        b = b0 + tl.arange(0, BLOCK)
        owner = tl.sum((ends[None, :] <= (b * BM)[:, None]).to(tl.int32), 1)
        tl.store(block_expert + b, tl.minimum(owner, experts - 1), mask=b < total // BM)
    tl.store(num_padded + tl.arange(0, 1), tl.sum(padded, 0) + tl.zeros([1], tl.int32))


def align_fused(ids: torch.Tensor, experts: int, bm: int):
    """:func:`.moe.align` in one launch (``ids.numel() <= MAX_PAIRS``): the same three tensors."""
    flat = ids.reshape(-1)
    n = flat.numel()
    total = -(-(n + experts * (bm - 1)) // bm) * bm
    sorted_ids = torch.empty(total, dtype=torch.int32, device=ids.device)
    block_expert = torch.empty(total // bm, dtype=torch.int32, device=ids.device)
    num_padded = torch.empty(1, dtype=torch.int32, device=ids.device)
    _align_kernel[(1,)](flat, sorted_ids, block_expert, num_padded, n, experts, total,
                        EP=triton.next_power_of_2(experts), BM=bm, BLOCK=64 if experts > 128 else 128,
                        num_warps=8)
    return sorted_ids, block_expert, num_padded


__all__ = ["MAX_PAIRS", "align_fused"]
