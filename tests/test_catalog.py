"""Model presets and GPU catalog: hand-computed sizes and input errors."""
from __future__ import annotations

import dataclasses

import pytest

from dspark_sim.catalog import GPUS, MODELS, GpuSpec, get_gpu, get_model
from dspark_sim.errors import InputError


def test_qwen3_8b_params_match_hand_count():
    m = get_model("qwen3-8b")
    embed = 151936 * 4096
    attn = 4096 * 32 * 128 + 2 * 4096 * 8 * 128 + 32 * 128 * 4096
    layer = attn + 3 * 4096 * 12288 + 2 * 4096 + 2 * 128  # + two pre-norms + q/k norm
    assert m.param_count == 36 * layer + 2 * embed + 4096 == 8_190_735_360
    assert m.active_param_count == m.param_count
    assert m.weight_bytes() == 2 * m.param_count
    assert m.weight_bytes(dtype_bytes=1) == m.param_count


def test_qwen3_8b_kv_and_flops():
    m = get_model("qwen3-8b")
    assert m.kv_bytes_per_token() == 2 * 36 * 8 * 128 * 2 == 147456
    assert m.kv_bytes_per_token(dtype_bytes=1) == 73728
    assert m.attn_flops_per_token_per_ctx() == 2 * 2 * 36 * 32 * 128
    norms = 36 * (2 * 4096 + 256) + 4096
    embed = 151936 * 4096
    assert m.linear_flops_per_token() == 2 * (m.param_count - norms - embed)


@pytest.mark.parametrize("name, params", [
    ("qwen3-4b", 4_022_468_096),        # tied embeddings
    ("llama-3.1-8b", 8_030_261_248),     # Meta's published count
    ("llama-3.1-70b", 70_553_706_496),
])
def test_dense_param_counts(name, params):
    assert MODELS[name].param_count == params


def test_qwen3_30b_a3b_moe_counts():
    m = get_model("Qwen3-30B-A3B")
    assert m.param_count == pytest.approx(30.53e9, rel=1e-3)
    assert m.active_param_count == pytest.approx(3.35e9, rel=1e-2)
    assert m.kv_bytes_per_token() == 2 * 48 * 4 * 128 * 2
    # Linear FLOPs follow active, not total, parameters.
    assert m.linear_flops_per_token() < 2 * m.active_param_count


def test_moe_activated_weight_bytes_grows_to_full():
    m = MODELS["qwen3-30b-a3b"]
    expert = 3 * 2048 * 768
    routed = 48 * 128 * expert
    one = m.activated_weight_bytes(1)
    assert one == 2 * (m.param_count - routed + 48 * 8 * expert)
    assert m.activated_weight_bytes(0) == 2 * (m.param_count - routed)
    n = 16
    expected = m.param_count - routed + routed * (1 - (1 - 8 / 128) ** n)
    assert m.activated_weight_bytes(n) == round(2 * expected)
    sizes = [m.activated_weight_bytes(n) for n in (1, 4, 16, 64, 256, 4096)]
    assert sizes == sorted(sizes)
    assert sizes[-1] == pytest.approx(m.weight_bytes(), rel=1e-9)


def test_dense_activated_weight_bytes_is_weight_bytes():
    m = MODELS["llama-3.1-70b"]
    assert m.activated_weight_bytes(1) == m.activated_weight_bytes(512) == m.weight_bytes()
    with pytest.raises(ValueError):
        m.activated_weight_bytes(-1)


def test_deepseek_v3_mla_and_moe():
    m = get_model("deepseek-ai/DeepSeek-V3")
    assert m.name == "deepseek-v3"
    assert m.kv_bytes_per_token() == 61 * (512 + 64) * 2 == 70272
    assert m.param_count == pytest.approx(671e9, rel=2e-3)
    assert m.active_param_count == pytest.approx(37e9, rel=2e-2)
    assert m.num_moe_layers == 58
    assert m.attn_flops_per_token_per_ctx() == 2 * 61 * 128 * (512 + 64 + 512)


def test_every_preset_cites_its_config():
    for name, m in MODELS.items():
        assert m.name == name
        assert m.source == f"huggingface.co/{m.hf_id}/config.json"
        assert m.param_count >= m.active_param_count > 0


def test_get_model_is_case_insensitive_and_names_known_models(tmp_path):
    assert get_model(" QWEN3-14B ") is MODELS["qwen3-14b"]
    with pytest.raises(InputError) as err:
        get_model("qwen9-1t", file=tmp_path / "s.yaml", key="model")
    assert err.value.key == "model" and err.value.value == "qwen9-1t"
    assert "qwen3-8b" in str(err.value) and "s.yaml" in str(err.value)


@pytest.mark.parametrize("change, key", [
    ({"num_kv_heads": 7}, "num_heads"),
    ({"num_layers": 0}, "num_layers"),
    ({"hidden_size": 4096.0}, "hidden_size"),
    ({"experts_per_token": 2}, "num_experts"),
    ({"rope_head_dim": 64}, "kv_lora_rank"),
])
def test_model_spec_validates_itself(change, key):
    base = MODELS["qwen3-8b"]
    with pytest.raises(InputError) as err:
        dataclasses.replace(base, **change)
    assert key in err.value.key


def test_moe_spec_validates_experts():
    base = MODELS["qwen3-30b-a3b"]
    with pytest.raises(InputError):
        dataclasses.replace(base, experts_per_token=129)
    with pytest.raises(InputError):
        dataclasses.replace(base, first_dense_layers=48)


def test_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        MODELS["qwen3-8b"].num_layers = 1


def test_gpu_catalog_dense_numbers():
    h100, h200 = get_gpu("H100"), get_gpu("h200")
    assert h100.bf16_flops == h200.bf16_flops == pytest.approx(989.5e12)
    assert h200.fp8_flops == 2 * h200.bf16_flops
    assert h200.hbm_bytes_per_s == 4.8e12 and h100.hbm_bytes_per_s == 3.35e12
    assert h200.memory_bytes == 141 * 2**30
    assert 200 < h200.ridge_flops_per_byte() < 210  # DSPARK.md section 7
    assert get_gpu("b300").memory_bytes == 288 * 2**30
    assert get_gpu("b200").bf16_flops == 2.25e15
    assert get_gpu("a100").nvlink_unidir_bytes_per_s == 300e9
    assert set(GPUS) == {"a100", "h100", "h200", "b200", "b300"}
    assert all(g.source for g in GPUS.values())


def test_get_gpu_unknown():
    with pytest.raises(InputError) as err:
        get_gpu("v100", file="x.yaml")
    assert err.value.key == "gpu" and "h200" in str(err.value)


def test_gpu_spec_validates_itself():
    with pytest.raises(InputError):
        GpuSpec("bad", 0, 1e12, 1e12, 1e12, 1e11, "test")
    with pytest.raises(InputError):
        GpuSpec("bad", 2**30, 1e12, -1.0, 1e12, 1e11, "test")
