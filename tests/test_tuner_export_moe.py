"""Engine exports of an expert-parallel, DP-attention DeepSeek-V4 deployment: the layout's
flags and the checkpoint with V4's DSpark drafter bundled, named as the drafter too."""
from __future__ import annotations

from dataclasses import replace

import yaml
from conftest import EXAMPLES

from dspark_sim.scenario import load_scenario
from dspark_sim.engines import configs


def export(s, fmt, tmp_path):
    name = getattr(configs, fmt)(s, tmp_path, ["test"], tmp_path)
    return yaml.safe_load((tmp_path / name).read_text()), (tmp_path / name).read_text()


def test_v4_layout_in_every_engine(tmp_path):
    s = load_scenario(EXAMPLES / "v4_flash_b300.yaml")
    flags, text = export(s, "sglang", tmp_path)
    assert flags["model-path"] == "deepseek-ai/DeepSeek-V4-Flash-DSpark" and "bundled" in text
    assert flags["speculative-draft-model-path"] == flags["model-path"]  # what SGLang resolves it to
    assert (flags["tp-size"], flags["ep-size"], flags["attn-dp-size"]) == (8, 8, 8)
    assert flags["enable-dp-lm-head"] is True  # SGLang refuses DSpark under DP attention without it
    assert flags["kv-cache-dtype"] == "fp8_e4m3" and flags["speculative-dspark-block-size"] == 5
    args, _ = export(s, "vllm", tmp_path)
    assert (args["tensor-parallel-size"], args["data-parallel-size"], args["enable-expert-parallel"]) == (1, 8, True)
    assert args["speculative-config"]["model"] == "deepseek-ai/DeepSeek-V4-Flash-DSpark"
    # vLLM's request and token caps are per data-parallel rank: the replica's 512 and 16384 over 8
    assert (args["max-num-seqs"], args["max-num-batched-tokens"]) == (64, 2048)
    assert args["kv-cache-dtype"] == "fp8"
    opts, _ = export(s, "trtllm", tmp_path)
    assert (opts["moe_expert_parallel_size"], opts["enable_attention_dp"]) == (8, True)
    assert opts["kv_cache_config"] == {"dtype": "fp8", "enable_block_reuse": True}
    assert opts["speculative_config"]["speculative_model"] == "deepseek-ai/DeepSeek-V4-Flash-DSpark"


def test_plain_tp_adds_no_layout_flags(tmp_path):
    s = load_scenario(EXAMPLES / "v4_flash_b300.yaml")
    s = replace(s, deployment=replace(s.deployment, ep=1, dp_attention=False, kv_cache_dtype="bf16"),
                speculation=replace(s.speculation, method="static", drafter="mtp"))
    flags, _ = export(s, "sglang", tmp_path)
    assert not {"ep-size", "attn-dp-size", "enable-dp-lm-head", "kv-cache-dtype"} & set(flags)
    assert flags["model-path"] == "deepseek-ai/DeepSeek-V4-Flash"  # MTP: the plain checkpoint
    assert "speculative-draft-model-path" not in flags  # the target's own MTP layer drafts


def test_exports_keep_the_prefix_cache_as_priced_and_say_so(tmp_path):
    """On (every engine's default) is kept and said; off is each engine's switch."""
    s = load_scenario(EXAMPLES / "sessions_mooncake_h200.yaml")
    flags, text = export(s, "sglang", tmp_path)
    assert "disable-radix-cache" not in flags and "prefix cache (radix cache): on" in text
    args, text = export(s, "vllm", tmp_path)
    assert args["enable-prefix-caching"] is True and "prefix caching: on" in text
    opts, text = export(s, "trtllm", tmp_path)
    assert opts["kv_cache_config"] == {"enable_block_reuse": True} and "(prefix cache): on" in text
    off = replace(s, deployment=replace(s.deployment, prefix_cache=False))
    assert export(off, "sglang", tmp_path)[0]["disable-radix-cache"] is True
    args, text = export(off, "vllm", tmp_path)
    assert "enable-prefix-caching" not in args and "--no-enable-prefix-caching" in text
    assert export(off, "trtllm", tmp_path)[0]["kv_cache_config"] == {"enable_block_reuse": False}
