"""Roofline cost model: bytes over bandwidth or FLOPs over FLOP/s, per kernel group.

Each group of kernels (linear layers, decode attention, prefill attention, the
drafter, tensor-parallel all-reduces) costs ``max(bytes / bw, flops / peak)``
at an efficiency, and the groups run one after another, so their times add.
It stands in for pairs of GPU and model that have no measured profile; the
efficiencies are assumptions, stated in :class:`RooflineParams`.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dspark_sim.catalog import GpuSpec, ModelSpec
from dspark_sim.cost.base import DraftWork, StepWork, StepWorks, per_step, pick

# DSpark's drafter for Qwen3 targets is a 5-layer backbone at the target's width
# (DSPARK.md section 1); chain drafters (EAGLE-3, MTP) run one layer per token.
BLOCK_DRAFTER_LAYERS = 5
CHAIN_DRAFTER_LAYERS = 1
MARKOV_RANK = 256


@dataclass(frozen=True, slots=True)
class RooflineParams:
    """Efficiencies and fixed costs of the roofline (assumed, not measured).

    bw_eff / flops_eff: fraction of spec-sheet HBM bandwidth and dense bf16
    FLOP/s that kernels reach. step_overhead_s: scheduling and launch time of
    one engine step under CUDA graphs. kernel_launch_s: one sequential launch
    (the Markov loop and chain drafters pay it per position).
    allreduce_latency_s: latency of one tensor-parallel all-reduce.
    """

    bw_eff: float = 0.80
    flops_eff: float = 0.65
    attn_flops_eff: float = 0.45
    step_overhead_s: float = 0.6e-3
    kernel_launch_s: float = 8e-6
    allreduce_latency_s: float = 12e-6
    dtype_bytes: float = 2.0

    def __post_init__(self) -> None:
        for name in ("bw_eff", "flops_eff", "attn_flops_eff"):
            value = getattr(self, name)
            if not 0.0 < value <= 1.0:
                raise ValueError(f"RooflineParams.{name}={value} must lie in (0, 1]")


class RooflineCost:
    """Step seconds of ``model`` on ``tp`` GPUs of kind ``gpu`` by roofline."""

    def __init__(self, model: ModelSpec, gpu: GpuSpec, tp: int = 1,
                 params: RooflineParams | None = None):
        self.model, self.gpu, self.tp = model, gpu, tp
        self.params = params or RooflineParams()
        self.name = f"roofline:{gpu.name}/{model.name}/tp{tp}"
        self.source = "roofline with assumed efficiencies (no measured profile)"
        p = self.params
        self._bw = gpu.hbm_bytes_per_s * p.bw_eff
        self._flops = gpu.bf16_flops * p.flops_eff * tp
        self._attn_flops = gpu.bf16_flops * p.attn_flops_eff * tp
        self._kv_bytes_tok = model.kv_bytes_per_token(p.dtype_bytes) / tp
        self._attn_flops_tok_ctx = model.attn_flops_per_token_per_ctx()
        self._lin_flops_tok = model.linear_flops_per_token()
        # an untied input embedding is gathered a few rows at a time, not streamed
        embed_bytes = 0 if model.tie_embeddings else model.vocab_size * model.hidden_size * p.dtype_bytes
        self._dense_weight_bytes = (model.weight_bytes(p.dtype_bytes) - embed_bytes) / tp
        layer_bytes = _layer_weight_bytes(model, p.dtype_bytes)
        self._head_bytes = model.vocab_size * model.hidden_size * p.dtype_bytes / tp
        self._head_flops_tok = 2.0 * model.vocab_size * model.hidden_size
        self._layer_bytes = layer_bytes / tp
        self._layer_flops_tok = 2.0 * layer_bytes / p.dtype_bytes
        self._draft_kv_bytes_tok = self._kv_bytes_tok / max(model.num_layers, 1)
        self._allreduce_bytes_tok = 2.0 * model.hidden_size * p.dtype_bytes * (tp - 1) / tp
        self._allreduces_per_step = 2 * model.num_layers if tp > 1 else 0

    # -- public -------------------------------------------------------------
    def step_s(self, work: StepWork) -> float:
        """Seconds of one engine step (see :class:`StepWork`)."""
        return sum(self.breakdown(work).values())

    def breakdown(self, work: StepWork) -> dict[str, float]:
        """Step seconds split into overhead, linear, attention, comms and draft."""
        tokens = work.verify_tokens + work.prefill_tokens
        parts = {"overhead_s": self.params.step_overhead_s if tokens else 0.0,
                 "linear_s": self._linear_s(tokens, max) if tokens else 0.0,
                 "attn_s": self._attn_s(work.verify_tokens, work.decode_reqs, work.decode_context_tokens,
                                        work.prefill_attn_tokens2, max),
                 "comm_s": self._allreduce_s(tokens) if tokens else 0.0,
                 "draft_s": self.draft_s(work.draft) if work.draft else 0.0}
        return parts

    def breakdown_array(self, works: StepWorks) -> dict[str, np.ndarray]:
        """:meth:`breakdown` of N steps, float64 [N] per part, every number the scalar path's."""
        size, tokens = len(works), works.batch_tokens
        has = tokens > 0
        draft = 0.0
        if works.draft_kind is not None:
            draft = pick((works.draft_reqs > 0) & (works.draft_block_size > 0),
                         self._draft_s(works.draft_kind, works.draft_reqs, works.draft_block_size,
                                       works.draft_context_tokens, np.maximum))
        parts = {"overhead_s": pick(has, self.params.step_overhead_s),
                 "linear_s": pick(has, self._linear_s(tokens, np.maximum)),
                 "attn_s": self._attn_s(works.verify_tokens, works.decode_reqs, works.decode_context_tokens,
                                        works.prefill_attn_tokens2, np.maximum),
                 "comm_s": pick(has, self._allreduce_s(tokens)),
                 "draft_s": draft}
        return {name: per_step(v, size) for name, v in parts.items()}

    def draft_s(self, draft: DraftWork) -> float:
        """Seconds the drafter spends in one step."""
        if draft.num_reqs == 0 or draft.block_size == 0:
            return 0.0
        return self._draft_s(draft.kind, draft.num_reqs, draft.block_size, draft.context_tokens, max)

    # -- parts: one formula for a step (Python numbers, ``max``) and for N steps (arrays, np.maximum)
    def _draft_s(self, kind: str, reqs, block_size, context_tokens, maximum):
        if kind == "block":
            return self._block_draft_s(reqs, block_size, context_tokens, maximum)
        if kind == "chain":
            return self._chain_draft_s(reqs, block_size, context_tokens, maximum)
        raise ValueError(f"unknown draft kind {kind!r}")

    def _linear_s(self, tokens, maximum):
        weight_bytes = self._dense_weight_bytes
        if self.model.num_experts:
            if isinstance(tokens, np.ndarray):
                weight_bytes = np.array([self.model.activated_weight_bytes(t, self.params.dtype_bytes)
                                         for t in tokens.tolist()], dtype=np.float64) / self.tp
            else:
                weight_bytes = self.model.activated_weight_bytes(tokens, self.params.dtype_bytes) / self.tp
        return maximum(weight_bytes / self._bw, tokens * self._lin_flops_tok / self._flops)

    def _attn_s(self, verify_tokens, decode_reqs, context_tokens, prefill_pairs, maximum):
        kv_read_s = context_tokens * self._kv_bytes_tok / self._bw
        if isinstance(decode_reqs, np.ndarray):
            per_req = np.where(decode_reqs > 0, verify_tokens / np.maximum(decode_reqs, 1), 0.0)
        else:
            per_req = verify_tokens / decode_reqs if decode_reqs else 0.0
        decode_flops = context_tokens * per_req * self._attn_flops_tok_ctx
        decode_s = maximum(kv_read_s, decode_flops / self._attn_flops)
        prefill_s = prefill_pairs * self._attn_flops_tok_ctx / self._attn_flops
        return decode_s + prefill_s

    def _allreduce_s(self, tokens):
        """All-reduce seconds of a step with ``tokens`` > 0 (0 without tensor parallelism)."""
        if not self._allreduces_per_step:
            return 0.0
        bytes_per = tokens * self._allreduce_bytes_tok
        return self._allreduces_per_step * (self.params.allreduce_latency_s
                                            + bytes_per / self.gpu.nvlink_unidir_bytes_per_s)

    def _forward_s(self, layers: int, tokens, context_tokens, maximum):
        """A small forward (drafter layers plus the LM head) over ``tokens`` positions."""
        weight_bytes = layers * self._layer_bytes + self._head_bytes
        flops = tokens * (layers * self._layer_flops_tok + self._head_flops_tok)
        kv_bytes = layers * context_tokens * self._draft_kv_bytes_tok
        return maximum((weight_bytes + kv_bytes) / self._bw, flops / self._flops)

    def _block_draft_s(self, reqs, block_size, context_tokens, maximum):
        positions = reqs * block_size
        backbone_s = self._forward_s(BLOCK_DRAFTER_LAYERS, positions, context_tokens, maximum)
        # Markov head: per position a rank-r update of the base logits and a sample.
        markov_flops = positions * 2.0 * MARKOV_RANK * self.model.vocab_size
        markov_bytes = positions * self.model.vocab_size * 4.0 * 2
        markov_s = maximum(markov_bytes / self._bw, markov_flops / self._flops)
        launches_s = block_size * 2 * self.params.kernel_launch_s
        return backbone_s + markov_s + launches_s

    def _chain_draft_s(self, reqs, block_size, context_tokens, maximum):
        per_token_s = self._forward_s(CHAIN_DRAFTER_LAYERS, reqs, context_tokens, maximum)
        return block_size * (per_token_s + 4 * self.params.kernel_launch_s)


def _layer_weight_bytes(model: ModelSpec, dtype_bytes: float) -> float:
    """Bytes of one dense transformer layer at the model's width (drafter layers)."""
    h, d = model.hidden_size, model.head_dim
    attn = h * d * (model.num_heads * 2 + model.num_kv_heads * 2)
    mlp = 3 * h * model.intermediate_size
    return (attn + mlp) * dtype_bytes
