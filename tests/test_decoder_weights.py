"""Checkpoints (Hugging Face / DeepSpec names, safetensors) and the MoE target."""
import json

import pytest

torch = pytest.importorskip("torch")

from dspark_sim.errors import InputError  # noqa: E402
from dspark_sim.kernels.decoder.tiny import tiny_decoder, tiny_spec  # noqa: E402
from dspark_sim.kernels.decoder.weights import read_safetensors, write_safetensors  # noqa: E402


def _hf_tensors(target) -> dict:
    """The target's weights under Hugging Face Qwen3 names (what a checkpoint holds)."""
    out = {"model.embed_tokens.weight": target.embed, "model.norm.weight": target.norm,
           "lm_head.weight": target.lm_head}
    for i, layer in enumerate(target.layers):
        p = f"model.layers.{i}."
        a = layer.attn
        q, k, v = a.qkv.split([a.h * a.d, a.kvh * a.d, a.kvh * a.d])
        out.update({p + "self_attn.q_proj.weight": q, p + "self_attn.k_proj.weight": k,
                    p + "self_attn.v_proj.weight": v, p + "self_attn.o_proj.weight": a.o,
                    p + "self_attn.q_norm.weight": a.q_norm, p + "self_attn.k_norm.weight": a.k_norm,
                    p + "input_layernorm.weight": layer.norm1,
                    p + "post_attention_layernorm.weight": layer.norm2})
        gate, up = layer.mlp.gate_up.chunk(2)
        out.update({p + "mlp.gate_proj.weight": gate, p + "mlp.up_proj.weight": up,
                    p + "mlp.down_proj.weight": layer.mlp.down})
    return {k: v.detach().clone() for k, v in out.items()}


def test_safetensors_roundtrip(tmp_path):
    t = {"a": torch.randn(3, 4), "b": torch.arange(5, dtype=torch.float32).to(torch.bfloat16)}
    write_safetensors(tmp_path / "x.safetensors", t)
    back = read_safetensors(tmp_path / "x.safetensors")
    assert torch.equal(back["a"], t["a"]) and torch.equal(back["b"], t["b"])


def test_hf_checkpoint_loads_the_same_model(tmp_path):
    src = tiny_decoder("dspark")
    write_safetensors(tmp_path / "model.safetensors", _hf_tensors(src.target))
    spec = src.spec
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": spec.hidden_size,
                                                      "num_hidden_layers": spec.num_layers}))
    d = src.drafter
    draft = {"fc.weight": d.fc, "hidden_norm.weight": d.hidden_norm, "norm.weight": d.norm,
             "markov_head.markov_w1.weight": d.w1, "markov_head.markov_w2.weight": d.w2,
             "confidence_head.proj.weight": d.conf_w, "confidence_head.proj.bias": d.conf_b}
    for name, value in _hf_tensors(type("T", (), {"embed": src.target.embed, "norm": src.target.norm,
                                                  "lm_head": src.target.lm_head,
                                                  "layers": d.layers})()).items():
        if name.startswith("model.layers."):
            draft[name[len("model."):]] = value
    (tmp_path / "draft").mkdir()
    write_safetensors(tmp_path / "draft" / "model.safetensors",
                      {k: v.detach().clone() for k, v in draft.items()})
    from dspark_sim.kernels.decoder.config import DecoderConfig
    from dspark_sim.kernels.decoder.decoder import Decoder

    loaded = Decoder(spec, src.conf, sps=src.sps, checkpoint=tmp_path,
                     draft_checkpoint=tmp_path / "draft", init_std=5.0)
    assert isinstance(loaded.conf, DecoderConfig)
    prompt = [1, 2, 3, 4, 5]
    torch.testing.assert_close(loaded.score(prompt), src.score(prompt))
    for a, b in zip(loaded.drafter.parameters(), src.drafter.parameters()):
        assert torch.equal(a, b)


def test_checkpoint_for_another_model_is_rejected(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 999}))
    write_safetensors(tmp_path / "model.safetensors", {"x": torch.zeros(1)})
    src = tiny_decoder("none")
    with pytest.raises(InputError, match="hidden_size"):
        src.target.load(tmp_path)


def test_moe_target_cache_matches_full_recompute():
    """Incremental decode through the cache gives the logits of a full forward (MoE layers)."""
    dec = tiny_decoder("none", spec=tiny_spec(moe=True), agreeable=False)
    from dspark_sim.kernels.decoder.tiny import generate, greedy_reference

    prompt = [3, 9, 4, 1]
    assert generate(dec, [prompt], max_tokens=6) == [greedy_reference(dec, prompt, 6)]


def test_moe_target_fused_kernels_decode_like_the_reference():
    """The same tiny MoE model served with the fused Triton MoE (interpreter) and with the
    per-expert loop emits the same greedy tokens, through a DSpark drafter."""
    from dspark_sim.kernels.decoder.tiny import generate

    spec = tiny_spec(moe=True)
    ref = tiny_decoder("dspark", spec=spec, agreeable=False, scheduler="full")
    fused = tiny_decoder("dspark", spec=spec, agreeable=False, scheduler="full", attention="triton")
    prompts = [[3, 9, 4, 1], [7, 2]]
    assert generate(fused, prompts, max_tokens=5) == generate(ref, prompts, max_tokens=5)
