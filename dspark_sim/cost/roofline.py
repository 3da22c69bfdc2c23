"""Roofline cost model: bytes over bandwidth or FLOPs over FLOP/s, per kernel group.

Each group of kernels (linear layers, decode attention, prefill attention, the
drafter) costs ``max(bytes / bw, flops / peak)`` at an efficiency, communication
(:mod:`.comm`) adds its time, and the groups run one after another, so their
times add. It stands in for pairs of GPU and model that have no measured profile;
the efficiencies are assumptions, stated in :class:`RooflineParams`.

What the model's config says enters as follows: weights are read at the bytes of
the format the GPU serves the checkpoint in (:func:`~dspark_sim.catalog.served_format`),
MoE layers read only the experts the step's tokens pick (:mod:`.moe`), the GEMMs
run at the bf16 or FP8 tensor-core rate of that format, DeepSeek-V4's attention reads
its window, indexer keys and gathered compressed entries
(:class:`~dspark_sim.catalog.v4.CompressedAttention`), and the split over a replica's
GPUs follows :class:`~.parallel.Parallel`.
"""
from __future__ import annotations

from dataclasses import dataclass

from dspark_sim.catalog import GpuSpec, ModelSpec, served_format
import numpy as np

from dspark_sim.cost.base import DraftWork, StepWork, StepWorks, each, per_step, pick
from dspark_sim.cost.comm import CommParams, comm_terms, describe, provenance_term
from dspark_sim.cost.moe import Routing, expected_experts, expert_flops, imbalance
from dspark_sim.cost.parallel import Parallel, rank_share

# DSpark's drafter for Qwen3 targets is a 5-layer backbone at the target's width, for
# DeepSeek-V4 three MoE layers (DSPARK.md section 1; ModelSpec.dspark_layers); chain
# drafters (EAGLE-3, MTP) run one layer per token, an MoE layer for a model with its own MTP.
CHAIN_DRAFTER_LAYERS = 1
MARKOV_RANK = 256


@dataclass(frozen=True, slots=True)
class RooflineParams:
    """Efficiencies and fixed costs of the roofline (assumed, not measured).

    bw_eff / flops_eff: fraction of spec-sheet HBM bandwidth and dense
    FLOP/s that kernels reach. step_overhead_s: scheduling and launch time of
    one engine step under CUDA graphs. kernel_launch_s: one sequential launch
    (the Markov loop and chain drafters pay it per position).
    allreduce_latency_s: latency of one tensor-parallel all-reduce.
    dtype_bytes: bytes of one KV-cache element (2: bf16, 1: fp8).
    layer_s: the least time one layer of a forward takes whatever its work (its kernels' launch
    and execution floors in a CUDA graph, a small batch's latency): added a layer a forward,
    the target's and each drafter forward's. first_token_s: the latency a request's first token
    takes beyond the steps that compute it, the same for requests taken in together (it is no
    step's time: the simulator delays each request's intake by it, serving/simulator.py).
    moe_bw_eff: the share of bandwidth the expert GEMMs reach reading their weights (None:
    ``bw_eff``). The three are 0 / None in the plain roofline; the engines' MoE roofline fits
    them (:func:`engine_roofline_params`).
    """

    bw_eff: float = 0.80
    flops_eff: float = 0.65
    attn_flops_eff: float = 0.45
    step_overhead_s: float = 0.6e-3
    kernel_launch_s: float = 8e-6
    allreduce_latency_s: float = 12e-6
    dtype_bytes: float = 2.0
    layer_s: float = 0.0
    first_token_s: float = 0.0
    moe_bw_eff: float | None = None

    def __post_init__(self) -> None:
        for name in ("bw_eff", "flops_eff", "attn_flops_eff") + (("moe_bw_eff",) if self.moe_bw_eff else ()):
            value = getattr(self, name)
            if not 0.0 < value <= 1.0:
                raise ValueError(f"RooflineParams.{name}={value} must lie in (0, 1]")
        for name, most in (("layer_s", 0.1), ("first_token_s", 10.0)):
            if not 0.0 <= getattr(self, name) < most:
                raise ValueError(f"RooflineParams.{name}={getattr(self, name)} must lie in [0, {most:g}) s")


class RooflineCost:
    """Step seconds of ``model`` on one replica of ``tp`` GPUs of kind ``gpu`` by roofline
    (``parallel`` for expert parallelism and DP attention)."""

    def __init__(self, model: ModelSpec, gpu: GpuSpec, tp: int = 1, params: RooflineParams | None = None,
                 *, parallel: Parallel | None = None, routing: Routing = Routing(),
                 comm: CommParams | None = None, measured=None, label: str | None = None):
        par = parallel or Parallel(tp)
        self.model, self.gpu, self.tp, self.parallel, self.routing = model, gpu, par.tp, par, routing
        self.label = label
        self.params = p = params or RooflineParams()
        self.comm_params = comm = comm or CommParams(allreduce_latency_s=p.allreduce_latency_s)
        self.format = fmt = served_format(model.weight_format, gpu.fp4)
        self.name = f"roofline:{gpu.name}/{model.name}/tp{par.tp}" + _suffix(par)
        self.source = (label or "roofline with assumed efficiencies (no measured profile)") + f", {fmt.name} weights" \
            + (f"; communication: {describe(comm)}" if par.tp > 1 and measured is None else "") \
            + (f"; {measured.source}" if measured is not None else "")
        self._measured = measured  # measured collectives (comm_curves.MeasuredComm) in place of the link model
        self._bw = gpu.hbm_bytes_per_s * p.bw_eff
        peak = gpu.fp8_flops if fmt.compute == "fp8" else gpu.bf16_flops
        self._flops = peak * p.flops_eff * par.tp
        self._attn_flops = gpu.bf16_flops * p.attn_flops_eff * par.tp
        self._kv_share = par.kv_copies(model) / par.tp  # KV bytes a GPU reads per replica byte
        self.comm_terms = self._comm0, self._comm1 = comm_terms(model, gpu, par, comm)
        embed = 0 if model.tie_embeddings else model.vocab_size * model.hidden_size * fmt.embed_bytes
        self._embed_bytes = embed / par.tp  # an untied input embedding is gathered a few rows, not streamed
        self._imbalance = imbalance(model.num_experts, model.experts_per_token, par.ep, routing) \
            if model.is_moe else 1.0
        self._expert_flops_tok = expert_flops(model, 1) if model.is_moe else 0.0
        self._other_flops_tok = model.linear_flops_per_token() - self._expert_flops_tok
        self._attn_mm_flops_tok = 2.0 * model.attn_matmul_params()  # every rank's own under DP attention
        self._head_bytes = model.vocab_size * model.hidden_size * fmt.embed_bytes / par.tp
        self._head_flops_tok = 2.0 * model.vocab_size * model.hidden_size
        self._layer = _DraftLayers(self)
        # the engines' MoE roofline (engine_roofline_params): layer floors, the expert GEMMs' bandwidth
        self._overhead_s = p.step_overhead_s + model.num_layers * p.layer_s
        self.first_token_s = p.first_token_s
        self._moe_bw = gpu.hbm_bytes_per_s * p.moe_bw_eff if p.moe_bw_eff and model.is_moe else None
        self._dense_read = self.weight_read_bytes(0) if self._moe_bw is not None else 0.0

    # -- public -------------------------------------------------------------
    def provenance(self) -> dict:
        """The ``cost_model`` block of a run's provenance: every term a roofline estimate."""
        how = {"kind": "roofline", "detail": self.label or "spec-sheet roofline with assumed efficiencies, "
               "not measured"}
        terms = {name: how for name in ("target", "draft_block", "draft_chain", "host_none", "host_block",
                                        "host_chain", "sched")}
        if self.tp > 1:
            terms["comm"] = provenance_term(self.comm_params, self._measured)
        return {"kind": "roofline", "name": self.name, "gpu": self.gpu.name, "model": self.model.name,
                "source": self.source, "measured": None, "projected": None,
                "tp": {"size": self.tp, "measured": False, "detail": "roofline"},
                "engine": None, "held_out": None, "terms": terms}

    def step_s(self, work: StepWork) -> float:
        """Seconds of one engine step (see :class:`StepWork`)."""
        return sum(self.breakdown(work).values())

    def breakdown(self, work: StepWork) -> dict[str, float]:
        """Step seconds split into overhead, linear, attention, comms and draft."""
        tokens = work.verify_tokens + work.prefill_tokens
        parts = {"overhead_s": self._overhead_s if tokens else 0.0,
                 "linear_s": self._linear_s(tokens, work.rank_tokens) if tokens else 0.0,
                 "attn_s": self._attn_s(work),
                 "comm_s": self._comm_s(tokens) if tokens else 0.0,
                 "draft_s": self.draft_s(work.draft) if work.draft else 0.0}
        return parts

    def _comm_s(self, tokens: float) -> float:
        return self._measured.seconds(tokens) if self._measured is not None else self._comm0 + self._comm1 * tokens

    def breakdown_array(self, works: StepWorks) -> dict[str, np.ndarray]:
        """:meth:`breakdown` of N steps, float64 [N] per part, every number the scalar path's: the
        terms of a step's token count (linear layers and their MoE routing, communication) are
        the scalar path's for each distinct count; the attention and the drafter, which grow with
        the context, are evaluated on the arrays with the scalar path's operations in its order
        (DeepSeek-V4's compressed attention too)."""
        size, tokens = len(works), works.batch_tokens
        has = tokens > 0
        dec = works.decode_reqs
        attn = self._v4_decode_attn_s if self.model.v4 is not None else self._decode_attn_s
        decode_s = pick(dec > 0, attn(np.maximum(dec, 1), works.verify_tokens, works.decode_context_tokens,
                                      np.maximum), 0.0)
        parts = {"overhead_s": pick(has, self._overhead_s),
                 "linear_s": pick(has, each(self._linear_s, tokens)),
                 "attn_s": decode_s + self._prefill_attn(works) / self._attn_flops,
                 "comm_s": pick(has, each(self._comm_s, tokens)),
                 "draft_s": self._draft_array(works)}
        return {name: per_step(v, size) for name, v in parts.items()}

    def _draft_array(self, works: StepWorks):
        """The drafter's seconds of N steps (0 where a step drafts nothing)."""
        reqs, block = works.draft_reqs, works.block_size
        drafting = (reqs > 0) & (block > 0)
        if works.draft_kind is None or not np.any(drafting):
            return 0.0
        d = DraftWork(works.draft_kind, reqs, block, works.draft_context_tokens)  # arrays, or one number
        if d.kind == "block":
            return pick(drafting, self._block_draft_s(d, np.maximum))
        if d.kind == "chain":
            return pick(drafting, self._chain_draft_s(d, np.maximum))
        raise ValueError(f"unknown draft kind {d.kind!r}")

    def draft_s(self, draft: DraftWork) -> float:
        """Seconds the drafter spends in one step."""
        if draft.num_reqs == 0 or draft.block_size == 0:
            return 0.0
        if draft.kind == "block":
            return self._block_draft_s(draft)
        if draft.kind == "chain":
            return self._chain_draft_s(draft)
        raise ValueError(f"unknown draft kind {draft.kind!r}")

    # -- parts --------------------------------------------------------------
    def weight_read_bytes(self, tokens: int) -> float:
        """Weight bytes one GPU reads in a forward over ``tokens`` tokens of the replica."""
        m = self.model
        experts = expected_experts(m.num_experts, m.experts_per_token, tokens, self.routing) \
            if m.is_moe else None
        return self.parallel.weight_bytes_per_gpu(m, self.format, experts) - self._embed_bytes

    def _linear_s(self, tokens: int, rank_tokens: int = 0) -> float:
        """The GEMMs' seconds over ``tokens``; under DP attention the attention projections of the
        busiest rank's ``rank_tokens`` (0: the tokens spread evenly) run on its GPU alone."""
        flops = tokens * (self._other_flops_tok + self._expert_flops_tok * self._imbalance)
        if rank_tokens:  # the busiest rank's projections, for the GPU's own share priced above
            flops += max(0, rank_tokens * self.tp - tokens) * self._attn_mm_flops_tok
        read = self.weight_read_bytes(tokens)
        if self._moe_bw is None:
            return max(read / self._bw, flops / self._flops)
        routed = read - self._dense_read  # the routed experts' weights, at the expert GEMMs' share
        return max(self._dense_read / self._bw + routed / self._moe_bw, flops / self._flops)

    def _attn_s(self, work: StepWork) -> float:
        decode_s = 0.0
        if work.decode_reqs:
            attn = self._v4_decode_attn_s if self.model.v4 is not None else self._decode_attn_s
            decode_s = attn(work.decode_reqs, work.verify_tokens, work.decode_context_tokens)
        prefill = self._prefill_attn(work) / self._attn_flops
        if work.rank_tokens and prefill:  # the busiest rank's chunks on its GPU alone
            prefill *= max(1.0, work.rank_tokens * self.tp / work.batch_tokens)
        return decode_s + prefill

    def _v4_decode_attn_s(self, reqs, verify, ctx, mx=max):
        """DeepSeek-V4's decode attention in seconds (numbers, or arrays with ``mx`` ``np.maximum``, by
        the same operations): its window, indexer keys and gathered compressed entries at the mean
        context; under DP attention the step waits for the busiest rank's requests."""
        m, mn = self.model, min if mx is max else np.minimum
        mean = ctx / reqs
        kv_bytes = m.v4.decode_bytes(reqs, verify, mean, self.params.dtype_bytes, mn)
        flops = verify * m.v4.attn_flops_per_query(mean, mn)
        return mx(kv_bytes * self._kv_share / self._bw, flops / self._attn_flops) \
            * rank_share(reqs, self.parallel.dp_ranks)

    def _decode_attn_s(self, reqs, verify, ctx, mx=max):
        """The decode attention's seconds (all but DeepSeek-V4): numbers, or arrays with ``mx``
        ``np.maximum``, by the same operations; under DP attention the step waits for the busiest
        rank's requests."""
        m = self.model
        kv_bytes = ctx * m.kv_bytes_per_token(self.params.dtype_bytes)
        flops = ctx * verify / reqs * m.attn_flops_per_token_per_ctx()
        return mx(kv_bytes * self._kv_share / self._bw, flops / self._attn_flops) \
            * rank_share(reqs, self.parallel.dp_ranks)

    def _prefill_attn(self, work):
        """The prefill chunks' attention FLOPs (numbers or arrays)."""
        m = self.model
        prefill = work.prefill_attn_tokens2 * m.attn_flops_per_token_per_ctx()
        if m.v4 is not None:  # the window and the top-k: a constant number of keys a token
            prefill += work.prefill_tokens * m.v4.attn_flops_per_query(m.v4.sliding_window + 4 * m.v4.index_topk)
        return prefill

    def _forward_s(self, layer_bytes: float, layers: int, tokens: int, kv_bytes: float,
                   layer_flops: float, mx=max) -> float:
        """A small forward (drafter layers plus the LM head) over ``tokens`` positions (numbers,
        or arrays with ``mx`` ``np.maximum``)."""
        weight_bytes = layers * layer_bytes + self._head_bytes
        flops = tokens * (layers * layer_flops + self._head_flops_tok)
        return mx((weight_bytes + layers * kv_bytes * self._kv_share) / self._bw, flops / self._flops)

    def _block_draft_s(self, d: DraftWork, mx=max) -> float:
        m = self.model
        positions = d.num_reqs * d.block_size
        moe = m.dspark_moe
        backbone_s = self._forward_s(self._layer.bytes(positions, moe), m.dspark_layers, positions,
                                     self._layer.kv_bytes(d, mx), self._layer.flops(moe), mx)
        # Markov head: per position a rank-r update of the base logits and a sample.
        markov_flops = positions * 2.0 * MARKOV_RANK * m.vocab_size
        markov_bytes = positions * m.vocab_size * 4.0 * 2
        markov_s = mx(markov_bytes / self._bw, markov_flops / self._flops)
        launches_s = d.block_size * 2 * self.params.kernel_launch_s
        return backbone_s + markov_s + launches_s + m.dspark_layers * self.params.layer_s

    def _chain_draft_s(self, d: DraftWork, mx=max) -> float:
        moe = self.model.mtp_layers > 0  # the model's own MTP module is one of its MoE layers
        per_token_s = self._forward_s(self._layer.bytes(d.num_reqs, moe), CHAIN_DRAFTER_LAYERS, d.num_reqs,
                                      self._layer.kv_bytes(d, mx), self._layer.flops(moe), mx)
        return d.block_size * (per_token_s + 4 * self.params.kernel_launch_s + self.params.layer_s)


def attention_kind(model: ModelSpec) -> str:
    """The family a model's layers belong to for their kernels' floors: ``v4`` (DeepSeek-V4's
    compressed attention), ``mla`` (DeepSeek-V3's latent attention) or ``gqa``."""
    return "v4" if model.v4 is not None else "mla" if model.is_mla else "gqa"


def floor_kind(model: ModelSpec, served: str | None) -> str:
    """The key of a model's layer floor where it is served in format ``served`` (None: unknown): its
    :func:`attention_kind`, and where that is not the checkpoint's own format (FP4 experts through
    Marlin's W4A16 on Hopper: :func:`~dspark_sim.catalog.served_format`) the format besides
    (``v4/fp4-experts-w4a16``): those kernels' floors are their own."""
    kind = attention_kind(model)
    return kind if served in (None, model.weight_format) else f"{kind}/{served}"


def engine_roofline_params(model: ModelSpec, fitted, dtype_bytes: float = 2.0,
                           gpu: GpuSpec | None = None) -> RooflineParams | None:
    """The engines' MoE roofline for ``model`` from ``fitted`` (an :class:`~dspark_sim.engines.GpuWork`:
    ``layer_s`` and ``first_token_layer_s`` (times the model's layers: ``first_token_s``) by
    :func:`attention_kind`, ``moe_bw_eff``, and ``flops_eff`` by the format ``gpu`` serves the model
    in; a floor by :func:`floor_kind` where the fit has one); None when the fit has no floor for the
    model's kind."""
    kind = attention_kind(model)
    fmt = served_format(model.weight_format, gpu.fp4).name if gpu is not None else None
    floors = dict(fitted.layer_s)
    layer = floors.get(floor_kind(model, fmt), floors.get(kind))
    if layer is None:
        return None
    return RooflineParams(dtype_bytes=dtype_bytes, layer_s=layer,
                          first_token_s=model.num_layers * dict(fitted.first_token_layer_s).get(kind, 0.0),
                          moe_bw_eff=fitted.moe_bw_eff,
                          flops_eff=dict(fitted.flops_eff).get(fmt, RooflineParams().flops_eff))


def engine_cost_model(spec: ModelSpec, gpu_spec: GpuSpec, par: Parallel, path, fitted,
                      **kwargs) -> RooflineCost | None:
    """The engines' MoE roofline (:func:`~.roofline.engine_roofline_params`, fitted by
    ``benchmarks/external.py calibrate``) for an MoE model whose shipped profile, if any, was
    scaled from layer slices of the decoder's kernels (not what an engine runs); None otherwise."""
    from dspark_sim.cost.profile_format import load_profile

    if not spec.is_moe or fitted is None:
        return None
    if path is not None and not load_profile(path).provenance.get("scaled_from_slices"):
        return None  # measured whole: the profile prices it
    params = engine_roofline_params(spec, fitted, kwargs.pop("kv_dtype_bytes", 2.0), gpu_spec)
    if params is None:
        return None
    label = (f"the engines' MoE roofline (layer floors and expert bandwidth fitted on {len(fitted.fitted_from)} "
             "published SGLang runs by benchmarks/external.py calibrate; no profile of the engines' kernels)")
    return RooflineCost(spec, gpu_spec, params=params, parallel=par, label=label, **kwargs)


class _DraftLayers:
    """Bytes and FLOPs of one drafter layer: dense at the target's width, or one of its MoE
    layers (attention over a sliding window for DeepSeek-V4's drafter)."""

    def __init__(self, cost: RooflineCost):
        m, fmt, par = cost.model, cost.format, cost.parallel
        self.cost = cost
        self.dense_bytes = _dense_layer_params(m) * fmt.linear_bytes / par.tp
        self.dense_flops = 2.0 * _dense_layer_params(m)
        attn = m.attn_matmul_params() / m.num_layers
        self.attn_bytes = attn * fmt.linear_bytes / par.attn_tp
        self.expert_bytes = 3 * m.hidden_size * m.moe_intermediate_size * fmt.expert_bytes / par.tp
        self.shared = m.num_shared_experts + m.num_experts * m.hidden_size / max(
            1, 3 * m.hidden_size * m.moe_intermediate_size)  # the router, in expert units
        self.moe_flops = 2.0 * attn + (expert_flops(m, 1) / m.num_moe_layers if m.is_moe else 0.0)

    def bytes(self, tokens: int, moe: bool) -> float:
        """Bytes of the layer a forward over ``tokens`` positions reads (a number, or an array)."""
        m = self.cost.model
        if not (moe and m.is_moe):
            return self.dense_bytes
        touched = each(lambda t: expected_experts(m.num_experts, m.experts_per_token, t, self.cost.routing), tokens)
        return self.attn_bytes + (touched + self.shared) * self.expert_bytes

    def flops(self, moe: bool) -> float:
        return self.moe_flops if moe and self.cost.model.is_moe else self.dense_flops

    def kv_bytes(self, d: DraftWork, mx=max) -> float:
        """KV bytes one drafter layer reads over the step's requests (replica total; arrays of steps
        with ``mx`` ``np.maximum``, where a step drafting for no request is left to the caller)."""
        m, kv_b = self.cost.model, self.cost.params.dtype_bytes
        if m.v4 is not None:  # V4's drafter attends over the sliding window alone
            if mx is max:
                return d.num_reqs * min(d.context_tokens / d.num_reqs, m.v4.sliding_window) * m.head_dim * kv_b
            mean = d.context_tokens / np.maximum(d.num_reqs, 1)
            return d.num_reqs * np.minimum(mean, m.v4.sliding_window) * m.head_dim * kv_b
        return d.context_tokens * m.kv_bytes_per_token(kv_b) / m.num_layers


def _dense_layer_params(model: ModelSpec) -> float:
    """Matmul weights of one dense transformer layer at the model's width (drafter layers)."""
    h, d = model.hidden_size, model.head_dim
    return h * d * (model.num_heads * 2 + model.num_kv_heads * 2) + 3 * h * model.intermediate_size


def _suffix(par: Parallel) -> str:
    return (f"/ep{par.ep}" if par.ep > 1 else "") + ("/dp-attn" if par.dp_attention else "")
