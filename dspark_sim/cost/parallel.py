"""How one replica spreads a model over its GPUs: tensor, expert and data-parallel attention.

``tp`` GPUs serve one replica (SGLang ``--tp``). Attention runs tensor-parallel
(heads split over the GPUs) or, with ``dp_attention`` (SGLang
``--enable-dp-attention``, vLLM ``--data-parallel-size`` with expert parallelism),
data-parallel: every GPU holds the whole attention and its own share of the
requests and their KV cache. The MoE layers split their experts over ``ep`` GPUs
(expert parallel, ``--ep``) and each expert's width over ``tp / ep`` (MoE tensor
parallel). Weight and KV bytes per GPU follow:

* TP attention keeps ``max(1, tp / kv_heads)`` copies of each KV head (an MLA latent or
  DeepSeek-V4's single KV head: one copy per GPU); DP attention keeps one;
* TP attention splits the attention weights ``tp`` ways, DP attention copies them;
* experts, dense MLPs and the vocabulary-parallel LM head split ``tp`` ways either way.

Under DP attention each rank runs its own scheduler over the requests dealt to it (round
robin), its attention over its own batch, and the MoE layers over every rank's tokens; a step
waits for the busiest rank (:func:`rank_share`), and the host's work per request is the busiest
rank's (:func:`busiest_rank`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dspark_sim.catalog import FORMATS, GpuSpec, ModelSpec, WeightFormat
from dspark_sim.errors import InputError


@dataclass(frozen=True, slots=True)
class Parallel:
    """GPUs of one replica and how the model is split over them."""

    tp: int = 1
    ep: int = 1
    dp_attention: bool = False

    def __post_init__(self) -> None:
        for key in ("tp", "ep"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"Parallel.{key} must be an integer >= 1, got {value!r}")

    @property
    def attn_tp(self) -> int:
        """GPUs one request's attention is split over."""
        return 1 if self.dp_attention else self.tp

    @property
    def dp_ranks(self) -> int:
        """Attention data-parallel ranks: each runs its own scheduler over its own requests
        (``tp`` under DP attention, else 1)."""
        return self.tp if self.dp_attention else 1

    def kv_copies(self, model: ModelSpec) -> int:
        """GPUs holding a copy of each KV byte (1 under DP attention)."""
        heads = 1 if model.is_mla or model.v4 is not None else model.num_kv_heads
        return max(1, self.attn_tp // heads)

    def weight_bytes_per_gpu(self, model: ModelSpec, fmt: WeightFormat, experts: float | None = None) -> float:
        """Weight bytes one GPU holds (``experts`` None) or reads with ``experts`` routed
        experts a layer touched across the replica."""
        expert, linear, head, other = _parts(model, experts)
        attn = model.attn_matmul_params()
        embed = 0 if model.tie_embeddings else model.vocab_size * model.hidden_size  # vocabulary-parallel
        split = expert * fmt.expert_bytes + (linear - attn) * fmt.linear_bytes + (head + embed) * fmt.embed_bytes
        return split / self.tp + attn * fmt.linear_bytes / self.attn_tp + (other - embed) * fmt.other_bytes

    def check(self, model: ModelSpec, gpu: GpuSpec, *, file=None, key: str = "deployment") -> None:
        """Raise an InputError naming the key when ``model`` cannot be split this way on ``gpu``."""
        def fail(name: str, value, why: str):
            raise InputError(file, f"{key}.{name}", value, why)
        if self.tp > gpu.gpus_per_node:
            fail("tp", self.tp, f"spans more than one {gpu.name} node ({gpu.gpus_per_node} GPUs on NVLink): "
                 "the communication model covers one NVLink domain")
        if model.num_heads % self.attn_tp:
            fail("tp", self.tp, f"{model.name} has {model.num_heads} attention heads, not divisible by {self.tp}")
        heads = model.num_kv_heads
        if not (model.is_mla or model.v4 is not None) and self.attn_tp % heads and heads % self.attn_tp:
            fail("tp", self.tp, f"neither divides nor is divided by {model.name}'s {heads} KV heads")
        if self.dp_attention and self.tp == 1:
            fail("dp_attention", True, "needs tp > 1: it spreads requests over the replica's GPUs")
        if self.ep > 1 and not model.is_moe:
            fail("ep", self.ep, f"{model.name} has no experts to spread")
        if self.tp % self.ep:
            fail("ep", self.ep, f"must divide tp={self.tp} (the MoE layers' experts and widths share the GPUs)")
        if model.is_moe and model.num_experts % self.ep:
            fail("ep", self.ep, f"{model.name}'s {model.num_experts} experts do not split {self.ep} ways")
        if model.is_moe and model.moe_intermediate_size % (self.tp // self.ep):
            fail("tp", self.tp, f"{model.name}'s expert width {model.moe_intermediate_size} does not split "
                 f"{self.tp // self.ep} ways (tp / ep)")


def busiest_rank(reqs, ranks: int):
    """Requests on the busiest of ``ranks`` attention-DP ranks when ``reqs`` are dealt round robin
    (SGLang's DP controller, ``load_balance_method`` round_robin, and vLLM's DP load balancer
    spread requests evenly): ``ceil(reqs / ranks)``; a number or an array of them."""
    if ranks <= 1:
        return reqs
    if isinstance(reqs, np.ndarray):
        return -(-reqs // ranks)
    return -(-int(reqs) // ranks)


def rank_share(reqs, ranks: int):
    """The busiest rank's work over the replica's work spread evenly over its ranks: ``ceil(R /
    ranks) x ranks / R`` (1 for one rank or no request). A step waits for its busiest rank, so
    data-parallel attention priced at ``1 / ranks`` of the replica's is this much slower: ``ranks``
    for one request (one GPU does all its attention), near 1 for many."""
    if ranks <= 1:
        return 1.0
    if isinstance(reqs, np.ndarray):
        r = np.maximum(reqs, 1)
        return busiest_rank(r, ranks) * ranks / r
    return busiest_rank(reqs, ranks) * ranks / reqs if reqs > 0 else 1.0


def shard_factors(model: ModelSpec, par: Parallel, served: WeightFormat, kv_dtype_bytes: float = 2.0,
                  measured: WeightFormat = FORMATS["bf16"], measured_tp: int = 1) -> dict[str, float]:
    """What one GPU of the replica does, relative to the one GPU a profile measured the whole
    model on (in ``measured`` weights, bf16 KV) or, ``measured_tp`` > 1, one rank of a tp-N replica
    of it: ``weights`` (bytes held), ``kv`` (KV bytes read: copies over GPUs, at ``kv_dtype_bytes``),
    ``compute`` (FLOPs, at the FP8 rate for an FP8 format, taken as twice bf16) and ``memory``
    (other memory-bound work: split ``tp`` ways)."""
    weights = par.weight_bytes_per_gpu(model, served) / model.weight_bytes_as(measured)
    speed = 2.0 if served.compute == "fp8" and measured.compute == "bf16" else 1.0
    out = {"weights": weights, "kv": par.kv_copies(model) / par.tp * kv_dtype_bytes / 2.0,
           "compute": 1.0 / (par.tp * speed), "memory": 1.0 / par.tp}
    if measured_tp == 1:
        return out
    rank = shard_factors(model, Parallel(measured_tp), measured, measured=measured)
    return {k: v / rank[k] for k, v in out.items()}


def tp_note(measured_tp: int, tp: int) -> str:
    """How a profile measured at ``measured_tp`` (1: the whole model on one GPU; N: one rank of a
    tp-N replica) is taken at ``tp``, for a cost model's ``source`` ("" for a whole model at tp 1)."""
    if tp == measured_tp:
        return "" if tp == 1 else f"; measured per rank at tp={tp} (terms taken whole, collectives added)"
    was = "tp=1" if measured_tp == 1 else f"one rank of tp={measured_tp}"
    return f"; scaled from {was} to tp={tp}"


def tp_block(measured_tp: int, tp: int) -> dict:
    """The ``tp`` block of a cost model's provenance: the tp it prices, whether the profile was
    measured at it, and how it was had (``from``: the rank measured, for a per-rank profile)."""
    if measured_tp == 1:
        return {"size": tp, "measured": tp == 1, "detail": "measured at tp=1" if tp == 1 else
                f"measured at tp=1; tp={tp} by sharding ratios, communication modelled"}
    scaled = "" if tp == measured_tp else f"; tp={tp} by sharding ratios"
    return {"size": tp, "measured": tp == measured_tp, "from": f"one rank of tp={measured_tp}",
            "detail": f"measured per rank at tp={measured_tp}{scaled}, communication modelled"}


def _parts(model: ModelSpec, experts: float | None):
    if experts is None:
        return model.params_by_part()
    expert_all, linear, head, other = model.params_by_part(0)
    routed = model.num_moe_layers * experts * 3 * model.hidden_size * model.moe_intermediate_size
    return expert_all + routed, linear, head, other


__all__ = ["Parallel", "busiest_rank", "rank_share", "shard_factors", "tp_block", "tp_note"]
