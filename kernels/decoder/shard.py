"""Tensor and expert parallelism inside one model: which slice of each weight a rank keeps.

One process per GPU, as serving engines run (SGLang ``--tp N``, vLLM
``tensor_parallel_size``). Each rank builds the whole model (random weights drawn as on
one GPU, or a checkpoint), then keeps its slice, so TP N computes what TP 1 computes:

* attention: column-parallel ``qkv`` (rank ``r`` keeps query heads ``r h/N .. (r+1) h/N``
  and the KV heads they read: its ``kv/N`` heads, or a copy of one when ``N > kv``),
  row-parallel ``o`` (the matching input columns), then one all-reduce;
* dense MLP: column-parallel ``gate_up`` (the gate rows and the up rows of the slice),
  row-parallel ``down``, one all-reduce;
* MoE (expert parallel over the same ranks, SGLang ``--ep N`` with TP attention): every
  rank routes every token with the whole router, runs the fused MoE over its own
  ``E/N`` experts only (pairs routed elsewhere contribute nothing), and the all-reduce
  sums the experts' outputs; ``moe_comm="a2a"`` instead dispatches each rank's share of the
  tokens to the experts' owners and combines them back (all-to-all, :mod:`.ep`);
* LM head: vocabulary-parallel (each rank ``V/N`` rows of the head, logits all-gathered);
  the embedding is replicated (a lookup reads only the rows it uses).

The DSpark drafter's layers are split the same way over the same ranks, and its Markov and
confidence heads are replicated: SGLang 0.5.23 lays a dense DSpark drafter out like the
target (``DraftTPExecution.TARGET_LAYOUT``) unless DP attention runs it per attention group
(``srt/speculative/draft_parallel.py``). DeepSeek-V4 targets are not split here.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.distributed as dist

from dspark_sim.errors import InputError

MOE_COMM = ("allreduce", "a2a")
# torch 2.13 renames all_gather_into_tensor (gloo takes only the concatenated output form)
_ALL_GATHER = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


@dataclass(frozen=True, slots=True)
class Shard:
    """This process's place: ``rank`` of ``world`` ranks, the process group of the
    collectives (None: the default group), and how MoE layers communicate."""

    rank: int
    world: int
    group: object = None
    moe_comm: str = "allreduce"

    def __post_init__(self) -> None:
        if not 0 <= self.rank < self.world:
            raise ValueError(f"Shard: rank {self.rank} outside 0..{self.world - 1}")
        if self.moe_comm not in MOE_COMM:
            raise ValueError(f"Shard: moe_comm must be one of {MOE_COMM}, got {self.moe_comm!r}")

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        """Sum ``x`` over the ranks, in place (graph-capturable under NCCL)."""
        dist.all_reduce(x, group=self.group)
        return x

    def all_gather_rows(self, x: torch.Tensor) -> torch.Tensor:
        """``[N, *x.shape]``: every rank's ``x`` in rank order."""
        out = torch.empty((self.world * x.shape[0],) + tuple(x.shape[1:]), dtype=x.dtype, device=x.device)
        _ALL_GATHER(out, x.contiguous(), group=self.group)  # concatenated along the first axis
        return out.view(self.world, *x.shape)

    def all_gather_last(self, x: torch.Tensor) -> torch.Tensor:
        """``[..., N * C]``: every rank's ``x [..., C]`` side by side in rank order."""
        out = self.all_gather_rows(x)
        return out.movedim(0, -2).reshape(*x.shape[:-1], self.world * x.shape[-1])

    def broadcast_(self, x: torch.Tensor) -> torch.Tensor:
        """Rank 0's ``x`` on every rank (in place): decisions drawn from a random stream."""
        dist.broadcast(x, src=dist.get_global_rank(self.group, 0) if self.group is not None else 0,
                       group=self.group)
        return x

    def smallest(self, n: int) -> int:
        """The smallest ``n`` any rank holds (sizes every rank must agree on)."""
        t = torch.tensor([n], dtype=torch.int64, device=_device_of(self.group))
        dist.all_reduce(t, op=dist.ReduceOp.MIN, group=self.group)
        return int(t)

    def span(self, n: int) -> slice:
        """This rank's share of ``n`` items (``n`` divisible by the world)."""
        k = n // self.world
        return slice(self.rank * k, (self.rank + 1) * k)


def _device_of(group) -> str:
    """Where tensors of ``group``'s collectives live: the GPU under NCCL, else the CPU."""
    return f"cuda:{torch.cuda.current_device()}" if dist.get_backend(group) == "nccl" else "cpu"


def check_split(spec, world: int, source=None) -> None:
    """Raise an InputError when ``spec`` does not split ``world`` ways."""
    def fail(key, value, why):
        raise InputError(source, key, value, f"{spec.name} at tp={world}: {why}")
    if spec.v4 is not None:
        fail("model", spec.name, "DeepSeek-V4 targets run on one GPU in this decoder")
    if spec.num_heads % world:
        fail("tp", world, f"{spec.num_heads} attention heads do not split {world} ways")
    kv = spec.num_kv_heads
    if kv % world and world % kv:
        fail("tp", world, f"neither divides nor is divided by the {kv} KV heads")
    if spec.vocab_size % world:
        fail("tp", world, f"the vocabulary ({spec.vocab_size}) does not split {world} ways")
    if spec.intermediate_size % world:
        fail("tp", world, f"the MLP width {spec.intermediate_size} does not split {world} ways")
    if spec.is_moe and spec.num_experts % world:
        fail("tp", world, f"{spec.num_experts} experts do not split {world} ways")


def local_spec(spec, world: int):
    """The model one rank holds: its attention heads and MLP width (experts: the router
    still sees all of them, the expert tensors hold this rank's)."""
    kv = max(1, spec.num_kv_heads // world)
    return replace(spec, num_heads=spec.num_heads // world, num_kv_heads=kv,
                   intermediate_size=spec.intermediate_size // world)


@torch.no_grad()
def shard_models(target, drafter, shard: Shard) -> None:
    """Cut ``target`` and ``drafter`` (whole models, same weights on every rank) to ``shard``'s
    slice, in place, and wire the collectives."""
    spec = target.spec
    check_split(spec, shard.world)
    for layer in list(target.layers) + (list(drafter.layers) if drafter is not None else []):
        _attention(layer.attn, spec, shard)
        if hasattr(layer.mlp, "router"):
            _moe(layer.mlp, shard)
        else:
            _mlp(layer.mlp, shard)
    _keep(target, "lm_head", target.lm_head[shard.span(spec.vocab_size)])
    target.shard = shard


def _keep(module, name: str, value: torch.Tensor) -> None:
    """Replace parameter ``name`` of ``module`` by ``value`` (a copy, so the whole tensor is freed)."""
    setattr(module, name, torch.nn.Parameter(value.contiguous().clone(), requires_grad=False))


def _attention(attn, spec, shard: Shard) -> None:
    h, kv, d, n = spec.num_heads, spec.num_kv_heads, spec.head_dim, shard.world
    h_loc = h // n
    kv_loc = max(1, kv // n)
    kv_first = shard.rank * kv // n  # the first KV head this rank's query heads read
    q = attn.qkv[:h * d].view(h, d, -1)[shard.rank * h_loc:(shard.rank + 1) * h_loc]
    k = attn.qkv[h * d:(h + kv) * d].view(kv, d, -1)[kv_first:kv_first + kv_loc]
    v = attn.qkv[(h + kv) * d:].view(kv, d, -1)[kv_first:kv_first + kv_loc]
    _keep(attn, "qkv", torch.cat([q, k, v]).reshape(-1, attn.qkv.shape[1]))
    _keep(attn, "o", attn.o[:, shard.rank * h_loc * d:(shard.rank + 1) * h_loc * d])
    attn.h, attn.kvh, attn.shard = h_loc, kv_loc, shard


def _mlp(mlp, shard: Shard) -> None:
    inter = mlp.down.shape[1]
    part = shard.span(inter)
    gate, up = mlp.gate_up[:inter], mlp.gate_up[inter:]
    _keep(mlp, "gate_up", torch.cat([gate[part], up[part]]))
    _keep(mlp, "down", mlp.down[:, part])
    mlp.shard = shard


def _moe(moe, shard: Shard) -> None:
    experts = moe.gate_up.shape[0]
    part = shard.span(experts)
    _keep(moe, "gate_up", moe.gate_up[part])
    _keep(moe, "down", moe.down[part])
    moe.first_expert, moe.shard = part.start, shard


__all__ = ["Shard", "MOE_COMM", "check_split", "local_spec", "shard_models"]
