"""The decoder on a Llama-3.1-shaped model (no QK-norm, untied embeddings, rope theta 5e5),
against a float64 Llama forward written here from the architecture; and one rank of a
tensor-parallel replica as a model of its own (what the profiler times with --tp-rank)."""
import math
from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")

from dspark_sim.catalog import ModelSpec, get_model  # noqa: E402
from dspark_sim.kernels.decoder.tiny import tiny_decoder  # noqa: E402


def tiny_llama(vocab: int = 64) -> ModelSpec:
    """Llama 3.1's shape, small: GQA 8/4 heads, eps 1e-5, rope theta 5e5, no QK-norm, untied."""
    real = get_model("llama-3.1-8b")
    return replace(real, name="tiny-llama", hf_id="", num_layers=2, hidden_size=64, num_heads=8, num_kv_heads=4,
                   head_dim=8, intermediate_size=96, vocab_size=vocab, max_context=0)


def llama_logits(target, ids: list[int]) -> torch.Tensor:
    """Logits ``[T, V]`` of a Llama forward in float64 over the target's weights (HF layout:
    q/k/v rows stacked in ``qkv``, gate and up in ``gate_up``, half-split rotary)."""
    spec = target.spec
    h, kv, d, eps = spec.num_heads, spec.num_kv_heads, spec.head_dim, spec.rms_norm_eps
    w = {k: v.double() for k, v in target.state_dict().items()}

    def norm(x, weight):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight

    t = len(ids)
    inv = 1.0 / spec.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    ang = torch.arange(t, dtype=torch.float64)[:, None] * inv[None]
    cos, sin = ang.cos()[:, None], ang.sin()[:, None]

    def rotate(x):  # [T, heads, D]
        a, b = x[..., : d // 2], x[..., d // 2:]
        return torch.cat([a * cos - b * sin, b * cos + a * sin], -1)

    x = w["embed"][torch.tensor(ids)]
    mask = torch.full((t, t), -math.inf, dtype=torch.float64).triu(1)
    for i in range(spec.num_layers):
        p = f"layers.{i}."
        y = norm(x, w[p + "norm1"]) @ w[p + "attn.qkv"].T
        q, k, v = y[:, :h * d].view(t, h, d), y[:, h * d:(h + kv) * d].view(t, kv, d), y[:, (h + kv) * d:].view(t, kv, d)
        q, k = rotate(q), rotate(k)
        k, v = k.repeat_interleave(h // kv, 1), v.repeat_interleave(h // kv, 1)
        att = torch.softmax(torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(d) + mask, -1)
        x = x + torch.einsum("hqk,khd->qhd", att, v).reshape(t, h * d) @ w[p + "attn.o"].T
        gate, up = (norm(x, w[p + "norm2"]) @ w[p + "mlp.gate_up"].T).chunk(2, -1)
        x = x + (torch.nn.functional.silu(gate) * up) @ w[p + "mlp.down"].T
    return norm(x, w["norm"]) @ w["lm_head"].T


def test_llama_forward_matches_a_float64_reference():
    """The Triton kernels the GPU runs (in the interpreter on the CPU: TRITON_INTERPRET=1, conftest)."""
    spec = tiny_llama()
    dec = tiny_decoder("none", spec=spec, agreeable=False, kernels="triton", attention="triton")
    assert not spec.qk_norm and not spec.tie_embeddings and spec.rope_theta == 5e5
    assert dec.target.lm_head is not dec.target.embed
    with torch.no_grad():  # QK-norm weights that would change the output if they were applied
        for layer in dec.target.layers:
            layer.attn.q_norm.fill_(3.0)
            layer.attn.k_norm.fill_(0.5)
    ids = [5, 17, 3, 60, 42, 9]
    got = dec.score(ids).double()
    want = llama_logits(dec.target, ids)
    torch.testing.assert_close(got, want, rtol=2e-4, atol=2e-4)


def test_a_rank_model_has_the_shapes_the_shard_code_cuts():
    """One rank of tp 4 as its own model holds exactly the GEMM shapes rank r of the decoder's
    tensor-parallel split holds (the embedding aside: vocabulary rows, looked up either way)."""
    from dspark_sim.kernels.decoder.shard import Shard, shard_models

    spec = tiny_llama()
    rank = spec.tp_rank(4)
    assert (rank.num_heads, rank.num_kv_heads, rank.intermediate_size, rank.vocab_size) == (2, 1, 24, 16)
    local = tiny_decoder("none", spec=rank, agreeable=False).target
    for r in (0, 3):
        whole = tiny_decoder("none", spec=spec, agreeable=False).target
        shard_models(whole, None, Shard(r, 4))
        shapes = {k: tuple(v.shape) for k, v in whole.state_dict().items() if k != "embed"}
        assert shapes == {k: tuple(v.shape) for k, v in local.state_dict().items() if k != "embed"}


def test_rank_of_the_70b_at_tp4_and_what_does_not_split():
    from dspark_sim.errors import InputError

    rank = get_model("llama-3.1-70b").tp_rank(4)
    assert (rank.num_heads, rank.num_kv_heads, rank.intermediate_size, rank.vocab_size, rank.hidden_size,
            rank.num_layers) == (16, 2, 7168, 32064, 8192, 80)
    assert 17.4e9 < rank.param_count < 17.8e9  # a quarter of the 70B, the embedding cut too
    assert get_model("llama-3.1-8b").tp_rank(16).num_kv_heads == 1  # a copy of one KV head
    with pytest.raises(InputError, match="does not split 3 ways"):
        get_model("llama-3.1-8b").tp_rank(3)
    with pytest.raises(InputError, match="dense GQA"):
        get_model("qwen3-30b-a3b").tp_rank(2)
