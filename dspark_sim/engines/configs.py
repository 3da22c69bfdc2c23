"""Serving-engine configs of a chosen trial: SGLang, vLLM and TensorRT-LLM.

Every key is a field of the engine's released code (docs/tuning.md cites each
file and version; tests/test_engines_configs.py feeds the files to that code):

* SGLang 0.5.23 ``python -m sglang.launch_server --config sglang.yaml``: a flat
  mapping of hyphenated server flags (``srt/utils/server_args_config_parser.py``),
  flags from ``srt/arg_groups/fields/{spec,schedule,exec_}.py``.
* vLLM 0.33.0 ``vllm serve --config vllm.yaml``: engine flags with a nested
  ``speculative-config`` mapping (fields of ``vllm/config/speculative.py``
  ``SpeculativeConfig``; ``max-cudagraph-capture-size`` from ``config/compilation.py``).
* TensorRT-LLM ``trtllm-serve MODEL --extra_llm_api_options trtllm.yaml``: LLM API
  arguments with a ``speculative_config`` block (``tensorrt_llm/llmapi/llm_args.py``).

A method an engine has no field for is not written as that engine's file: the
export reports it as not expressible there instead of deploying something else.
"""
from __future__ import annotations

import warnings
from pathlib import Path

import yaml

from dspark_sim.catalog import get_model
from dspark_sim.catalog.drafters import PLACEHOLDER, has_mtp, published_drafter
from dspark_sim.engines.knobs import field
from dspark_sim.errors import InputError
from dspark_sim.metrics.outdir import atomic_write_text
from dspark_sim.scenario import Scenario
from dspark_sim.tuner.exports import SPS_FILE, STS_FILE

FORMATS = ("dspark", "sglang", "vllm", "trtllm")
# vLLM / TensorRT-LLM names of the chain and block drafters the baselines run
_VLLM_METHOD = {"eagle3": "eagle3", "mtp": "mtp", "dflash": "dflash", "dspark": "dspark"}
_TRT_TYPE = {"eagle3": "Eagle3", "mtp": "MTP", "dflash": "DFlash", "dspark": "DSpark"}
_SGL_ALGO = {"eagle3": "EAGLE3", "mtp": "NEXTN", "dflash": "DFLASH", "dspark": "DSPARK"}


def _yaml(data: dict) -> str:
    """Block-style YAML, one flag a line, in the order given."""
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False, width=100)


def _comments(lines: list[str]) -> str:
    return "".join(f"# {line}\n" if line else "#\n" for line in lines)


def drafter_checkpoint(s: Scenario) -> str | None:
    """The drafter weights an engine loads for this trial: the scenario's, else the published
    preset's (DeepSeek-V4's DSpark drafter: the target checkpoint it ships in), else
    :data:`PLACEHOLDER` (warned once); None when there is no speculation or the drafter is
    the target's own MTP layers."""
    spec = s.speculation
    if spec.method == "none":
        return None
    model = get_model(s.model).name
    if spec.drafter == "mtp" and has_mtp(model):
        return None
    if spec.drafter == "dspark" and spec.drafter_checkpoint:
        return spec.drafter_checkpoint
    preset = published_drafter(model, spec.drafter)
    if preset is not None:
        return preset.checkpoint
    warnings.warn(f"no published {spec.drafter} drafter for {s.model}: engine configs name "
                  f"{PLACEHOLDER!r}, which the engines refuse; pass --drafter PATH (or set "
                  "speculation.drafter_checkpoint)")
    return PLACEHOLDER


def check_space(space, deployment, file) -> None:
    """Refuse, when a study is created, a search space (as restricted for the engine tuned for)
    holding a value an exported engine file would refuse, or run otherwise than the simulator
    scored it: every format is exported whichever engine was tuned for. ``deployment``: the
    base scenario's, for the knobs the space leaves to it; ``file``: the space file named.

    * vLLM 0.33.0 ``SchedulerConfig.verify_max_model_len`` raises when max-num-batched-tokens <
      max-num-seqs (both split alike over data-parallel ranks, so the replica's caps decide).
    * SGLang 0.5.23 runs the DSpark confidence relay at a lag of at least one step, so a lag of 0
      would be scored but never run.
    """
    dep, dspark = space.sections["deployment"], space.sections.get("dspark", {})
    seqs = _extreme(dep.get("max_running_requests"), max, deployment.max_running_requests)
    tokens = _extreme(dep.get("max_batched_tokens"), min, deployment.max_batched_tokens)
    if tokens < seqs:
        raise InputError(file, "deployment.max_batched_tokens", tokens,
                         f"below the largest max_running_requests the space allows ({seqs}): vLLM refuses "
                         "max-num-batched-tokens < max-num-seqs; raise the one or lower the other")
    lag = _extreme(dspark.get("lag_steps"), min, 1)
    if lag < 1:
        raise InputError(file, "dspark.lag_steps", lag, "SGLang runs the confidence relay at a lag of at least "
                         "1 step, so a lag of 0 would be scored but never run: give values >= 1")


def _extreme(knob, pick, default):
    """The least or greatest (``pick``) value a knob can take; ``default`` for a knob not searched."""
    if knob is None:
        return default
    values = (knob.low, knob.high) if hasattr(knob, "low") else [v for v in knob.values if v is not None]
    return pick(values) if values else default


def not_expressible(s: Scenario, engine: str) -> str | None:
    """Why ``engine`` cannot run this trial's method, or None when it can."""
    method = s.speculation.method
    if method == "threshold":
        return ("a static confidence threshold has no field in SGLang 0.5.23, vLLM 0.33.0 or "
                "TensorRT-LLM; it is the simulator's reference baseline only")
    if method == "schedule" and engine == "sglang":
        return ("a per-batch-size draft schedule has no SGLang 0.5.23 field (--speculative-adaptive "
                "adapts to the acceptance rate, not to the batch size)")
    return None


def schedule_ranges(s: Scenario) -> list[tuple[int, int, int]]:
    """Per-batch-size rules as inclusive (first, last, block_size) batch-size ranges up to the request cap."""
    out, first = [], 1
    cap = s.deployment.max_running_requests
    for rule in s.speculation.schedule:
        last = cap if rule.max_batch_size is None else min(rule.max_batch_size, cap)
        if last >= first:
            out.append((first, last, rule.block_size))
        first = last + 1
    return out


def _write(out: Path, name: str, header: list[str], notes: list[str], data: dict) -> str:
    atomic_write_text(out / name, _comments(header + [""] + [n for n in notes if n]) + _yaml(data))
    return name


def _layout(s: Scenario, engine: str) -> dict:
    """The deployment's split and KV format as ``engine``'s flags: SGLang ``--ep-size``,
    ``--attn-dp-size`` (0.5.23 ``arg_groups/fields/parallel.py``) with ``--enable-dp-lm-head``
    (its ``speculative_hook.py`` refuses DSpark and DFlash under DP attention without it),
    ``--kv-cache-dtype``; vLLM ``enable-expert-parallel``, ``data-parallel-size`` and
    ``kv-cache-dtype`` (its DeepSeek-V4 recipe); TensorRT-LLM ``moe_expert_parallel_size``,
    ``enable_attention_dp`` (``llm_args.py``) and ``kv_cache_config.dtype``. Nothing for a
    plain TP deployment."""
    dep, fp8 = s.deployment, s.deployment.kv_cache_dtype == "fp8"
    if engine == "sglang":
        out = {"ep-size": dep.ep} if dep.ep > 1 else {}
        out.update({"attn-dp-size": dep.tp, "enable-dp-lm-head": True} if dep.dp_attention else {})
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


def _vllm_rank_caps(s: Scenario) -> tuple[int, int]:
    """vLLM's ``max-num-seqs`` and ``max-num-batched-tokens``: they apply per data-parallel
    rank (0.33.0 ``config/scheduler.py``), so under DP attention the replica's caps are split
    over its ``tp`` ranks (rounded up)."""
    dep = s.deployment
    ranks = dep.tp if dep.dp_attention else 1
    return -(-dep.max_running_requests // ranks), -(-dep.max_batched_tokens // ranks)


def _model_path(s: Scenario) -> tuple[str, str]:
    """``(checkpoint, note)``: the model's, or the one its DSpark drafter ships in."""
    model = get_model(s.model)
    if s.speculation.method == "dspark" and model.dspark_checkpoint:
        return model.dspark_checkpoint, (f"{model.dspark_checkpoint}: {model.name} with its DSpark drafter "
                                         "bundled; the drafter path names the same checkpoint")
    return model.hf_id, ""


# -- SGLang --------------------------------------------------------------------
def sglang(s: Scenario, out: Path, header: list[str], final: Path) -> str:
    """``sglang.yaml``: flat hyphenated flags for ``python -m sglang.launch_server --config``."""
    spec, dep = s.speculation, s.deployment
    path, drafter_note = _model_path(s)
    flags = {"model-path": path, "tp-size": dep.tp, **_layout(s, "sglang"),
             field("sglang", "deployment", "max_running_requests"): dep.max_running_requests,
             field("sglang", "deployment", "chunked_prefill_tokens"): dep.chunked_prefill_tokens or dep.max_batched_tokens,
             "max-prefill-tokens": dep.max_batched_tokens,
             field("sglang", "deployment", "batching"): dep.batching == "mixed",
             # per-request verify trimming needs the batch inside a captured decode graph
             "cuda-graph-max-bs-decode": dep.max_running_requests}
    prefix, prefix_note = _prefix_cache(s, "sglang")
    flags.update(prefix)
    env = []
    if spec.method != "none":
        flags["speculative-algorithm"] = _SGL_ALGO[spec.drafter]
        checkpoint = drafter_checkpoint(s)
        if checkpoint is not None:
            flags["speculative-draft-model-path"] = checkpoint
    if spec.method == "dspark":
        flags.update({field("sglang", "dspark", "block_size"): spec.block_size,
                      "speculative-dspark-sps-table-path": str((final / SPS_FILE).resolve()),
                      "speculative-dspark-confidence-sts-path": str((final / STS_FILE).resolve())})
        env = ["SGLANG_RAGGED_VERIFY_MODE=compact",
               f"{field('sglang', 'dspark', 'lag_steps')}={max(spec.lag_steps, 1)}"]
    elif spec.method == "static":
        if spec.draft_kind == "chain":
            flags.update({"speculative-num-steps": spec.block_size, "speculative-eagle-topk": 1})
        flags["speculative-num-draft-tokens"] = spec.window  # SGLang counts the anchor
    launch = " ".join(env + ["python -m sglang.launch_server --config sglang.yaml"])
    return _write(out, "sglang.yaml", header, ["Launch:", f"  {launch}", drafter_note, prefix_note], flags)


# -- vLLM ----------------------------------------------------------------------
def vllm(s: Scenario, out: Path, header: list[str], final: Path) -> str:
    """``vllm.yaml`` for ``vllm serve --config vllm.yaml`` with a ``speculative-config`` block."""
    spec, dep = s.speculation, s.deployment
    requests, tokens = _vllm_rank_caps(s)
    path, drafter_note = _model_path(s)
    args = {"model": path, "tensor-parallel-size": dep.tp, **_layout(s, "vllm"),
            field("vllm", "deployment", "max_running_requests"): requests,
            field("vllm", "deployment", "max_batched_tokens"): tokens,
            # capture sizes count tokens: R requests with full verify windows stay in a graph
            "max-cudagraph-capture-size": requests * spec.window}
    prefix, prefix_note = _prefix_cache(s, "vllm")
    args.update(prefix)
    if spec.method != "none":
        cfg = {"method": _VLLM_METHOD[spec.drafter]}
        checkpoint = drafter_checkpoint(s)
        if checkpoint is not None:
            cfg["model"] = checkpoint
        cfg[field("vllm", "dspark", "block_size")] = spec.block_size
        if spec.method == "dspark":
            cfg["enable_adaptive_verification"] = True
        if spec.method == "schedule":
            cfg["num_speculative_tokens_per_batch_size"] = [list(r) for r in schedule_ranges(s)]
        args["speculative-config"] = cfg
    notes = ["Launch:", "  vllm serve --config vllm.yaml", drafter_note, prefix_note]
    if dep.dp_attention:
        notes.append(f"max-num-seqs and max-num-batched-tokens are per data-parallel rank: the replica's "
                     f"{dep.max_running_requests} requests and {dep.max_batched_tokens} tokens over {dep.tp} ranks")
    if spec.method == "dspark":
        notes.append("vLLM profiles its own verify cost and sizes the budget itself (no SPS/STS file)")
    return _write(out, "vllm.yaml", header, notes, args)


# -- TensorRT-LLM --------------------------------------------------------------
def trtllm(s: Scenario, out: Path, header: list[str], final: Path) -> str:
    """``trtllm.yaml``: LLM API options with a ``speculative_config`` block."""
    spec, dep = s.speculation, s.deployment
    args = {"tensor_parallel_size": dep.tp, **_layout(s, "trtllm"),
            field("trtllm", "deployment", "max_running_requests"): dep.max_running_requests,
            field("trtllm", "deployment", "max_batched_tokens"): dep.max_batched_tokens, "enable_chunked_prefill": True,
            "cuda_graph_config": {"max_batch_size": dep.max_running_requests, "enable_padding": True}}
    prefix, prefix_note = _prefix_cache(s, "trtllm")
    args["kv_cache_config"] = {**args.get("kv_cache_config", {}), **prefix["kv_cache_config"]}
    if spec.method != "none":
        cfg = {"decoding_type": _TRT_TYPE[spec.drafter], field("trtllm", "dspark", "block_size"): spec.block_size}
        checkpoint = drafter_checkpoint(s)
        if checkpoint is not None:
            cfg["speculative_model"] = checkpoint
        if spec.method == "dspark":
            cfg["block_size"] = spec.block_size
        if spec.method == "schedule":
            # keys are batch-size bounds; above the largest key TensorRT-LLM stops drafting,
            # so the open last bucket is keyed at the request cap
            ranges = schedule_ranges(s)
            cfg["max_draft_len"] = ranges[0][2]
            cfg["draft_len_schedule"] = {last: size for _, last, size in ranges}
        if spec.drafter == "mtp":  # MTPDecodingConfig sets max_draft_len from this field (default 1)
            cfg["num_nextn_predict_layers"] = cfg["max_draft_len"]
        args["speculative_config"] = cfg
    path, drafter_note = _model_path(s)
    notes = ["Launch:", f"  trtllm-serve {path} --extra_llm_api_options trtllm.yaml", drafter_note, prefix_note]
    if spec.method == "dspark":
        notes.append("DSparkDecodingConfig verifies the whole block (no confidence scheduling field)")
    return _write(out, "trtllm.yaml", header, notes, args)


WRITERS = {"sglang": sglang, "vllm": vllm, "trtllm": trtllm}
