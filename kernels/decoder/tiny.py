"""Tiny fp32 models for CPU tests and demos.

Random drafters almost never agree with a random target, which would leave the
accept paths untested. :func:`make_agreeable` bends the random weights so that
drafts are often right: the target becomes nearly a bigram model (small
attention and MLP outputs), and the drafters predict that bigram (the DSpark
Markov head carries it exactly; the chain's single layer is made small too).
"""
from __future__ import annotations

import torch

from dspark_sim.catalog import ModelSpec
from dspark_sim.kernels.decoder.layers import rms_norm


def tiny_spec(vocab: int = 32, layers: int = 2, moe: bool = False) -> ModelSpec:
    """A Qwen3-shaped model small enough for the Triton interpreter."""
    extra = dict(num_experts=4, experts_per_token=2, moe_intermediate_size=16) if moe else {}
    return ModelSpec(name="tiny-moe" if moe else "tiny", hf_id="", num_layers=layers,
                     hidden_size=32, num_heads=4, num_kv_heads=2, head_dim=16,
                     intermediate_size=64, vocab_size=vocab, tie_embeddings=False,
                     qk_norm=True, **extra)


def tiny_v4_spec(vocab: int = 32, ratios: tuple[int, ...] = (0, 4, 128)) -> ModelSpec:
    """A DeepSeek-V4-shaped model small enough for the Triton interpreter: a window of 8,
    top-4 indexer, every kind of layer (window only, CSA, HCA)."""
    from dspark_sim.catalog.v4 import CompressedAttention

    attn = CompressedAttention(num_heads=16, head_dim=32, rope_head_dim=16, q_lora_rank=32, o_lora_rank=16,
                               o_groups=4, sliding_window=8, compress_ratios=ratios, index_heads=16,
                               index_head_dim=16, index_topk=4, hc_mult=4, hc_sinkhorn_iters=3)
    return ModelSpec(name="tiny-v4", hf_id="", num_layers=len(ratios), hidden_size=64, num_heads=16,
                     num_kv_heads=1, head_dim=32, intermediate_size=16, vocab_size=vocab, tie_embeddings=False,
                     num_experts=8, experts_per_token=2, moe_intermediate_size=16, num_shared_experts=1,
                     rope_theta=10000.0, v4=attn)


@torch.no_grad()
def make_agreeable(decoder, residual_scale: float = 0.05) -> None:
    """Make ``decoder``'s drafter agree with its target most of the time."""
    target, drafter = decoder.target, decoder.drafter
    for layer in target.layers:
        _shrink(layer, residual_scale)
    if drafter is None:
        return
    for layer in drafter.layers:
        _shrink(layer, residual_scale)
    if hasattr(drafter, "w1"):
        assert drafter.w1.shape[1] == target.embed.shape[1], "needs markov_rank == hidden"
        drafter.norm.zero_()  # base logits U_k = 0: the Markov head alone drafts
        drafter.w1.copy_(rms_norm(target.embed, target.norm, target.spec.rms_norm_eps))
        drafter.w2.copy_(target.lm_head)


def _shrink(layer, scale: float) -> None:
    layer.attn.o.mul_(scale)
    layer.mlp.down.mul_(scale)


def tiny_sps(scale: int = 1):
    """An SPS table with cliffs, so the scheduler's verify lengths vary; ``scale``
    multiplies its batch-token axis (for batches of ``scale`` times a few requests)."""
    from dspark_sim.kernels.sps_tensors import SpsTensors

    return SpsTensors.from_json_dict({
        "sample_batch_tokens": [1] + [scale * b for b in (8, 12, 24, 64)],
        "sample_steps_per_sec": [100.0, 96.0, 70.0, 50.0, 20.0], "max_batch_tokens": scale * 512})


def tiny_decoder(method: str = "dspark", spec=None, agreeable: bool = True, sps=None, **overrides):
    """A CPU fp32 decoder on :func:`tiny_spec` (torch references unless overridden)."""
    from dspark_sim.kernels.decoder.config import DecoderConfig
    from dspark_sim.kernels.decoder.decoder import Decoder

    spec = spec or tiny_spec()
    conf = dict(method=method, block_size=4, draft_layers=1, markov_rank=spec.hidden_size,
                max_running_requests=8, kv_block_tokens=4, max_model_len=96, kv_tokens=2048,
                kernels="torch", attention="torch", cuda_graphs=False, dtype="float32",
                device="cpu")
    conf.update(overrides)
    dec = Decoder(spec, DecoderConfig(**conf), sps=sps or tiny_sps(), init_std=0.3,
                  acceptance={"target": "qwen3-8b"} if conf.get("synthetic") else None)
    if agreeable:
        make_agreeable(dec)
    return dec


def generate(decoder, prompts, max_tokens: int = 12, temperature: float = 0.0) -> list[list[int]]:
    """Serve ``prompts`` (all arriving at once) to completion; their outputs."""
    from dspark_sim.kernels.decoder.engine import serve
    from dspark_sim.kernels.decoder.sequence import Sequence

    seqs = [Sequence(i, list(p), max_tokens, temperature) for i, p in enumerate(prompts)]
    serve(decoder, seqs)
    return [s.outputs for s in seqs]


def greedy_reference(decoder, prompt, max_tokens: int) -> list[int]:
    """Target-only greedy decoding that re-runs the whole sequence for every token."""
    tokens = list(prompt)
    for _ in range(max_tokens):
        tokens.append(int(decoder.score(tokens)[-1].argmax()))
    return tokens[len(prompt):]
