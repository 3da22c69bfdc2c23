"""Model architectures: public config.json numbers and the sizes derived from them.

Every preset copies its Hugging Face ``config.json`` (cited in ``source``); the
derived quantities (parameters, weight bytes, KV bytes and FLOPs per token) are
computed here, never typed in, so one formula serves every model.

Conventions:
  * Parameters include the input embedding, every RMSNorm weight and, for an
    untied model, the LM head. MoE router weights count; DeepSeek's per-expert
    routing bias (256 floats a layer) and its MTP module (``num_nextn_predict_layers``)
    do not.
  * ``dtype_bytes`` is bytes per stored element: 2 for bf16, 1 for fp8, 0.5 for int4;
    :meth:`ModelSpec.weight_bytes_as` prices each part at its checkpoint format instead.
  * DeepSeek-V4 (``v4``): its hyper-connection mixing weights count as non-matmul
    parameters, and so do the hash layers' token-to-expert tables (buffers, not counted).
"""
from __future__ import annotations

from dataclasses import dataclass, fields

from dspark_sim.catalog.formats import WeightFormat, get_format
from dspark_sim.catalog.v4 import CompressedAttention
from dspark_sim.errors import InputError


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A decoder-only transformer, dense or MoE, with GQA or MLA attention.

    MoE: layers ``first_dense_layers..num_layers-1`` replace the dense MLP
    (``intermediate_size``) by ``num_experts`` routed experts of width
    ``moe_intermediate_size``, ``experts_per_token`` of them active per token,
    plus ``num_shared_experts`` always-on experts of the same width.
    MLA (DeepSeek): ``kv_lora_rank > 0``; the cache holds one latent of
    ``kv_lora_rank + rope_head_dim`` per token per layer; queries are
    low-rank (``q_lora_rank``) with ``head_dim + rope_head_dim`` per head, and
    values have ``head_dim`` per head.
    """

    name: str
    hf_id: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tie_embeddings: bool
    num_experts: int = 0
    experts_per_token: int = 0
    moe_intermediate_size: int = 0
    num_shared_experts: int = 0
    first_dense_layers: int = 0
    kv_lora_rank: int = 0  # MLA (DeepSeek); 0 = standard GQA
    rope_head_dim: int = 0
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1e6
    source: str = ""
    q_lora_rank: int = 0  # MLA query compression; 0 = full-rank queries
    qk_norm: bool = False  # Qwen3: an RMSNorm of head_dim on each of q and k
    max_context: int = 0  # max_position_embeddings: the longest request served; 0 = unbounded
    weight_format: str = "bf16"  # the checkpoint's (dspark_sim.catalog.formats)
    v4: CompressedAttention | None = None  # DeepSeek-V4 hybrid attention and hyper-connections
    mtp_layers: int = 0  # num_nextn_predict_layers: the model's own MTP module (an MoE layer)
    dspark_layers: int = 5  # the DSpark drafter's backbone layers (DSPARK.md section 1)
    dspark_moe: bool = False  # whether those layers are the target's MoE layers (DeepSeek-V4)
    config_copy: str = ""  # a public copy of config.json the numbers were read from
    dspark_checkpoint: str = ""  # a checkpoint with the DSpark drafter bundled (no draft model path)

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type == "int" and (isinstance(value, bool) or not isinstance(value, int)):
                self._fail(f.name, value, "expected an integer")
        for name in ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "head_dim",
                     "intermediate_size", "vocab_size"):
            if getattr(self, name) < 1:
                self._fail(name, getattr(self, name), "must be >= 1")
        for name in ("num_experts", "experts_per_token", "moe_intermediate_size",
                     "num_shared_experts", "first_dense_layers", "kv_lora_rank",
                     "rope_head_dim", "q_lora_rank"):
            if getattr(self, name) < 0:
                self._fail(name, getattr(self, name), "must be >= 0")
        if self.num_heads % self.num_kv_heads:
            self._fail("num_heads", self.num_heads, f"not divisible by num_kv_heads={self.num_kv_heads}")
        if not (self.rms_norm_eps > 0 and self.rope_theta > 0):
            self._fail("rms_norm_eps", (self.rms_norm_eps, self.rope_theta), "eps and rope_theta must be > 0")
        self._check_moe()
        if (self.kv_lora_rank > 0) != (self.rope_head_dim > 0):
            self._fail("kv_lora_rank", self.kv_lora_rank, "MLA needs both kv_lora_rank and rope_head_dim")
        if self.q_lora_rank and not self.kv_lora_rank:
            self._fail("q_lora_rank", self.q_lora_rank, "q_lora_rank applies only to MLA models")
        for name in ("max_context", "mtp_layers", "dspark_layers"):
            if getattr(self, name) < 0:
                self._fail(name, getattr(self, name), "must be >= 0")
        try:
            get_format(self.weight_format)
        except InputError as err:
            self._fail("weight_format", self.weight_format, err.why)
        if self.v4 is not None and (self.v4.num_layers != self.num_layers or self.is_mla
                                    or self.v4.num_heads != self.num_heads
                                    or self.v4.head_dim != self.head_dim or self.num_kv_heads != 1):
            self._fail("v4", self.v4.num_layers, "V4 attention needs one ratio per layer, one KV head "
                       "of head_dim, the model's heads and no MLA")

    def _check_moe(self) -> None:
        if self.num_experts == 0:
            if self.experts_per_token or self.moe_intermediate_size or self.num_shared_experts \
                    or self.first_dense_layers:
                self._fail("num_experts", 0, "expert settings given for a dense model")
            return
        if not 1 <= self.experts_per_token <= self.num_experts:
            self._fail("experts_per_token", self.experts_per_token, f"must lie in 1..{self.num_experts}")
        if self.moe_intermediate_size < 1:
            self._fail("moe_intermediate_size", self.moe_intermediate_size, "must be >= 1 for MoE")
        if self.first_dense_layers >= self.num_layers:
            self._fail("first_dense_layers", self.first_dense_layers, "leaves no MoE layer")

    def _fail(self, key: str, value: object, why: str) -> None:
        raise InputError(self.source or None, f"model {self.name}: {key}", value, why)

    def sliced(self, layers: int) -> "ModelSpec":
        """The model cut to ``layers`` layers, as a profiler times it when the whole does not fit:
        the first layers; for DeepSeek-V4 its compressed layers in order (CSA and HCA
        alternating; the window-only layers left out)."""
        from dataclasses import replace

        if not 1 <= layers <= self.num_layers:
            self._fail("num_layers", layers, f"a slice has 1..{self.num_layers} layers")
        if self.v4 is None:
            return replace(self, num_layers=layers, first_dense_layers=min(self.first_dense_layers, layers - 1))
        ratios = tuple(r for r in self.v4.compress_ratios if r)[:layers]
        return replace(self, num_layers=len(ratios), v4=replace(self.v4, compress_ratios=ratios))

    def tp_rank(self, tp: int) -> "ModelSpec":
        """What one rank of a ``tp``-way tensor-parallel replica computes, as a model of its own
        (SGLang ``--tp``, vLLM ``tensor_parallel_size``): its ``heads / tp`` query heads and the KV
        heads they read (``kv / tp``, or one copy when ``tp > kv``), ``intermediate / tp`` of the
        MLP, ``vocab / tp`` rows of the vocabulary-parallel LM head (and embedding), every layer.
        Timed on one GPU it is a rank's GPU work without the collectives. Dense GQA models only."""
        from dataclasses import replace

        if tp == 1:
            return self
        if self.is_moe or self.is_mla or self.v4 is not None:
            self._fail("tp", tp, "a rank model is derived for dense GQA models only")
        kv = self.num_kv_heads
        for key, value in (("num_heads", self.num_heads), ("intermediate_size", self.intermediate_size),
                           ("vocab_size", self.vocab_size)):
            if tp < 1 or value % tp:
                self._fail("tp", tp, f"{key}={value} does not split {tp} ways")
        if kv % tp and tp % kv:
            self._fail("tp", tp, f"neither divides nor is divided by the {kv} KV heads")
        return replace(self, num_heads=self.num_heads // tp, num_kv_heads=max(1, kv // tp),
                       intermediate_size=self.intermediate_size // tp, vocab_size=self.vocab_size // tp)

    # -- shapes ---------------------------------------------------------------
    @property
    def is_moe(self) -> bool:
        """True when some layers route tokens to experts."""
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        """True for DeepSeek-style multi-head latent attention."""
        return self.kv_lora_rank > 0

    @property
    def num_moe_layers(self) -> int:
        """Layers whose MLP is a mixture of experts."""
        return self.num_layers - self.first_dense_layers if self.is_moe else 0

    def _attn_params(self) -> int:
        """Matmul weights of one attention block (norm weights excluded)."""
        h, hd, n = self.hidden_size, self.head_dim, self.num_heads
        out = n * hd * h
        if not self.is_mla:
            return h * n * hd + 2 * h * self.num_kv_heads * hd + out
        q_dim = n * (hd + self.rope_head_dim)
        q = h * self.q_lora_rank + self.q_lora_rank * q_dim if self.q_lora_rank else h * q_dim
        kv = h * (self.kv_lora_rank + self.rope_head_dim) + self.kv_lora_rank * n * 2 * hd
        return q + kv + out

    def attn_matmul_params(self) -> int:
        """Attention matmul weights of all layers (V4: each layer's kind, compressors included)."""
        if self.v4 is not None:
            return sum(self.v4.attn_matmul_params(self.hidden_size, r) for r in self.v4.compress_ratios)
        return self.num_layers * self._attn_params()

    def _layer_norm_params(self) -> int:
        """RMSNorm weights of one layer: two pre-norms plus attention-internal norms."""
        extra = 2 * self.head_dim if self.qk_norm else 0
        if self.is_mla:
            extra = self.q_lora_rank + self.kv_lora_rank
        return 2 * self.hidden_size + extra

    def _norm_params(self) -> int:
        """Non-matmul parameters of all layers (V4: sinks, compressor biases, hyper-connections)."""
        if self.v4 is None:
            return self.num_layers * self._layer_norm_params()
        per_layer = 2 * self.hidden_size + self.v4.hc_params(self.hidden_size)
        return sum(per_layer + self.v4.attn_other_params(r) for r in self.v4.compress_ratios) \
            + self.v4.hc_head_params(self.hidden_size)

    def _expert_params(self) -> int:
        """One gated (SwiGLU) expert: gate, up and down projections."""
        return 3 * self.hidden_size * self.moe_intermediate_size

    def _mlp_params(self, experts: int) -> tuple[int, int]:
        """(dense-layer MLP, MoE-layer MLP) matmul weights with ``experts`` routed experts."""
        dense = 3 * self.hidden_size * self.intermediate_size
        if not self.is_moe:
            return dense, 0
        router = self.hidden_size * self.num_experts
        return dense, router + (experts + self.num_shared_experts) * self._expert_params()

    def _matmul_params(self, experts: int) -> int:
        """Weights every token multiplies by, with ``experts`` routed experts per MoE layer."""
        return sum(self.params_by_part(experts)[:3])

    def params_by_part(self, experts: int | None = None) -> tuple[int, int, int, int]:
        """``(expert, linear, head, other)`` parameters with ``experts`` routed experts per MoE
        layer (None: all): expert matmuls (routed and shared), the other matmuls (attention,
        dense MLP, router), the LM head, and the rest (untied embedding, norms, mixing)."""
        experts = self.num_experts if experts is None else experts
        dense_mlp, _ = self._mlp_params(experts)
        dense_layers = self.num_layers - self.num_moe_layers
        expert = self.num_moe_layers * (experts + self.num_shared_experts) * self._expert_params() \
            if self.is_moe else 0
        router = self.num_moe_layers * self.hidden_size * self.num_experts
        linear = self.attn_matmul_params() + dense_layers * dense_mlp + router
        head = self.vocab_size * self.hidden_size  # tied or not, the head is read
        return expert, linear, head, self._other_params()

    def _other_params(self) -> int:
        """Embedding table (when untied from the head) and all norm weights."""
        embed = 0 if self.tie_embeddings else self.vocab_size * self.hidden_size
        return embed + self._norm_params() + self.hidden_size

    # -- derived sizes ----------------------------------------------------------
    @property
    def param_count(self) -> int:
        """All stored parameters (every expert counted)."""
        return self._matmul_params(self.num_experts) + self._other_params()

    @property
    def active_param_count(self) -> int:
        """Parameters one token touches: the ``experts_per_token`` routed experts only."""
        return self._matmul_params(self.experts_per_token) + self._other_params()

    def weight_bytes(self, dtype_bytes: float = 2) -> int:
        """Bytes of all weights stored at ``dtype_bytes`` per parameter."""
        return round(self.param_count * dtype_bytes)

    def weight_bytes_as(self, fmt: WeightFormat, experts: int | None = None) -> float:
        """Bytes of the weights in format ``fmt`` (each part at its own width), with
        ``experts`` routed experts per MoE layer (None: all)."""
        expert, linear, head, other = self.params_by_part(experts)
        return expert * fmt.expert_bytes + linear * fmt.linear_bytes + head * fmt.embed_bytes \
            + other * fmt.other_bytes

    @property
    def checkpoint_format(self) -> WeightFormat:
        """The format the published checkpoint stores (``weight_format``)."""
        return get_format(self.weight_format)

    def kv_bytes_per_token(self, dtype_bytes: float = 2) -> int:
        """KV-cache bytes one token occupies across all layers.

        GQA: K and V, ``2 * num_kv_heads * head_dim`` elements a layer.
        MLA: the compressed latent plus the shared rope key,
        ``kv_lora_rank + rope_head_dim`` elements a layer.
        """
        if self.v4 is not None:
            return round(self.v4.kv_bytes_per_token(dtype_bytes))
        per_layer = self.kv_lora_rank + self.rope_head_dim if self.is_mla \
            else 2 * self.num_kv_heads * self.head_dim
        return round(self.num_layers * per_layer * dtype_bytes)

    def kv_bytes_per_request(self, dtype_bytes: float = 2) -> int:
        """KV bytes a request holds whatever its length (V4: its sliding windows and
        compressor state; 0 for caches linear in the context)."""
        return round(self.v4.kv_bytes_per_request(dtype_bytes)) if self.v4 is not None else 0

    def linear_flops_per_token(self) -> int:
        """FLOPs of the matmuls one token runs through: 2 x active matmul weights (LM head included)."""
        return 2 * self._matmul_params(self.experts_per_token)

    def attn_flops_per_token_per_ctx(self) -> int:
        """Attention FLOPs one new token spends per context token (QK^T plus PV), all layers.

        GQA: ``2 * num_heads * head_dim`` for each of QK^T and PV.
        MLA in its decode (weight-absorbed) form, as engines run it: every head
        attends over the latent, ``kv_lora_rank + rope_head_dim`` wide for QK^T
        and ``kv_lora_rank`` wide for PV.
        """
        if self.v4 is not None:  # the long-context slope: indexer and HCA grow, window and top-k do not
            v = self.v4
            return round(v.attn_flops_per_query(2.0 ** 20) - v.attn_flops_per_query(2.0 ** 20 - 1))
        if self.is_mla:
            width = 2 * self.kv_lora_rank + self.rope_head_dim
        else:
            width = 2 * self.head_dim
        return 2 * self.num_layers * self.num_heads * width

    def activated_weight_bytes(self, num_tokens: int, dtype_bytes: float = 2) -> int:
        """Weight bytes a forward over ``num_tokens`` tokens reads from memory.

        Dense: every weight (``weight_bytes``). MoE: routing is taken as uniform
        and independent, so one expert is touched by at least one of ``n`` tokens
        with probability ``1 - (1 - k/E)^n``; untouched routed experts are not read.
        """
        if isinstance(num_tokens, bool) or not isinstance(num_tokens, int) or num_tokens < 0:
            raise ValueError(f"num_tokens must be an integer >= 0, got {num_tokens!r}")
        if not self.is_moe:
            return self.weight_bytes(dtype_bytes)
        routed = self.num_moe_layers * self.num_experts * self._expert_params()
        touched = 1.0 - (1.0 - self.experts_per_token / self.num_experts) ** num_tokens
        return round((self.param_count - routed + routed * touched) * dtype_bytes)
