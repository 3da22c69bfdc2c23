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
        head = target.lm_head  # a rank's rows of it under tensor parallelism: gathered
        drafter.w2.copy_(head if target.shard is None else target.shard.all_gather_rows(head).flatten(0, 1))


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


def tiny_decoder(method: str = "dspark", spec=None, agreeable: bool = True, sps=None, shard=None,
                 **overrides):
    """A CPU fp32 decoder on :func:`tiny_spec` (torch references unless overridden); ``shard``:
    this rank's place in a tensor-parallel group (:mod:`.shard`)."""
    from dspark_sim.kernels.decoder.config import DecoderConfig
    from dspark_sim.kernels.decoder.decoder import Decoder

    spec = spec or tiny_spec()
    conf = dict(method=method, block_size=4, draft_layers=1, markov_rank=spec.hidden_size,
                max_running_requests=8, kv_block_tokens=4, batching="prefill_first", prefix_cache=False,
                max_model_len=96, kv_tokens=2048, kernels="torch", attention="torch", cuda_graphs=False,
                dtype="float32", device="cpu")
    conf.update(overrides)
    dec = Decoder(spec, DecoderConfig.of(**conf), sps=sps or tiny_sps(), init_std=0.3,
                  acceptance={"target": "qwen3-8b"} if conf.get("synthetic") else None, shard=shard)
    if agreeable:
        make_agreeable(dec)
    return dec


def generate(decoder, prompts, max_tokens: int = 12, temperature: float = 0.0,
             gap_s: float = 0.0) -> list[list[int]]:
    """Serve ``prompts`` to completion (all arriving at once, or one every ``gap_s`` seconds
    of real time); their outputs."""
    from dspark_sim.kernels.decoder.engine import serve
    from dspark_sim.kernels.decoder.sequence import Sequence

    seqs = [Sequence(i, list(p), max_tokens, temperature, arrival_s=i * gap_s) for i, p in enumerate(prompts)]
    serve(decoder, seqs, realtime=gap_s > 0)
    return [s.outputs for s in seqs]


def greedy_reference(decoder, prompt, max_tokens: int) -> list[int]:
    """Target-only greedy decoding that re-runs the whole sequence for every token."""
    tokens = list(prompt)
    for _ in range(max_tokens):
        tokens.append(int(decoder.score(tokens)[-1].argmax()))
    return tokens[len(prompt):]


def on_device(device: str) -> dict:
    """:func:`tiny_decoder` overrides for ``device``: on a GPU the Triton kernels and CUDA graphs."""
    if not device.startswith("cuda"):
        return {"device": device}
    return {"device": device, "kernels": "triton", "attention": "triton", "cuda_graphs": True}


def tp_generate_job(ctx, method: str, prompts, max_tokens: int, temperature: float = 0.0, moe: bool = False,
                    gap_s: float = 0.0, **overrides) -> dict:
    """One rank of :func:`generate` over a tensor-parallel tiny decoder (a :func:`~.tp.run_ranks`
    job): rank 0 serves, the others follow. Returns rank 0's outputs and, for every rank,
    the pages and table rows left free after the run."""
    import torch
    import torch.distributed as dist

    from dspark_sim.kernels.decoder.ranks import Leader, follow

    torch.manual_seed(0)
    dec = tiny_decoder(method, spec=tiny_spec(moe=moe), shard=ctx.shard, **{**on_device(ctx.device), **overrides})
    outputs = None
    if ctx.leader:
        leader = Leader(dec, ctx.control)
        outputs = generate(leader, prompts, max_tokens, temperature, gap_s)
        leader.stop()
    else:
        follow(dec, ctx.control)
    free = [None] * ctx.world
    dist.all_gather_object(free, (len(dec.pages.free), len(dec.pages.free_rows)), group=ctx.control)
    return {"outputs": outputs, "free": free}
