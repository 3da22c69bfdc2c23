"""Drafters: the DSpark block drafter and a static chain (MTP-k style).

Both read the target through *context keys*: the outputs of chosen target
layers, concatenated, projected by ``fc`` and normed, become keys and values of
every draft layer at the tokens' own positions (DeepSpec's DSpark/DFlash
backbone). They share the target's embedding and LM head.

* ``Block`` (DSpark): the anchor plus ``block_size - 1`` mask tokens go through
  ``n`` layers in one forward, attending to the context and to each other
  (bidirectionally), giving ``block_size`` base logits ``U_k``. A Markov head samples
  left to right, ``p_k ∝ exp(U_k + W2 · W1[x_{k-1}])`` (rank r), and a
  confidence head gives ``c_k = sigmoid(w · [h_k; W1[x_{k-1}]] + b)``.
* ``Chain`` (MTP-k): one layer run ``k`` times, each pass over the anchor and
  the drafts so far (causal), one token per pass.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from dspark_sim.kernels.decoder.attention import plan
from dspark_sim.kernels.decoder.batch import ragged_batch
from dspark_sim.kernels.decoder.fused import add_rms_norm
from dspark_sim.kernels.decoder.layers import Layer, rms_norm
from dspark_sim.kernels.decoder.weights import assign, getter, load_layer, read_checkpoint


def sample(logits: torch.Tensor, temperature: torch.Tensor):
    """Tokens ``[R]`` and probabilities ``[R, V]`` fp32 from logits ``[R, V]``.

    ``temperature [R]``: 0 picks the argmax; otherwise an exponential race
    (Gumbel-max) draws exactly from ``softmax(logits / T)``.
    """
    t = temperature[:, None]
    probs = torch.softmax(logits / torch.where(t > 0, t, 1.0), dim=-1)
    race = probs / torch.empty_like(probs).exponential_()
    tokens = torch.where(temperature > 0, race.argmax(-1), logits.argmax(-1))
    return tokens, probs


class Drafter(nn.Module):
    """Common part: layers, context projection, final norm; shares target embed/head."""

    def __init__(self, spec, target, layers: int, features: tuple[int, ...], dtype):
        super().__init__()
        self.spec = spec
        self.features = tuple(features)
        h = spec.hidden_size
        self.layers = nn.ModuleList(Layer(spec, dtype) for _ in range(layers))
        self.fc = nn.Parameter(torch.empty(h, len(features) * h, dtype=dtype))
        self.hidden_norm = nn.Parameter(torch.ones(h, dtype=dtype))
        self.norm = nn.Parameter(torch.ones(h, dtype=dtype))
        self._shared = (target,)  # not a submodule: its weights are the target's

    @property
    def embed(self) -> torch.Tensor:
        return self._shared[0].embed

    @property
    def lm_head(self) -> torch.Tensor:
        return self._shared[0].lm_head

    def append_context(self, feats, batch, slots, rope, cache, impl: str = "torch") -> None:
        """Write context keys/values of ``feats [T, n*H]`` at ``slots`` in every layer."""
        x = rms_norm(F.linear(feats, self.fc), self.hidden_norm, self.spec.rms_norm_eps, impl)
        for i, layer in enumerate(self.layers):
            layer.attn.write_kv(x, batch.positions, slots, rope, cache.k[i], cache.v[i], impl)

    def _layers(self, x, batch, rope, cache, shape, impl):
        slots = batch.slots()
        res = None
        for i, layer in enumerate(self.layers):
            x, res = layer(x, res, batch, slots, rope, cache.k[i], cache.v[i], shape, impl)
        return add_rms_norm(x, res, self.norm, self.spec.rms_norm_eps, impl)[0]

    def load_common(self, get) -> None:
        """Load layers, fc and norms from DeepSpec-named tensors."""
        for i, layer in enumerate(self.layers):
            load_layer(layer, get, f"layers.{i}.")
        assign(self.fc, get("fc.weight"), "fc.weight")
        assign(self.hidden_norm, get("hidden_norm.weight"), "hidden_norm.weight")
        assign(self.norm, get("norm.weight"), "norm.weight")


class Block(Drafter):
    """DSpark block drafter (``block_size`` positions, Markov head, confidence head)."""

    def __init__(self, spec, target, block_size: int, layers: int, rank: int,
                 features: tuple[int, ...], dtype, mask_id: int | None = None):
        super().__init__(spec, target, layers, features, dtype)
        self.block_size = block_size
        self.mask_id = spec.vocab_size - 1 if mask_id is None else mask_id
        v, h = spec.vocab_size, spec.hidden_size
        self.w1 = nn.Parameter(torch.empty(v, rank, dtype=dtype))
        self.w2 = nn.Parameter(torch.empty(v, rank, dtype=dtype))
        self.conf_w = nn.Parameter(torch.empty(1, h + rank, dtype=dtype))
        self.conf_b = nn.Parameter(torch.zeros(1, dtype=dtype))

    def batch(self, anchor_pos: torch.Tensor, rows: torch.Tensor, pages):
        """Forward metadata of the block (on the device): ``block_size`` tokens per request from
        the anchor at ``anchor_pos [R]``."""
        return _block_batch(self.block_size, anchor_pos, rows, pages)

    def forward(self, anchors, batch, temperature, rope, cache, impl: str, num_sms: int = 132):
        """Draft one block for ``anchors [R]``.

        Returns ``drafts [R, block_size]`` int64, ``probs [R, block_size, V]`` fp32 (the
        distribution each draft was drawn from) and raw confidence logits
        ``[R, block_size]`` fp32.
        """
        R, g = anchors.shape[0], self.block_size
        first = torch.arange(g, device=anchors.device)[None, :] == 0
        ids = torch.where(first, anchors[:, None], self.mask_id)
        shape = plan(g, R, self.spec.num_kv_heads, self.spec.num_heads // self.spec.num_kv_heads,
                     num_sms, causal=False)
        hidden = self._layers(F.embedding(ids.reshape(-1), self.embed), batch, rope, cache,
                              shape, impl).view(R, g, -1)
        base = self._shared[0].project(hidden).float()
        prev = anchors
        drafts, probs, conf = [], [], []
        for k in range(g):
            e = F.embedding(prev, self.w1)
            tok, p = sample(base[:, k] + F.linear(e, self.w2).float(), temperature)
            feat = torch.cat([hidden[:, k], e], dim=-1)
            conf.append((F.linear(feat, self.conf_w).float() + self.conf_b.float()).squeeze(-1))
            drafts.append(tok)
            probs.append(p)
            prev = tok
        return torch.stack(drafts, 1), torch.stack(probs, 1), torch.stack(conf, 1)

    def load(self, directory) -> None:
        """Load a DeepSpec DSpark drafter checkpoint (vanilla Markov head)."""
        get = getter(read_checkpoint(directory), directory)
        self.load_common(get)
        assign(self.w1, get("markov_head.markov_w1.weight"), "markov_w1")
        assign(self.w2, get("markov_head.markov_w2.weight"), "markov_w2")
        assign(self.conf_w, get("confidence_head.proj.weight"), "confidence_head.proj.weight")
        assign(self.conf_b, get("confidence_head.proj.bias"), "confidence_head.proj.bias")


class Chain(Drafter):
    """Static chain drafter: one layer run ``k`` times (MTP-k style)."""

    def __init__(self, spec, target, k: int, features: tuple[int, ...], dtype):
        super().__init__(spec, target, 1, features, dtype)
        self.block_size = k

    def batch(self, anchor_pos: torch.Tensor, rows: torch.Tensor, pages):
        """One forward metadata per pass ``j`` (on the device): ``j + 1`` tokens from the anchor."""
        return [_block_batch(j + 1, anchor_pos, rows, pages) for j in range(self.block_size)]

    def forward(self, anchors, batches, temperature, rope, cache, impl: str, num_sms: int = 132):
        """Draft ``k`` tokens; returns ``(drafts [R, k], probs [R, k, V], None)``."""
        R = anchors.shape[0]
        window = anchors[:, None]
        drafts, probs = [], []
        group = self.spec.num_heads // self.spec.num_kv_heads
        for j, batch in enumerate(batches):
            shape = plan(j + 1, R, self.spec.num_kv_heads, group, num_sms)
            x = self._layers(F.embedding(window.reshape(-1), self.embed), batch, rope, cache,
                             shape, impl).view(R, j + 1, -1)
            tok, p = sample(self._shared[0].project(x[:, -1]).float(), temperature)
            drafts.append(tok)
            probs.append(p)
            window = torch.cat([window, tok[:, None]], dim=1)
        return torch.stack(drafts, 1), torch.stack(probs, 1), None


def _block_batch(width: int, anchor_pos: torch.Tensor, rows: torch.Tensor, pages):
    """``width`` tokens per request from its anchor's position, as a device-built batch."""
    R = rows.shape[0]
    q_len = torch.full((R,), width, dtype=torch.int32, device=rows.device)
    src = torch.arange(R, dtype=torch.int32, device=rows.device) * width
    return ragged_batch(q_len, anchor_pos, rows, R * width, src, pages)
