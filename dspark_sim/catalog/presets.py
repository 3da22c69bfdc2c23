"""The model presets: each copies its Hugging Face ``config.json`` (cited in ``source``).

``config_copy`` names the public copy the numbers were read from, where the
configuration is gated or new: NVIDIA's aiconfigurator ships the configs of the
models it plans for (``model_configs/``). ``tests/data/model_configs`` holds those
copies, and ``tests/test_catalog_moe.py`` checks every field against them.
"""
from __future__ import annotations

from dspark_sim.catalog.models import ModelSpec
from dspark_sim.catalog.v4 import CSA, HCA, SWA, CompressedAttention
from dspark_sim.errors import InputError

AICONFIGURATOR = ("github.com/ai-dynamo/aiconfigurator@095f58a51c4ca8e61b66ec108d86f223f8d559ce/"
                  "aic-core/src/aiconfigurator_core/model_configs/")


def _hf(hf_id: str) -> str:
    return f"huggingface.co/{hf_id}/config.json"


def _copy(hf_id: str) -> str:
    return AICONFIGURATOR + hf_id.replace("/", "--") + "_config.json"


def _qwen3(name: str, hf_id: str, layers: int, hidden: int, heads: int, kv_heads: int,
           intermediate: int, tie: bool) -> ModelSpec:
    """A dense Qwen3: head_dim 128, vocab 151936, QK-norm, eps 1e-6, rope_theta 1e6, 40960 positions."""
    return ModelSpec(name, hf_id, layers, hidden, heads, kv_heads, 128, intermediate, 151936, tie,
                     qk_norm=True, max_context=40960, source=_hf(hf_id))


def _qwen3_moe(name: str, hf_id: str, layers: int, hidden: int, heads: int, intermediate: int,
               moe_intermediate: int) -> ModelSpec:
    """A Qwen3 MoE: 128 experts, 8 a token, no shared expert, 4 KV heads of 128, QK-norm."""
    return ModelSpec(name, hf_id, num_layers=layers, hidden_size=hidden, num_heads=heads, num_kv_heads=4,
                     head_dim=128, intermediate_size=intermediate, vocab_size=151936, tie_embeddings=False,
                     num_experts=128, experts_per_token=8, moe_intermediate_size=moe_intermediate,
                     qk_norm=True, max_context=40960, source=_hf(hf_id), config_copy=_copy(hf_id))


def _llama31(name: str, hf_id: str, layers: int, hidden: int, heads: int, intermediate: int) -> ModelSpec:
    """A Llama 3.1: 8 KV heads of 128, vocab 128256, untied, eps 1e-5, rope_theta 5e5."""
    return ModelSpec(name, hf_id, layers, hidden, heads, 8, 128, intermediate, 128256, False,
                     rms_norm_eps=1e-5, rope_theta=500000.0, max_context=131072, source=_hf(hf_id))


def _deepseek_v4(name: str, hf_id: str, layers: int, hidden: int, heads: int, experts: int,
                 moe_intermediate: int, q_rank: int, o_groups: int, topk: int,
                 ratios: tuple[int, ...], dspark: str = "") -> ModelSpec:
    """A DeepSeek-V4: every layer MoE (top 6, one shared expert), one KV head of 512, MTP-1,
    FP4 experts and FP8 projections, 1M positions; its DSpark drafter is 3 MoE layers
    (DSPARK.md section 1: DeepSeek-V4 production)."""
    attention = CompressedAttention(num_heads=heads, head_dim=512, rope_head_dim=64, q_lora_rank=q_rank,
                                    o_lora_rank=1024, o_groups=o_groups, sliding_window=128,
                                    compress_ratios=ratios, index_heads=64, index_head_dim=128,
                                    index_topk=topk, hc_mult=4, hc_sinkhorn_iters=20, hash_layers=3)
    return ModelSpec(name, hf_id, num_layers=layers, hidden_size=hidden, num_heads=heads, num_kv_heads=1,
                     head_dim=512, intermediate_size=moe_intermediate, vocab_size=129280,
                     tie_embeddings=False, num_experts=experts, experts_per_token=6,
                     moe_intermediate_size=moe_intermediate, num_shared_experts=1, rope_theta=10000.0,
                     max_context=1048576, weight_format="fp4-experts", v4=attention, mtp_layers=1,
                     dspark_layers=3, dspark_moe=True, source=_hf(hf_id), config_copy=_copy(hf_id),
                     dspark_checkpoint=dspark)


# DeepSeek-V4-Flash with its DSpark module attached: the V4-Flash-0731 model card says it "has the
# same model structure as DeepSeek-V4-Flash-DSpark, i.e. it comes with a speculative decoding
# module attached", and SGLang needs no --speculative-draft-model-path for it.
V4_FLASH_DSPARK = "deepseek-ai/DeepSeek-V4-Flash-DSpark"
# compress_ratios of config.json, less their last entry (the MTP layer's)
V4_FLASH_RATIOS = (SWA, SWA) + (CSA, HCA) * 20 + (CSA,)
V4_PRO_RATIOS = (HCA, HCA) + (CSA, HCA) * 29 + (CSA,)

PRESETS = (
    _qwen3("qwen3-4b", "Qwen/Qwen3-4B", 36, 2560, 32, 8, 9728, tie=True),
    _qwen3("qwen3-8b", "Qwen/Qwen3-8B", 36, 4096, 32, 8, 12288, tie=False),
    _qwen3("qwen3-14b", "Qwen/Qwen3-14B", 40, 5120, 40, 8, 17408, tie=False),
    _qwen3("qwen3-32b", "Qwen/Qwen3-32B", 64, 5120, 64, 8, 25600, tie=False),
    _qwen3_moe("qwen3-30b-a3b", "Qwen/Qwen3-30B-A3B", 48, 2048, 32, 6144, 768),
    _qwen3_moe("qwen3-235b-a22b", "Qwen/Qwen3-235B-A22B", 94, 4096, 64, 12288, 1536),
    _llama31("llama-3.1-8b", "meta-llama/Llama-3.1-8B", 32, 4096, 32, 14336),
    _llama31("llama-3.1-70b", "meta-llama/Llama-3.1-70B", 80, 8192, 64, 28672),
    # num_key_value_heads=128 in config.json; MLA caches the latent, not per-head K/V.
    ModelSpec("deepseek-v3", "deepseek-ai/DeepSeek-V3", num_layers=61, hidden_size=7168, num_heads=128,
              num_kv_heads=128, head_dim=128, intermediate_size=18432, vocab_size=129280,
              tie_embeddings=False, num_experts=256, experts_per_token=8, moe_intermediate_size=2048,
              num_shared_experts=1, first_dense_layers=3, kv_lora_rank=512, rope_head_dim=64,
              q_lora_rank=1536, rms_norm_eps=1e-6, rope_theta=10000.0, max_context=163840,
              weight_format="fp8", mtp_layers=1, source=_hf("deepseek-ai/DeepSeek-V3")),
    _deepseek_v4("deepseek-v4-flash", "deepseek-ai/DeepSeek-V4-Flash", 43, 4096, 64, 256, 2048, 1024, 8, 512,
                 V4_FLASH_RATIOS, dspark=V4_FLASH_DSPARK),
    _deepseek_v4("deepseek-v4-pro", "deepseek-ai/DeepSeek-V4-Pro", 61, 7168, 128, 384, 3072, 1536, 16, 1024,
                 V4_PRO_RATIOS),
)

MODELS: dict[str, ModelSpec] = {m.name: m for m in PRESETS}


def get_model(name: str, *, file=None, key: str = "model") -> ModelSpec:
    """The preset called ``name`` (a key of MODELS or a Hugging Face id), case-insensitive."""
    if isinstance(name, str):
        wanted = name.strip().lower()
        for spec in PRESETS:
            if wanted in (spec.name, spec.hf_id.lower()):
                return spec
    raise InputError(file, key, name, f"unknown model; known: {', '.join(MODELS)}")
