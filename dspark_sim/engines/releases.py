"""Which release of an engine a scenario names, and where each modelled default comes from.

Part of the engine model with :mod:`dspark_sim.engines` (which re-exports these names):

* ``VERSIONS``: the release each engine's defaults were read from (its released source, cited
  in ``DEFAULT_SOURCES``; the table in docs/engine_defaults.md is generated from it);
* :func:`release_of`: any version a user runs maps to the nearest modelled release, whose
  defaults apply, and the substitution is named (``Release.note``, carried into provenance);
* ``RELEASE_TERMS``: what an older release did differently where it is published (whether it
  overlaps host and GPU by default), applied for the version named.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from dspark_sim.errors import InputError

# The release each engine's defaults were read from (the first is the default version).
VERSIONS = {"decoder": ("project",), "sglang": ("0.5.23",), "vllm": ("0.33.0",), "trtllm": ("1.2.0rc1",)}
VERSION_RE = re.compile(r"v?(\d+(?:\.\d+)*)(?:[.-]?(a|b|rc|dev|post)\.?(\d*))?(?:\+[\w.]+)?")

# Whether each engine overlaps host and GPU by default (DEFAULT_SOURCES' "host overlap" rows;
# the decoder: kernels/decoder/engine.py serve(overlap=True), validated by its runs in
# docs/validation_ttft.md). On for SGLang, vLLM and TensorRT-LLM's PyTorch backend, as their
# released sources cited there resolve it: an overlapped step lasts the longer of its GPU and
# host work (engines/step_cost.py), so one set of host terms serves a release with overlap and one
# without (benchmarks/external.py calibrate fits both kinds of run together).
OVERLAP = {"decoder": True, "sglang": True, "vllm": True, "trtllm": True}
# Where each default comes from: engine -> [(setting, value rule, file:line of the release)].
DEFAULT_SOURCES = {
    "sglang": [
        ("chunked_prefill_tokens", "2048 / 4096 / 4096 / 8192 / 8192 / 16384 for GPU memory < 20 / 35 / 60 / 90 / "
         "160 / above GiB", "sglang 0.5.23 sglang/srt/arg_groups/memory_hook.py:88-172"),
        ("CUDA-graph batch limit", "256 (tp < 4) or 512 (tp >= 4) between 60 and 160 GiB; 512 above; 32/160 below "
         "60 GiB; under DP attention each rank's own batch (the replica's limit times the ranks)",
         "sglang 0.5.23 sglang/srt/arg_groups/memory_hook.py:118-172; sglang/srt/model_executor/"
         "pool_configurator.py:956 (a rank's pool: max_running_requests // attn_dp_size)"),
        ("gpu_memory_fraction", "(mem - reserved) / mem, reserved = max(512 + 1.5 x max(chunk, 2048) + tp/8 x 1024 "
         "+ 2 x graph limit, 10240) MiB above 60 GiB", "sglang 0.5.23 sglang/srt/arg_groups/memory_hook.py:306-326, "
         "357-368"),
        ("max_batched_tokens", "16384 (max_prefill_tokens)", "sglang 0.5.23 sglang/srt/arg_groups/fields/schedule.py:71-81"),
        ("max_running_requests", "min(max(min(KV tokens / context x 512, 4096), 2048), KV tokens // 2); a given "
         "cap is still bounded by KV tokens // 2", "sglang 0.5.23 sglang/srt/mem_cache/kv_cache_configurator.py:"
         "3119-3132"),
        ("max_running_requests with speculative decoding", "48 (EAGLE, EAGLE3, MTP, DSpark, DFlash), unless the "
         "model sets its own first: DeepSeek-V4 256, with or without speculation", "sglang 0.5.23 sglang/srt/"
         "arg_groups/speculative_hook.py:1086-1094 (EAGLE family), 852-860 (DSpark), 438-446 (DFlash); "
         "deepseek_v4_hook.py:138-146; pipeline.py:225, 306 (model defaults before speculative decoding's)"),
        ("speculative chain (EAGLE / MTP)", "3 steps, top-k 1, 4 draft tokens for DeepSeek V2/V3 and models not "
         "listed (block_size 3 here); Llama 5 steps, top-k 4, 8 draft tokens: a tree, verified here as a chain "
         "of block_size (trees are not modelled); DSpark block_size 7, one step, top-k 1", "sglang 0.5.23 sglang/srt/"
         "arg_groups/speculative_hook.py:1430-1461 (_auto_choose_speculative_params); sglang/srt/speculative/"
         "dspark_components/dspark_config.py:21 (DEFAULT_DSPARK_GAMMA)"),
        ("batching", "prefill_first (enable_mixed_chunk = False)",
         "sglang 0.5.23 sglang/srt/arg_groups/fields/schedule.py:208-211"),
        ("host overlap", "overlap scheduler on (disable_overlap_schedule = False): a step lasts the longer of its "
         "GPU and host work", "sglang 0.5.23 sglang/srt/arg_groups/fields/schedule.py:193-199"),
        ("scheduler's output work (step_host_s_per_req)", "every step the scheduler process streams each running "
         "request's output to the detokenizer: host time a running request adds to a step, hidden behind the GPU "
         "with the overlap scheduler", "sglang 0.5.23 sglang/srt/managers/scheduler_components/"
         "batch_result_processor.py:1099 (decode), output_streamer.py:135-198 (a loop over the batch's requests)"),
        ("front end: intake and streaming (frontend_s, stream_s)", "one process, the HTTP server's tokenizer "
         "manager, tokenizes every request and takes every step's output of every streaming request back from the "
         "detokenizer (its own process), one message a request a step",
         "sglang 0.5.23 sglang/srt/managers/tokenizer_manager.py:895 (generate_request), 1096 "
         "(_tokenize_one_request), 2465-2478 (handle_loop), 2495-2780 (a loop over the output's requests); "
         "sglang/srt/managers/detokenizer_manager.py:104, 184"),
        ("front end: what the client sees", "a step's tokens reach the client when the same event loop has handled "
         "them, first come first served with the intake of requests: handle_loop takes one step's output at a time "
         "and wakes each request's stream (batch_notify_size 16 at a time), whose coroutine then writes the "
         "message; a request's intake runs on that loop from generate_request to _send_one_request",
         "sglang 0.5.23 sglang/srt/managers/tokenizer_manager.py:2465-2478 (handle_loop), 2779-2797 "
         "(out_list.append, event.set, asyncio.sleep(0) every batch_notify_size), 1946-1980 "
         "(_stream_one_response: wait for the event, drain out_list), 941-952 (intake: tokenize, send, then wait); "
         "sglang/srt/arg_groups/fields/serving.py:262-269 (stream_interval 1, batch_notify_size 16)"),
        ("KV reserved at admission", "a new request: prompt + min(max_new_tokens, 4096); each running request: "
         "new_token_ratio x its remaining min(max_new_tokens, 4096), the ratio 0.7 falling to 0.7 x 0.14 over 600 "
         "decode steps, back to 0.7 after a retraction", "sglang 0.5.23 sglang/srt/managers/schedule_policy.py:"
         "89-91, 785-794, 1118-1124; sglang/srt/managers/scheduler_components/new_token_ratio_tracker.py:20-38; "
         "sglang/srt/environ.py:646-650; under DP attention the ratios are 0.3 of these (schedule_conservativeness "
         "x 0.3: sglang/srt/arg_groups/parallel_hook.py:314-319)"),
        ("DeepSeek-V4 window pool (engine swa_full_tokens_ratio)", "the sliding-window KV pool holds 0.1 of the "
         "full pool's tokens; a running request keeps its whole prompt there (the prefix cache locks its prefill's "
         "window KV until the request ends: SGLANG_OPT_RELEASE_PREFILL_SWA off; only decoded tokens leave the "
         "window), so the window pool bounds the tokens the running requests hold",
         "sglang 0.5.23 sglang/srt/arg_groups/model_overrides/deepseek_v4.py:44-49; sglang/srt/model_executor/"
         "pool_configurator.py:881, 1046; sglang/srt/environ.py:742-746; sglang/srt/managers/schedule_batch.py:"
         "4068-4105"),
        ("DP attention (dp_attention)", "one scheduler per rank, requests dealt round robin; a rank prefills at "
         "most chunked_prefill_size / ranks tokens of its own requests a step, and (without mixed chunks) does not "
         "decode in a step it prefills while the other ranks do; its running requests max_running_requests // "
         "ranks; the ranks step together (the MoE layers exchange their tokens): a step waits for the busiest "
         "rank's attention, attention projections and host work", "sglang 0.5.23 sglang/srt/arg_groups/"
         "serving_hook.py:217-236 (load_balance_method round_robin), parallel_hook.py:326-336 (chunked prefill "
         "/ attn_dp_size); sglang/srt/model_executor/pool_configurator.py:956"),
        ("DP attention with speculative decoding", "prefill and decode are never in one step: the ranks first "
         "exchange their new prefill batches, and when any rank prefills, every rank without a prompt to prefill "
         "runs an idle batch, so no rank decodes in that step (a step lasts as long as its busiest rank's "
         "prefill); the ranks' decode steps wait for every rank's prompts (SGLANG_ENABLE_DP_SPEC_PREFILL_"
         "COORDINATION, off by default, would let them decode beside)", "sglang 0.5.23 sglang/srt/managers/"
         "scheduler.py:3979-3990 (get_next_batch_to_run); scheduler_components/dp_attn.py:662-676 "
         "(prepare_mlp_sync_batch_raw: an idle batch where any rank has tokens); speculative/eagle_worker_v2.py:"
         "1423-1426 (forward_batch_generation: a step with extend in batch runs prefill only); "
         "sglang/srt/environ.py:1558"),
        ("DP attention: a step with prompt tokens and an idle rank runs eager", "prompt steps replay breakable CUDA "
         "graphs by default, but under DP attention the ranks' graph votes are a minimum over the ranks and the "
         "prefill graph runner refuses a batch in which any rank has no tokens (with speculative decoding every "
         "prompt step in which not all ranks prefill), so the step is launched kernel by kernel on every rank: it "
         "lasts at least the host's eager forward (eager_layer_s a layer, fitted: docs/external.md), with MTP its "
         "draft pass over the prompt too; with DeepEP (ep > 1) such a step dispatches in normal mode, whose "
         "dispatch returns each expert's received-token counts to the host, so the host waits for the GPU at "
         "every MoE layer and the launches add to the GPU's time. Not priced: MegaMoE's exception (no "
         "scenario key), and the host all-gather of the ranks' batches (twice an iteration with speculation; "
         "host time, hidden behind the GPU's steps by the overlap scheduler)", "sglang 0.5.23 sglang/srt/"
         "model_executor/cuda_graph_config.py:119-123 (default_prefill_backend: breakable on CUDA); "
         "managers/scheduler_components/dp_attn.py:290-294 (votes min-reduced), 384-398 (an idle rank votes "
         "yes), 777-808 (maybe_convert_decode_to_extend: an idle rank leaves the step eager); model_executor/"
         "runner/prefill_cuda_graph_runner.py:978-994 (_has_inactive_dp_rank), 1425-1436 (can_run_graph); "
         "model_executor/forward_batch_info.py:400-414 (MegaMoE's exception); layers/moe/utils.py:278-285 "
         "(DeepEP auto mode: normal with extend in batch); layers/moe/token_dispatcher/deepep.py:123, 611-618 "
         "(num_recv_tokens_per_expert a host list); speculative/eagle_worker_v2.py:1595-1601 "
         "(_draft_extend_for_prefill after the target's prefill); managers/scheduler.py:3979-3990 and "
         "scheduler_components/dp_attn.py:609-652 (the gathers, on the CPU group with the overlap scheduler)"),
    ],
    "vllm": [
        ("max_batched_tokens", "8192 (>= 70 GiB, not A100), 16384 (>= 160 GiB), else 2048 (OpenAI server)",
         "vllm 0.33.0 vllm/engine/arg_utils.py:2973-3006"),
        ("max_running_requests", "1024 (>= 70 GiB, not A100), else 256 (max_num_seqs)",
         "vllm 0.33.0 vllm/engine/arg_utils.py:2973-3006"),
        ("chunked_prefill_tokens", "the step budget (enable_chunked_prefill = True, decode first)",
         "vllm 0.33.0 vllm/config/scheduler.py:134"),
        ("gpu_memory_fraction", "0.92 (gpu_memory_utilization)", "vllm 0.33.0 vllm/config/cache.py:215"),
        ("kv_block_tokens", "16", "vllm 0.33.0 vllm/config/cache.py:185"),
        ("CUDA-graph batch limit", "min(2 x max_num_seqs, 512; 1024 on Blackwell) tokens; under data parallelism "
         "each engine core's own (the replica's limit times the ranks)", "vllm 0.33.0 vllm/config/vllm.py:2460-2470"),
        ("host overlap", "asynchronous scheduling on by default: a step lasts the longer of its GPU and host work",
         "vllm 0.33.0 vllm/config/vllm.py:1685-1719"),
        ("front end: intake and streaming (frontend_s, stream_s)", "one process, the API server, renders the chat "
         "template and tokenizes every request, and its output handler detokenizes every step's output of every "
         "request and queues it for the request's stream, one SSE message a request a step (the engine core is "
         "a process of its own)", "vllm 0.33.0 vllm/v1/engine/async_llm.py:856-916 (output_handler: "
         "process_outputs in chunks of VLLM_V1_OUTPUT_PROC_CHUNK_SIZE, asyncio.sleep(0) between); "
         "vllm/v1/engine/output_processor.py:728-863 (detokenizer.update, queue.put a request); "
         "vllm/entrypoints/openai/chat_completion/serving.py:472-506 (a message a result)"),
        ("front end: what the client sees", "a step's tokens reach the client when the API server's event loop has "
         "handled them, first come first served with the intake of requests: the output handler processes one "
         "step's output (in chunks of 128 requests, yielding between them) and puts each request's result on its "
         "queue; the request's generate() coroutine takes it and the chat stream generator writes the message",
         "vllm 0.33.0 vllm/v1/engine/async_llm.py:856-916 (output_handler), 726, 789-800 (generate: q.get_nowait() "
         "or await q.get()); vllm/envs.py:1476-1477 (VLLM_V1_OUTPUT_PROC_CHUNK_SIZE 128); "
         "vllm/entrypoints/openai/chat_completion/serving.py:472, 575 (async for res in result_generator), "
         "264-285 (render_chat_request: the intake on the same loop)"),
        ("front end: API servers", "with data parallelism the server runs one API server process per rank "
         "(api_server_count = data_parallel_size), pooled here; each takes requests in on the loop that streams "
         "(its renderer hands only tokenization to a worker thread, renderer_num_workers 1: the chat template and "
         "the request's set-up stay on the loop)",
         "vllm 0.33.0 vllm/renderers/base.py:146-158 (_executor, _tokenize_prompt_async = make_async(..., "
         "executor)), 1382-1405 (render_chat_async awaits tokenize_prompts_async); vllm/config/model.py:412 "
         "(renderer_num_workers = 1); vllm/entrypoints/cli/serve.py:107-130 (api_server_count defaults to "
         "data_parallel_size)"),
        ("multi-step scheduling (multi_step)", "off (1); vLLM 0.6's --num-scheduler-steps k schedules once for k "
         "decode steps, preparing its requests once and handling their output while the GPU runs on: a decode "
         "step carries the host terms' bias and 1/k of their time per request",
         "vLLM 0.6 vllm/engine/arg_utils.py --num-scheduler-steps ('Maximum number of forward steps per scheduler "
         "call'); gone from 0.33.0"),
        ("KV reserved at admission", "none: a request is admitted when its prompt fits; decode preempts the newest "
         "request when the pool runs out", "vllm 0.33.0 vllm/v1/core/sched/scheduler.py:911-945 (running), 1435 "
         "(waiting: allocate_slots for the prompt tokens only)"),
    ],
    "trtllm": [
        ("gpu_memory_fraction", "0.9 of the memory left after the weights (kv_cache free_gpu_memory_fraction)",
         "TensorRT-LLM tensorrt_llm/commands/serve.py get_llm_args (free_gpu_memory_fraction=0.9)"),
        ("max_batched_tokens, max_running_requests", "BuildConfig defaults max_num_tokens 8192, max_batch_size 2048",
         "TensorRT-LLM tensorrt_llm/commands/serve.py get_llm_args (BuildConfig.model_fields defaults); the "
         "BuildConfig values themselves were not re-read from 1.2.0rc1"),
        ("chunked_prefill_tokens", "the step budget: trtllm-serve leaves chunked prefill off, so a prompt is "
         "taken whole when it fits (approximated by chunks of the step budget)",
         "TensorRT-LLM tensorrt_llm/commands/serve.py get_llm_args (enable_chunked_prefill=False)"),
        ("kv_block_tokens", "32 (tokens_per_block)", "TensorRT-LLM KvCacheConfig tokens_per_block"),
        ("host overlap", "overlap scheduler on (disable_overlap_scheduler = False) in the PyTorch backend, "
         "trtllm-serve's default backend: a step lasts the longer of its GPU and host work",
         "TensorRT-LLM tensorrt_llm/llmapi/llm_args.py TorchLlmArgs.disable_overlap_scheduler (default False; "
         "source at fcd3f3168280) and tensorrt_llm/commands/serve.py serve --backend (default pytorch; source at "
         "00209af149e7); the same in every stored version from 1.0.0rc4 on, the 1.2.0rc1 tag itself not read"),
        ("front end: what the client sees", "trtllm-serve's OpenAI server renders and tokenizes every request and "
         "streams every result on its own event loop: a chat stream generator takes each step's result of its "
         "request (async for res in promise) and post-processes it into messages in the server process (no "
         "post-processing workers by default), first come first served with the intake of requests",
         "TensorRT-LLM tensorrt_llm/serve/openai_server.py OpenAIServer.openai_chat, chat_stream_generator "
         "(post_processor(res, args) unless postproc_worker_enabled; source at 00057725d9a6, no line numbers); "
         "tensorrt_llm/llmapi/llm_args.py num_postprocess_workers (default 0, in every stored version read); the "
         "1.2.0rc1 tag itself not read"),
        ("KV reserved at admission", "every request's prompt + max_tokens (capacity scheduler GUARANTEED_NO_EVICT: "
         "nothing is preempted)", "TensorRT-LLM tensorrt_llm/llmapi/llm_args.py "
         "SchedulerConfig.capacity_scheduler_policy (default GUARANTEED_NO_EVICT; source at fcd3f3168280, the "
         "same in every stored version from 1.0.0rc4 on, the 1.2.0rc1 tag itself not read)"),
    ],
}


# Published differences of older releases: (engine, first release with the modelled behaviour,
# setting, value before it, source). Whether a release overlaps host and GPU by default:
# SGLang's overlap scheduler became the default in 0.4 (the SGLang v0.4 release, "zero-overhead
# batch scheduler"); vLLM's asynchronous scheduling became the default after 0.11
# (vllm-project/vllm pull 27614).
RELEASE_TERMS = (
    ("sglang", (0, 4), "overlap", False, "SGLang v0.4 release: the overlap scheduler on by default from 0.4"),
    ("vllm", (0, 12), "overlap", False, "vllm-project/vllm pull 27614: asynchronous scheduling on by default "
     "after 0.11"),
)


@dataclass(frozen=True, slots=True)
class Release:
    """The release a scenario names (``version``), the modelled release whose defaults stand in
    for it (``modelled``), and what the named release did differently where published (``terms``:
    setting -> value)."""

    engine: str
    version: str
    modelled: str
    terms: tuple[tuple[str, object], ...] = ()

    @property
    def substituted(self) -> bool:
        return self.version != self.modelled

    @property
    def note(self) -> str:
        """The substitution as provenance names it ("" when the release is modelled itself)."""
        if not self.substituted:
            return ""
        own = "; ".join(f"{k} {v} as {self.version} did" for k, v in self.terms)
        return (f"{self.engine} {self.version} is not modelled: the defaults of {self.modelled}, the nearest "
                f"modelled release, stand in" + (f" ({own})" if own else ""))

    def term(self, name: str, default=None):
        return dict(self.terms).get(name, default)


def version_key(version: str) -> tuple | None:
    """A comparable key of a release string (None when it is not one): its numbers, then
    pre-releases (dev, a, b, rc) before the release and post-releases after."""
    m = VERSION_RE.fullmatch(version.strip())
    if m is None:
        return None
    numbers = tuple(int(x) for x in m.group(1).split("."))
    numbers = numbers + (0,) * (3 - len(numbers))
    rank = {"dev": -4, "a": -3, "b": -2, "rc": -1, None: 0, "post": 1}[m.group(2)]
    return numbers + (rank, int(m.group(3) or 0))


def release_of(engine: str, version: str | None, *, file=None, key: str = "engine.version") -> Release:
    """The :class:`Release` of ``engine`` that ``version`` names (None: the modelled release)."""
    modelled = VERSIONS[engine]
    if version is None or version in modelled:
        return Release(engine, version or modelled[0], version or modelled[0])
    want = version_key(version) if isinstance(version, str) and engine != "decoder" else None
    if want is None:
        raise InputError(file, key, version, f"expected a {engine} release number (modelled: "
                         f"{', '.join(modelled)})" if engine != "decoder" else "the decoder has no releases")
    nearest = min(modelled, key=lambda v: _distance(version_key(v), want))
    terms = tuple((name, value) for name_, first, name, value, _ in RELEASE_TERMS
                  if name_ == engine and want[:len(first)] < first)
    return Release(engine, version, nearest, terms)


def _distance(a: tuple, b: tuple) -> tuple:
    """How far two release keys lie apart: the first number that differs, weighted by its place."""
    return tuple(abs(x - y) for x, y in zip(a, b))


__all__ = ["DEFAULT_SOURCES", "OVERLAP", "RELEASE_TERMS", "Release", "VERSIONS", "release_of", "version_key"]
