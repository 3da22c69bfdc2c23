"""Serving-engine configs of a chosen trial: SGLang, vLLM and TensorRT-LLM.

Field names were checked against each engine's source (docs/tuning.md cites
the files and commits). A tuned knob an engine has no field for is written as
a YAML comment, never as an invented key: each engine rejects unknown keys.

* SGLang ``--config sglang.yaml``: a flat mapping of hyphenated server flags
  (``server_args_config_parser.py``); flags from ``server_args.py``.
* vLLM ``vllm serve --config vllm.yaml``: flat engine flags with a nested
  ``speculative-config`` mapping (``vllm/utils/argparse_utils.py``); fields
  from ``vllm/config/speculative.py`` and ``vllm/config/scheduler.py``.
* TensorRT-LLM ``trtllm-serve --extra_llm_api_options trtllm.yaml``: LLM API
  arguments with a ``speculative_config`` block (``tensorrt_llm/llmapi/llm_args.py``).
"""
from __future__ import annotations

from pathlib import Path

import yaml

from dspark_sim.catalog import get_model
from dspark_sim.metrics.outdir import atomic_write_text
from dspark_sim.scenario import Scenario
from dspark_sim.tuner.exports import SPS_FILE, STS_FILE

FORMATS = ("dspark", "sglang", "vllm", "trtllm")


def _yaml(data: dict) -> str:
    """Block-style YAML, one flag a line, in the order given."""
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False, width=100)


def _comments(lines: list[str]) -> str:
    return "".join(f"# {line}\n" if line else "#\n" for line in lines)


def _schedule_ranges(s: Scenario) -> list[tuple[int, int, int]]:
    """Per-batch-size rules as inclusive (first, last, k) batch-size ranges."""
    out, first = [], 1
    cap = s.deployment.max_running_requests
    for rule in s.speculation.schedule:
        last = cap if rule.max_batch_size is None else min(rule.max_batch_size, cap)
        if last >= first:
            out.append((first, last, rule.block_size))
        first = last + 1
    return out


def _untunable(s: Scenario, engine: str) -> list[str]:
    """Tuned DSpark knobs ``engine`` has no field for, as comment lines."""
    spec = s.speculation
    if spec.method != "dspark":
        return []
    lines = [f"tuned knobs {engine} has no field for (set them in the engine's code or accept its default):",
             f"  scheduler={spec.scheduler} min_verify_len={spec.min_verify_len} "
             f"max_verify_len={spec.verify_cap} survival_eps={spec.survival_eps:g}"]
    if spec.scheduler == "algorithm1":
        lines.append("  Algorithm 1 (paper) has no engine switch: engines run the production scheduler")
    return lines


def _layout(s: Scenario, engine: str) -> dict:
    """The deployment's split and KV format as ``engine``'s flags: SGLang ``--ep-size``,
    ``--attn-dp-size`` (0.5.23 ``arg_groups/fields/parallel.py``), ``--kv-cache-dtype``;
    vLLM ``enable-expert-parallel``, ``data-parallel-size`` and ``kv-cache-dtype`` (its
    DeepSeek-V4 recipe); TensorRT-LLM ``moe_expert_parallel_size``, ``enable_attention_dp``
    (``llm_args.py``) and ``kv_cache_config.dtype``. Nothing for a plain TP deployment."""
    dep, fp8 = s.deployment, s.deployment.kv_cache_dtype == "fp8"
    if engine == "sglang":
        out = {"ep-size": dep.ep} if dep.ep > 1 else {}
        out.update({"attn-dp-size": dep.tp} if dep.dp_attention else {})
        return {**out, **({"kv-cache-dtype": "fp8_e4m3"} if fp8 else {})}
    if engine == "vllm":  # DP attention: one data-parallel rank a GPU, experts over all of them
        out = {"tensor-parallel-size": 1, "data-parallel-size": dep.tp} if dep.dp_attention else {}
        out.update({"enable-expert-parallel": True} if dep.ep > 1 else {})
        return {**out, **({"kv-cache-dtype": "fp8"} if fp8 else {})}
    out = {"moe_expert_parallel_size": dep.ep} if dep.ep > 1 else {}
    out.update({"enable_attention_dp": True} if dep.dp_attention else {})
    return {**out, **({"kv_cache_config": {"dtype": "fp8"}} if fp8 else {})}


def _prefix_cache(s: Scenario, engine: str) -> tuple[dict, str]:
    """``(flags, note)``: the engine's prefix cache as the scenario priced it. On is every
    engine's default (SGLang's radix cache, vLLM's ``enable_prefix_caching`` in
    ``vllm/config/cache.py``, TensorRT-LLM's ``KvCacheConfig.enable_block_reuse``), written
    out where a flag exists; off is SGLang ``--disable-radix-cache``, vLLM
    ``--no-enable-prefix-caching`` and ``enable_block_reuse: false``."""
    on = s.deployment.prefix_cache
    state = "on, as the simulator priced prompts" if on else "off, as the simulator priced prompts (in full)"
    if engine == "sglang":
        return ({} if on else {"disable-radix-cache": True}), f"prefix cache (radix cache): {state}"
    if engine == "vllm":
        note = f"prefix caching: {state}" + ("" if on else "; launch with --no-enable-prefix-caching")
        return ({"enable-prefix-caching": True} if on else {}), note
    return {"kv_cache_config": {"enable_block_reuse": on}}, f"KV block reuse (prefix cache): {state}"


def _model_path(s: Scenario) -> tuple[str, str]:
    """``(checkpoint, note)``: the model's, or the one with its DSpark drafter bundled."""
    model = get_model(s.model)
    if s.speculation.method == "dspark" and model.dspark_checkpoint:
        return model.dspark_checkpoint, (f"{model.dspark_checkpoint}: {model.name} with its DSpark drafter "
                                         "bundled (no --speculative-draft-model-path)")
    return model.hf_id, ("Add --speculative-draft-model-path DRAFTER when the drafter is not bundled "
                         "with the target.")


# -- SGLang --------------------------------------------------------------------
def sglang(s: Scenario, out: Path, header: list[str], final: Path) -> str:
    """``sglang.yaml``: flat hyphenated flags for ``python -m sglang.launch_server --config``."""
    spec, dep = s.speculation, s.deployment
    path, drafter_note = _model_path(s)
    flags = {"model-path": path, "tp-size": dep.tp, **_layout(s, "sglang"),
             "max-running-requests": dep.max_running_requests,
             "chunked-prefill-size": dep.chunked_prefill_tokens or dep.max_batched_tokens,
             "max-prefill-tokens": dep.max_batched_tokens}
    prefix, prefix_note = _prefix_cache(s, "sglang")
    flags.update(prefix)
    env = []
    notes = [prefix_note]
    if spec.method == "dspark":
        flags.update({"speculative-algorithm": "DSPARK", "speculative-dspark-block-size": spec.block_size,
                      "speculative-dspark-sps-table-path": str((final / SPS_FILE).resolve()),
                      "speculative-dspark-confidence-sts-path": str((final / STS_FILE).resolve())})
        if spec.pad_to_graph_tier:
            flags["speculative-dspark-align-verify-tokens-to-graph-tier"] = True
            notes.append(f"graph tiers tuned: {list(spec.graph_tiers)} (SGLang pads to its captured buckets)")
        env = ["SGLANG_RAGGED_VERIFY_MODE=compact",
               f"SGLANG_DSPARK_CONFIDENCE_RELAY_LAG_STEPS={max(spec.lag_steps, 1)}"]
        if spec.scheduler == "production" and spec.lag_steps < 1:
            notes.append("SGLang clamps the relay lag to >= 1 step (tuned: 0)")
    elif spec.method in ("static", "schedule"):
        k = spec.block_size
        flags.update({"speculative-algorithm": "EAGLE", "speculative-num-steps": k,
                      "speculative-eagle-topk": 1, "speculative-num-draft-tokens": k + 1})
        if spec.method == "schedule":
            flags["speculative-adaptive"] = True
            notes.append(f"per-batch-size k tuned: {_schedule_ranges(s)} (first, last, k); SGLang's "
                         "--speculative-adaptive-config JSON format is not confirmed here: write it by hand")
    elif spec.method == "threshold":
        notes.append(f"static confidence threshold {spec.threshold:g}, gamma {spec.block_size}: no SGLang "
                     "server flag for it confirmed in server_args.py; run DSPARK with "
                     "SGLANG_RAGGED_VERIFY_MODE=static and a patched threshold")
    launch = " ".join(env + ["python -m sglang.launch_server --config sglang.yaml"])
    text = _comments(header + ["", "Launch:", f"  {launch}", drafter_note]
                     + notes + _untunable(s, "SGLang")) + _yaml(flags)
    atomic_write_text(out / "sglang.yaml", text)
    return "sglang.yaml"


# -- vLLM ----------------------------------------------------------------------
def vllm(s: Scenario, out: Path, header: list[str], final: Path) -> str:
    """``vllm.yaml`` for ``vllm serve --config vllm.yaml`` with a ``speculative-config`` block."""
    spec, dep = s.speculation, s.deployment
    args = {"model": _model_path(s)[0], "tensor-parallel-size": dep.tp, **_layout(s, "vllm"),
            "max-num-seqs": dep.max_running_requests, "max-num-batched-tokens": dep.max_batched_tokens}
    if dep.chunked_prefill_tokens:
        args["long-prefill-token-threshold"] = dep.chunked_prefill_tokens
    prefix, prefix_note = _prefix_cache(s, "vllm")
    args.update(prefix)
    notes = [prefix_note]
    if spec.method == "dspark":
        args["speculative-config"] = {"method": "dspark", "num_speculative_tokens": spec.block_size,
                                      "enable_adaptive_verification": True}
        notes.append("vLLM sizes the adaptive budget itself: the SPS/STS tables are SGLang's format")
    elif spec.method in ("static", "schedule"):
        cfg = {"method": "mtp", "num_speculative_tokens": spec.block_size}
        if spec.method == "schedule":
            cfg["num_speculative_tokens_per_batch_size"] = [list(r) for r in _schedule_ranges(s)]
        args["speculative-config"] = cfg
    elif spec.method == "threshold":
        notes.append(f"static confidence threshold {spec.threshold:g}: no vLLM field; closest is "
                     "method dspark with enable_adaptive_verification")
    text = _comments(header + ["", "Launch:", "  vllm serve --config vllm.yaml",
                               "long-prefill-token-threshold caps one request's prefill chunk; the "
                               "simulator's chunked_prefill_tokens caps a step's prefill tokens"]
                     + notes + _untunable(s, "vLLM")) + _yaml(args)
    atomic_write_text(out / "vllm.yaml", text)
    return "vllm.yaml"


# -- TensorRT-LLM --------------------------------------------------------------
def trtllm(s: Scenario, out: Path, header: list[str], final: Path) -> str:
    """``trtllm.yaml``: LLM API options with a ``speculative_config`` block."""
    spec, dep = s.speculation, s.deployment
    args = {"tensor_parallel_size": dep.tp, **_layout(s, "trtllm"), "max_batch_size": dep.max_running_requests,
            "max_num_tokens": dep.max_batched_tokens, "enable_chunked_prefill": True}
    prefix, prefix_note = _prefix_cache(s, "trtllm")
    args["kv_cache_config"] = {**args.get("kv_cache_config", {}), **prefix["kv_cache_config"]}
    notes = [prefix_note]
    if spec.method == "dspark":
        args["speculative_config"] = {"decoding_type": "DSpark", "max_draft_len": spec.block_size,
                                      "block_size": spec.block_size}
        tiers = list(spec.graph_tiers) if spec.pad_to_graph_tier else None
        notes += ["Confidence scheduling: upstream DSparkDecodingConfig (llm_args.py) has no field for it",
                  "yet; DSpark branches name these (add them under speculative_config there):",
                  "  enable_confidence_scheduling: true", "  enable_ragged_verify: true",
                  f"  confidence_sps_table_path: {(final / SPS_FILE).resolve()}",
                  f"  confidence_sts_path: {(final / STS_FILE).resolve()}"]
        if tiers:
            notes.append(f"  confidence_verify_len_tiers: {tiers}")
    elif spec.method in ("static", "schedule"):
        cfg = {"decoding_type": "MTP", "max_draft_len": spec.block_size}
        if spec.method == "schedule":
            cfg["draft_len_schedule"] = {last: k for _, last, k in _schedule_ranges(s)}
        args["speculative_config"] = cfg
    elif spec.method == "threshold":
        notes.append(f"static confidence threshold {spec.threshold:g}: no TensorRT-LLM field")
    text = _comments(header + ["", "Launch:", f"  trtllm-serve {_model_path(s)[0]} "
                               "--extra_llm_api_options trtllm.yaml"]
                     + notes + _untunable(s, "TensorRT-LLM")) + _yaml(args)
    atomic_write_text(out / "trtllm.yaml", text)
    return "trtllm.yaml"
