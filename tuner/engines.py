"""Serving-engine configs of a chosen trial: SGLang, vLLM and TensorRT-LLM.

Every key is a field of the engine's released code (docs/tuning.md cites each
file and version; tests/test_tuner_engines.py feeds the files to that code):

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
from dspark_sim.catalog.drafters import PLACEHOLDER, published_drafter
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
    preset's, else :data:`PLACEHOLDER` (warned once); None when the target drafts for itself
    (no speculation, or MTP layers inside the target checkpoint)."""
    spec = s.speculation
    if spec.method == "none":
        return None
    if spec.drafter == "dspark" and spec.drafter_checkpoint:
        return spec.drafter_checkpoint
    preset = published_drafter(get_model(s.model).name, spec.drafter)
    if preset is not None:
        return None if spec.drafter == "mtp" else preset.checkpoint
    warnings.warn(f"no published {spec.drafter} drafter for {s.model}: engine configs name "
                  f"{PLACEHOLDER!r}, which the engines refuse; pass --drafter PATH (or set "
                  "speculation.drafter_checkpoint)")
    return PLACEHOLDER


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
    """Per-batch-size rules as inclusive (first, last, k) batch-size ranges up to the request cap."""
    out, first = [], 1
    cap = s.deployment.max_running_requests
    for rule in s.speculation.schedule:
        last = cap if rule.max_batch_size is None else min(rule.max_batch_size, cap)
        if last >= first:
            out.append((first, last, rule.num_draft_tokens))
        first = last + 1
    return out


def verify_window(s: Scenario) -> int:
    """Tokens one request verifies at most per step (drafts + the anchor); 1 without speculation."""
    return 1 if s.speculation.method == "none" else s.speculation.block_size + 1


def _write(out: Path, name: str, header: list[str], notes: list[str], data: dict) -> str:
    atomic_write_text(out / name, _comments(header + [""] + notes) + _yaml(data))
    return name


# -- SGLang --------------------------------------------------------------------
def sglang(s: Scenario, out: Path, header: list[str], final: Path) -> str:
    """``sglang.yaml``: flat hyphenated flags for ``python -m sglang.launch_server --config``."""
    spec, dep = s.speculation, s.deployment
    flags = {"model-path": get_model(s.model).hf_id, "tp-size": dep.tp,
             "max-running-requests": dep.max_running_requests,
             "chunked-prefill-size": dep.chunked_prefill_tokens or dep.max_batched_tokens,
             "max-prefill-tokens": dep.max_batched_tokens,
             "enable-mixed-chunk": dep.batching == "mixed",
             # per-request verify trimming needs the batch inside a captured decode graph
             "cuda-graph-max-bs-decode": dep.max_running_requests}
    env = []
    if spec.method != "none":
        flags["speculative-algorithm"] = _SGL_ALGO[spec.drafter]
        checkpoint = drafter_checkpoint(s)
        if checkpoint is not None:
            flags["speculative-draft-model-path"] = checkpoint
    if spec.method == "dspark":
        flags.update({"speculative-dspark-block-size": spec.block_size,
                      "speculative-dspark-sps-table-path": str((final / SPS_FILE).resolve()),
                      "speculative-dspark-confidence-sts-path": str((final / STS_FILE).resolve())})
        env = ["SGLANG_RAGGED_VERIFY_MODE=compact",
               f"SGLANG_DSPARK_CONFIDENCE_RELAY_LAG_STEPS={max(spec.lag_steps, 1)}"]
    elif spec.method == "static":
        k = spec.block_size
        if spec.draft_kind == "chain":
            flags.update({"speculative-num-steps": k, "speculative-eagle-topk": 1})
        flags["speculative-num-draft-tokens"] = k + 1
    launch = " ".join(env + ["python -m sglang.launch_server --config sglang.yaml"])
    return _write(out, "sglang.yaml", header, ["Launch:", f"  {launch}"], flags)


# -- vLLM ----------------------------------------------------------------------
def vllm(s: Scenario, out: Path, header: list[str], final: Path) -> str:
    """``vllm.yaml`` for ``vllm serve --config vllm.yaml`` with a ``speculative-config`` block."""
    spec, dep = s.speculation, s.deployment
    args = {"model": get_model(s.model).hf_id, "tensor-parallel-size": dep.tp,
            "max-num-seqs": dep.max_running_requests, "max-num-batched-tokens": dep.max_batched_tokens,
            # capture sizes count tokens: R requests with full verify windows stay in a graph
            "max-cudagraph-capture-size": dep.max_running_requests * verify_window(s)}
    if spec.method != "none":
        cfg = {"method": _VLLM_METHOD[spec.drafter]}
        checkpoint = drafter_checkpoint(s)
        if checkpoint is not None:
            cfg["model"] = checkpoint
        cfg["num_speculative_tokens"] = spec.block_size
        if spec.method == "dspark":
            cfg["enable_adaptive_verification"] = True
        if spec.method == "schedule":
            cfg["num_speculative_tokens_per_batch_size"] = [list(r) for r in schedule_ranges(s)]
        args["speculative-config"] = cfg
    notes = ["Launch:", "  vllm serve --config vllm.yaml"]
    if spec.method == "dspark":
        notes.append("vLLM profiles its own verify cost and sizes the budget itself (no SPS/STS file)")
    return _write(out, "vllm.yaml", header, notes, args)


# -- TensorRT-LLM --------------------------------------------------------------
def trtllm(s: Scenario, out: Path, header: list[str], final: Path) -> str:
    """``trtllm.yaml``: LLM API options with a ``speculative_config`` block."""
    spec, dep = s.speculation, s.deployment
    args = {"tensor_parallel_size": dep.tp, "max_batch_size": dep.max_running_requests,
            "max_num_tokens": dep.max_batched_tokens, "enable_chunked_prefill": True,
            "cuda_graph_config": {"max_batch_size": dep.max_running_requests, "enable_padding": True}}
    if spec.method != "none":
        cfg = {"decoding_type": _TRT_TYPE[spec.drafter], "max_draft_len": spec.block_size}
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
            cfg["draft_len_schedule"] = {last: k for _, last, k in ranges}
        args["speculative_config"] = cfg
    notes = ["Launch:", f"  trtllm-serve {get_model(s.model).hf_id} --extra_llm_api_options trtllm.yaml"]
    if spec.method == "dspark":
        notes.append("DSparkDecodingConfig verifies the whole block (no confidence scheduling field)")
    return _write(out, "trtllm.yaml", header, notes, args)


WRITERS = {"sglang": sglang, "vllm": vllm, "trtllm": trtllm}
