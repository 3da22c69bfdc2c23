"""Expert-parallel MoE by dispatch and combine (all-to-all), over the fused MoE.

Under TP attention every rank holds every token after the attention's all-reduce. Rank
``r`` takes its share of them (``ceil(T / N)`` rows, the last rank padded), routes them,
and *dispatches* each (token, expert) pair to the rank owning that expert; each rank runs
the fused MoE over the pairs it received (its own experts only), *combines* the results
back to the tokens' ranks, which sum a token's ``k`` pairs and all-gather the tokens.

Shapes are fixed so a step can sit in a CUDA graph: a rank sends every pair of its share to
every rank (a pair another rank does not own carries the drop id and is skipped by the
grouped GEMM), i.e. ``N`` times the bytes of a count-exchanging dispatch such as DeepEP's.
The kernels' work is the real one (only owned pairs are multiplied); the link carries the
padded bytes. A count-exchanging, capacity-bounded dispatch is not written.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F

from dspark_sim.kernels.decoder.moe import fused_moe, route_softmax


def all_to_all(x: torch.Tensor, group=None) -> torch.Tensor:
    """``out[s]`` = what rank ``s`` sent this rank: ``x [N, ...]`` split along the first axis."""
    out = torch.empty_like(x)
    dist.all_to_all_single(out, x.contiguous(), group=group)
    return out


def moe_all_to_all(moe, x: torch.Tensor, impl: str) -> torch.Tensor:
    """The MoE block's output ``[T, H]`` for every token (same on every rank) from ``moe``'s
    experts on each rank, tokens dispatched and combined by all-to-all."""
    shard, n = moe.shard, moe.shard.world
    T, H = x.shape
    rows = -(-T // n)
    mine = F.pad(x, (0, 0, 0, rows * n - T))[shard.rank * rows:(shard.rank + 1) * rows]
    weight, ids = route_softmax(F.linear(mine, moe.router), moe.top_k, impl)
    k, e_loc = ids.shape[1], moe.gate_up.shape[0]
    dest = torch.arange(n, device=x.device)[:, None, None]
    owned = ids[None] // e_loc == dest  # [N, rows, k]: pair goes to rank d
    send_ids = torch.where(owned, ids[None] % e_loc, -1).reshape(n, rows * k)
    send_w = torch.where(owned, weight[None], 0.0).reshape(n, rows * k)
    send_x = mine.repeat_interleave(k, dim=0)[None].expand(n, rows * k, H)
    recv_x = all_to_all(send_x, shard.group).reshape(-1, H)
    recv_ids = all_to_all(send_ids, shard.group).reshape(-1, 1)
    recv_w = all_to_all(send_w, shard.group).reshape(-1, 1)
    y = fused_moe(recv_x, moe.gate_up, moe.down, recv_w, recv_ids, impl, first_expert=0)
    back = all_to_all(y.view(n, rows * k, H), shard.group)  # [N, rows * k, H]: rank d's results
    mine_out = back.view(n, rows, k, H).sum((0, 2), dtype=torch.float32).to(x.dtype)
    return shard.all_gather_rows(mine_out).reshape(-1, H)[:T]


__all__ = ["all_to_all", "moe_all_to_all"]
