"""MoE and DeepSeek-V4 presets: every field against the public config.json copies, sizes
against the published totals."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from dspark_sim.catalog import FORMATS, get_gpu, get_model, served_format
from dspark_sim.catalog.formats import FP8_BLOCK_BYTES, MXFP4_BYTES
from dspark_sim.catalog.v4 import CSA, HCA, SWA
from dspark_sim.errors import InputError

CONFIGS = Path(__file__).parent / "data" / "model_configs"
GIB = 2 ** 30


def config(hf_id: str) -> dict:
    return json.loads((CONFIGS / (hf_id.replace("/", "--") + "_config.json")).read_text())


def check_common(m, c: dict) -> None:
    """The keys every MoE config shares, against the preset."""
    pairs = {"num_hidden_layers": m.num_layers, "hidden_size": m.hidden_size,
             "num_attention_heads": m.num_heads, "num_key_value_heads": m.num_kv_heads,
             "head_dim": m.head_dim, "vocab_size": m.vocab_size, "num_experts_per_tok": m.experts_per_token,
             "moe_intermediate_size": m.moe_intermediate_size, "max_position_embeddings": m.max_context,
             "rope_theta": m.rope_theta, "rms_norm_eps": m.rms_norm_eps,
             "tie_word_embeddings": m.tie_embeddings}
    for key, value in pairs.items():
        assert c[key] == value, key


@pytest.mark.parametrize("name", ["deepseek-v4-flash", "deepseek-v4-pro"])
def test_v4_presets_match_their_config(name):
    m = get_model(name)
    c = config(m.hf_id)
    assert m.config_copy.endswith(m.hf_id.replace("/", "--") + "_config.json")
    check_common(m, c)
    pairs = {"n_routed_experts": m.num_experts,
             "n_shared_experts": m.num_shared_experts, "num_nextn_predict_layers": m.mtp_layers,
             "q_lora_rank": m.v4.q_lora_rank, "o_lora_rank": m.v4.o_lora_rank, "o_groups": m.v4.o_groups,
             "qk_rope_head_dim": m.v4.rope_head_dim, "sliding_window": m.v4.sliding_window,
             "index_n_heads": m.v4.index_heads, "index_head_dim": m.v4.index_head_dim,
             "index_topk": m.v4.index_topk, "hc_mult": m.v4.hc_mult,
             "hc_sinkhorn_iters": m.v4.hc_sinkhorn_iters, "num_hash_layers": m.v4.hash_layers}
    for key, value in pairs.items():
        assert c[key] == value, key
    # one ratio per layer, then the MTP layer's
    assert tuple(c["compress_ratios"][:-1]) == m.v4.compress_ratios
    assert len(c["compress_ratios"]) == m.num_layers + m.mtp_layers
    assert c["expert_dtype"] == "fp4" and c["quantization_config"]["weight_block_size"] == [128, 128]
    assert m.weight_format == "fp4-experts"


@pytest.mark.parametrize("name", ["qwen3-30b-a3b", "qwen3-235b-a22b"])
def test_qwen3_moe_presets_match_their_config(name):
    m = get_model(name)
    c = config(m.hf_id)
    check_common(m, c)
    assert (c["intermediate_size"], c["num_experts"]) == (m.intermediate_size, m.num_experts)
    assert c["mlp_only_layers"] == [] and c["decoder_sparse_step"] == 1  # every layer MoE


# Published totals: DeepSeek's V4 release (V4-Flash 284B, 13B activated; V4-Pro 1.6T, 49B
# activated), Qwen's model cards (Qwen3-30B-A3B 30.5B / 3.3B, Qwen3-235B-A22B 235B / 22B).
# DeepSeek's activated counts leave out the input embedding (a gather, not a matmul);
# Qwen's include it.
@pytest.mark.parametrize("name, total, active, embed_in_active, rel_total, rel_active", [
    ("deepseek-v4-flash", 284e9, 13e9, False, 2e-3, 3e-2),
    ("deepseek-v4-pro", 1.6e12, 49e9, False, 2e-2, 1e-2),
    ("qwen3-30b-a3b", 30.5e9, 3.3e9, True, 2e-3, 2e-2),
    ("qwen3-235b-a22b", 235e9, 22e9, True, 1e-3, 1e-2),
])
def test_param_counts_match_published_totals(name, total, active, embed_in_active, rel_total, rel_active):
    m = get_model(name)
    embed = 0 if embed_in_active else m.vocab_size * m.hidden_size
    assert m.param_count == pytest.approx(total, rel=rel_total)
    assert m.active_param_count - embed == pytest.approx(active, rel=rel_active)


def test_v4_flash_hand_count():
    """One V4-Flash layer's matmuls, counted by hand from the transformers modules."""
    m = get_model("deepseek-v4-flash")
    h, n, d = 4096, 64, 512
    core = h * 1024 + 1024 * n * d + h * d + n * d * 1024 + 8 * 1024 * h
    csa = 2 * h * 2 * d + 2 * h * 2 * 128 + 1024 * 64 * 128 + h * 64
    hca = 2 * h * d
    attn = 43 * core + 21 * csa + 20 * hca
    experts = 43 * (256 + 1) * 3 * h * 2048
    expert, linear, head, _ = m.params_by_part()
    assert expert == experts
    assert linear == attn + 43 * 256 * h  # + routers
    assert head == 129280 * h


def test_v4_kv_bytes_match_published_figures():
    """vLLM's DeepSeek-V4 blog: about 9.62 GiB of bf16 KV per 1M-token sequence for V4-Pro
    (6.72 GiB for V4-Flash in the same breakdown): compressed entries and indexer keys."""
    pro, flash = get_model("deepseek-v4-pro"), get_model("deepseek-v4-flash")
    assert pro.kv_bytes_per_token() * 2 ** 20 / GIB == pytest.approx(9.62, abs=0.005)
    assert flash.kv_bytes_per_token() * 2 ** 20 / GIB == pytest.approx(6.72, abs=0.005)
    # by hand: CSA 512/4 + 128/4 elements, HCA 512/128, two bytes each
    assert flash.kv_bytes_per_token() == 21 * 2 * (128 + 32) + 20 * 2 * 4 == 6880
    assert flash.v4.count(CSA) == 21 and flash.v4.count(HCA) == 20 and flash.v4.count(SWA) == 2
    assert pro.v4.count(CSA) == 30 and pro.v4.count(HCA) == 31


def test_v4_kv_of_one_request():
    m = get_model("deepseek-v4-flash")
    v = m.v4
    window = 43 * 128 * 512 * 2
    state = 21 * (2 * 4 * 2 * 512 * 4 + 2 * 4 * 2 * 128 * 4) + 20 * (2 * 128 * 512 * 4)
    assert m.kv_bytes_per_request() == window + state
    for ctx in (1, 127, 128, 1000, 65536):
        exact = v.kv_bytes(ctx, 2)
        linear = v.kv_bytes_per_request(2) + ctx * v.kv_bytes_per_token(2)
        assert exact <= linear + 1e-6  # the linear form never under-reserves
        if ctx >= 128:
            assert exact >= linear - 21 * (512 + 128) * 2 - 20 * 512 * 2  # off by partial entries
    assert v.kv_bytes(10, 2) < v.kv_bytes(200, 2) < v.kv_bytes(4000, 2)


def test_v4_decode_work_grows_as_the_architecture_says():
    v = get_model("deepseek-v4-flash").v4
    # short context: the window and every compressed entry; long: top-k caps CSA
    assert v.keys_per_query(64) == pytest.approx(43 * 64 + 21 * 16 + 20 * 0.5)
    assert v.keys_per_query(2 ** 20) == pytest.approx(43 * 128 + 21 * 512 + 20 * 8192)
    one, many = v.decode_bytes(1, 1, 8192, 2), v.decode_bytes(1, 8, 8192, 2)
    assert many > one  # each query gathers its own top-k
    assert v.decode_bytes(2, 2, 8192, 2) == pytest.approx(2 * one)


def test_weight_formats():
    flash = get_model("deepseek-v4-flash")
    fp4, fp8, bf16 = FORMATS["fp4-experts"], FORMATS["fp8"], FORMATS["bf16"]
    assert MXFP4_BYTES == 0.53125 and FP8_BLOCK_BYTES == pytest.approx(1.000244, abs=1e-6)
    # the FP4+FP8 checkpoint is about 160 GB (DeepSeek-V4-Flash on Hugging Face)
    assert flash.weight_bytes_as(fp4) / 1e9 == pytest.approx(155, abs=3)
    assert flash.weight_bytes_as(bf16) == pytest.approx(flash.weight_bytes(2), rel=1e-12)
    assert flash.weight_bytes_as(fp8) < flash.weight_bytes_as(bf16)
    assert served_format("fp4-experts", get_gpu("b300").fp4) is fp4
    w4a16 = FORMATS["fp4-experts-w4a16"]  # Hopper runs the FP4 experts with W4A16 kernels (Marlin)
    assert served_format("fp4-experts", get_gpu("h200").fp4) is w4a16
    assert w4a16.expert_bytes == fp4.expert_bytes and w4a16.compute == "bf16"
    assert served_format("bf16", False) is bf16


def test_v4_spec_validates_itself():
    m = get_model("deepseek-v4-flash")
    with pytest.raises(InputError):
        dataclasses.replace(m.v4, compress_ratios=(4, 7))
    with pytest.raises(InputError):
        dataclasses.replace(m, num_layers=42)  # one ratio per layer
    with pytest.raises(InputError):
        dataclasses.replace(m, weight_format="int3")


def test_every_preset_has_a_context_and_drafter():
    for name in ("qwen3-8b", "qwen3-30b-a3b", "llama-3.1-8b", "deepseek-v3", "deepseek-v4-flash"):
        m = get_model(name)
        assert m.max_context > 0
    v4 = get_model("deepseek-v4-flash")
    assert (v4.dspark_layers, v4.dspark_moe, v4.mtp_layers) == (3, True, 1)
    assert get_model("qwen3-8b").dspark_layers == 5
