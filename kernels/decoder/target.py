"""The target: a Qwen3 decoder-only transformer (dense or MoE) over the paged cache."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from dspark_sim.kernels.decoder.attention import Attn
from dspark_sim.kernels.decoder.fused import add_rms_norm
from dspark_sim.kernels.decoder.layers import Layer
from dspark_sim.kernels.decoder.weights import (assign, check_hf_config, getter, load_layer,
                                                 read_checkpoint)


def feature_layers(num_layers: int, count: int = 5) -> tuple[int, ...]:
    """Target layers whose outputs feed the drafter, spread evenly, never the last.

    36 layers give (1, 9, 17, 25, 33), DeepSpec's choice for Qwen3-4B/8B.
    """
    if num_layers < 8:
        return tuple(range(min(count, num_layers - 1))) or (0,)
    step = (num_layers - 4) / (count - 1)
    return tuple(sorted({round(1 + i * step) for i in range(count)}))


class Target(nn.Module):
    """Qwen3 target. ``forward`` returns final-normed hidden states and, when asked,
    the concatenated outputs of some layers (the drafter's input). Under tensor parallelism
    (:mod:`.shard`) ``lm_head`` holds a rank's rows of the vocabulary and :meth:`project`
    gathers the logits."""

    shard = None

    def __init__(self, spec, dtype: torch.dtype):
        super().__init__()
        self.spec = spec
        h, v = spec.hidden_size, spec.vocab_size
        self.embed = nn.Parameter(torch.empty(v, h, dtype=dtype))
        self.layers = nn.ModuleList(
            Layer(spec, dtype, moe=spec.is_moe and i >= spec.first_dense_layers)
            for i in range(spec.num_layers))
        self.norm = nn.Parameter(torch.ones(h, dtype=dtype))
        self.lm_head = self.embed if spec.tie_embeddings else nn.Parameter(torch.empty(v, h, dtype=dtype))

    def forward(self, ids, batch, cache, rope, shape: Attn, impl: str, features: tuple[int, ...] = ()):
        """Run tokens ``ids [T]`` laid out by ``batch``; returns ``(hidden [T, H],
        the concatenated outputs of the ``features`` layers [T, len(features) * H], or None
        without any)``: the drafter's input."""
        slots = batch.slots()
        x, res = F.embedding(ids, self.embed), None
        taken = []
        for i, layer in enumerate(self.layers):
            x, res = layer(x, res, batch, slots, rope, cache.k[i], cache.v[i], shape, impl)
            if i in features:
                taken.append(x + res)
        feats = torch.cat(taken, dim=-1) if taken else None
        return add_rms_norm(x, res, self.norm, self.spec.rms_norm_eps, impl)[0], feats

    def project(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits ``[..., V]`` in the weights' dtype (the drafter's base logits use it too)."""
        out = F.linear(hidden, self.lm_head)
        return out if self.shard is None else self.shard.all_gather_last(out)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """fp32 logits ``[T, V]``."""
        return self.project(hidden).float()

    def logits_into(self, hidden: torch.Tensor, half: torch.Tensor, full: torch.Tensor) -> torch.Tensor:
        """fp32 logits ``[T, V]`` written into ``full[:T]`` (``half[:T]``, in the weights'
        dtype, takes the GEMM): buffers every captured verify graph shares, so no graph
        keeps logits of its own. ``half``/``full``: ``[T_max, V]``."""
        T = hidden.shape[0]
        if self.shard is not None:  # the gather writes a tensor of its own
            return full[:T].copy_(self.project(hidden))
        torch.matmul(hidden, self.lm_head.t(), out=half[:T])
        return full[:T].copy_(half[:T])

    def load(self, directory) -> None:
        """Load a Hugging Face Qwen3 checkpoint directory (safetensors)."""
        check_hf_config(directory, self.spec)
        get = getter(read_checkpoint(directory), directory)
        assign(self.embed, get("embed_tokens.weight"), "embed_tokens.weight")
        for i, layer in enumerate(self.layers):
            load_layer(layer, get, f"layers.{i}.")
        assign(self.norm, get("norm.weight"), "norm.weight")
        if not self.spec.tie_embeddings:
            assign(self.lm_head, get("lm_head.weight"), "lm_head.weight")
