"""DeepSeek-V4 hybrid attention and hyper-connections: the config's numbers and their sizes.

One V4 layer (Hugging Face ``transformers`` ``models/deepseek_v4/modeling_deepseek_v4.py``,
the paper's section 2) attends with shared-KV multi-query attention (one KV head of
``head_dim``, K = V) over

* a sliding window of the last ``sliding_window`` tokens (every layer), plus
* ``compress_ratio == 4`` (CSA, compressed sparse attention): one compressed entry
  per 4 tokens (overlapping windows of 8), of which a lightning indexer
  (``index_heads`` x ``index_head_dim``, its own compressed keys) picks the
  ``index_topk`` a query attends to;
* ``compress_ratio == 128`` (HCA, heavily compressed attention): one entry per 128
  tokens, all attended;
* ``compress_ratio == 0``: the window alone (SWA).

Queries and outputs are low rank (``q_lora_rank``; ``o_groups`` groups of
``o_lora_rank``), and the residual is ``hc_mult`` streams mixed by
manifold-constrained hyper-connections. KV bytes per request are therefore not
linear in the context: see :meth:`CompressedAttention.kv_bytes`.
"""
from __future__ import annotations

from dataclasses import dataclass

from dspark_sim.errors import InputError

CSA, HCA, SWA = 4, 128, 0
RATIOS = (SWA, CSA, HCA)
STATE_BYTES = 4  # the compressors' running kv and score buffers are fp32 (SGLang)


@dataclass(frozen=True, slots=True)
class CompressedAttention:
    """The attention-side numbers of a DeepSeek-V4 config (``config.json`` keys in comments).

    ``compress_ratios`` holds one entry per backbone layer (the config lists one
    more for the MTP layer; it is dropped here).
    """

    num_heads: int            # num_attention_heads
    head_dim: int             # head_dim (K = V, one KV head)
    rope_head_dim: int        # qk_rope_head_dim
    q_lora_rank: int          # q_lora_rank
    o_lora_rank: int          # o_lora_rank
    o_groups: int             # o_groups
    sliding_window: int       # sliding_window
    compress_ratios: tuple[int, ...]
    index_heads: int          # index_n_heads
    index_head_dim: int       # index_head_dim
    index_topk: int           # index_topk
    hc_mult: int              # hc_mult
    hc_sinkhorn_iters: int    # hc_sinkhorn_iters
    hash_layers: int = 0      # num_hash_layers: the first layers route by token id

    def __post_init__(self) -> None:
        for key in ("num_heads", "head_dim", "rope_head_dim", "q_lora_rank", "o_lora_rank", "o_groups",
                    "sliding_window", "index_heads", "index_head_dim", "index_topk", "hc_mult"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(None, f"v4 attention: {key}", value, "must be an integer >= 1")
        if not self.compress_ratios or any(r not in RATIOS for r in self.compress_ratios):
            raise InputError(None, "v4 attention: compress_ratios", list(self.compress_ratios),
                             f"one ratio per layer, each one of {RATIOS}")
        if (self.num_heads * self.head_dim) % self.o_groups:
            raise InputError(None, "v4 attention: o_groups", self.o_groups,
                             "must divide num_heads * head_dim")

    # -- layer kinds ------------------------------------------------------------------
    @property
    def num_layers(self) -> int:
        return len(self.compress_ratios)

    def count(self, ratio: int) -> int:
        """Layers of one kind (``CSA``, ``HCA`` or ``SWA``)."""
        return sum(r == ratio for r in self.compress_ratios)

    # -- parameters ---------------------------------------------------------------------
    def attn_matmul_params(self, hidden: int, ratio: int) -> int:
        """Matmul weights of one layer's attention, its compressor and indexer included."""
        h, n, d, q = hidden, self.num_heads, self.head_dim, self.q_lora_rank
        core = h * q + q * n * d + h * d + n * d * self.o_lora_rank + self.o_groups * self.o_lora_rank * h
        return core + self._compressor_matmuls(hidden, ratio)

    def _compressor_matmuls(self, hidden: int, ratio: int) -> int:
        d, i = self.head_dim, self.index_head_dim
        if ratio == CSA:  # two overlapping series (2 d) of kv and gate, and the indexer
            indexer = 2 * hidden * 2 * i + self.q_lora_rank * self.index_heads * i + hidden * self.index_heads
            return 2 * hidden * 2 * d + indexer
        return 2 * hidden * d if ratio == HCA else 0

    def attn_other_params(self, ratio: int) -> int:
        """Non-matmul attention parameters of one layer: norms, sinks, position biases."""
        d, i = self.head_dim, self.index_head_dim
        out = self.q_lora_rank + d + self.num_heads  # q_a_norm, kv_norm, sinks
        if ratio == CSA:
            out += CSA * 2 * d + d + CSA * 2 * i + i
        elif ratio == HCA:
            out += HCA * d + d
        return out

    def hc_params(self, hidden: int) -> int:
        """Hyper-connection weights of one layer (one before attention, one before the MLP)."""
        m = self.hc_mult
        mix = (2 + m) * m
        return 2 * (mix * m * hidden + mix + 3)

    def hc_head_params(self, hidden: int) -> int:
        """The final stream collapse before the last norm."""
        m = self.hc_mult
        return m * m * hidden + m + 1

    # -- KV cache -------------------------------------------------------------------------
    def kv_bytes_per_token(self, dtype_bytes: float) -> float:
        """Bytes a long context adds per token over all layers: compressed entries and
        indexer keys (the window is bounded: see :meth:`kv_bytes_per_request`)."""
        per = 0.0
        for r in self.compress_ratios:
            if r:
                per += self.head_dim / r * dtype_bytes
            if r == CSA:
                per += self.index_head_dim / CSA * dtype_bytes
        return per

    def kv_bytes_per_request(self, dtype_bytes: float) -> float:
        """Bytes a request holds whatever its length: the full sliding window in every layer
        and the compressors' fp32 running state (a kv and a score buffer over ``ratio``
        tokens, two series for CSA, plus the indexer's), as SGLang's V4 memory pool keeps
        them (aiconfigurator ``sdk/models/deepseek_v4.py``, ``get_kvcache_bytes_per_sequence``)."""
        out = self.num_layers * self.sliding_window * self.head_dim * dtype_bytes
        for r in self.compress_ratios:
            if r:
                out += 2 * r * (2 if r == CSA else 1) * self.head_dim * STATE_BYTES
            if r == CSA:
                out += 2 * r * 2 * self.index_head_dim * STATE_BYTES
        return out

    def kv_bytes(self, context: int, dtype_bytes: float) -> float:
        """Exact KV bytes of one request of ``context`` tokens (window capped, whole
        compressed entries only, compressor state)."""
        out = 0.0
        for r in self.compress_ratios:
            out += min(context, self.sliding_window) * self.head_dim * dtype_bytes
            if r:
                out += context // r * self.head_dim * dtype_bytes + 2 * r * (2 if r == CSA else 1) \
                    * self.head_dim * STATE_BYTES
            if r == CSA:
                out += context // r * self.index_head_dim * dtype_bytes \
                    + 2 * r * 2 * self.index_head_dim * STATE_BYTES
        return out

    # -- decode work ----------------------------------------------------------------------
    def keys_per_query(self, context: float, mn=min) -> float:
        """KV entries one query attends to over all layers at ``context`` tokens: the window,
        the indexer's top-k compressed entries (CSA) and every compressed entry (HCA). (Arrays
        of contexts with ``mn`` ``np.minimum``, by the same operations.)"""
        window = mn(context, self.sliding_window)
        csa = mn(self.index_topk, context / CSA)
        return self.num_layers * window + self.count(CSA) * csa + self.count(HCA) * context / HCA

    def attn_flops_per_query(self, context: float, mn=min) -> float:
        """Attention FLOPs of one query token at ``context``: QK and PV over the keys it
        attends to (``head_dim`` each, all heads), plus the indexer's scores over every CSA
        entry (``index_heads x index_head_dim``)."""
        attend = 2.0 * self.num_heads * 2 * self.head_dim * self.keys_per_query(context, mn)
        index = 2.0 * self.index_heads * self.index_head_dim * self.count(CSA) * context / CSA
        return attend + index

    def decode_bytes(self, reqs: float, queries: float, context: float, dtype_bytes: float, mn=min) -> float:
        """KV bytes a verify step reads: per request its window, its indexer keys and (HCA)
        its compressed entries; per query token the top-k entries it gathers (CSA).
        ``context`` is the mean of the ``reqs`` requests, ``queries`` their verify tokens
        (numbers, or arrays of steps with ``mn`` ``np.minimum``)."""
        d, layers = self.head_dim, self.num_layers
        per_req = layers * mn(context, self.sliding_window) * d \
            + self.count(CSA) * context / CSA * self.index_head_dim + self.count(HCA) * context / HCA * d
        per_query = self.count(CSA) * mn(self.index_topk, context / CSA) * d
        return (reqs * per_req + queries * per_query) * dtype_bytes


__all__ = ["CompressedAttention", "CSA", "HCA", "SWA", "RATIOS"]
