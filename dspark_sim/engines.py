"""The serving engine a scenario predicts: its defaults and its host-side time.

A scenario's ``engine: {name, version, calibration}`` selects one of :data:`ENGINES`.
The GPU work of a step (kernels and graphs) comes from the profile or the roofline, the
same for every engine; what the engine adds is described here:

* **defaults** the engine applies when the user sets nothing (chunked-prefill budget,
  step token budget, running-request cap, memory fraction, mixed or prefill-only steps),
  read from the engine's released source and cited in ``DEFAULT_SOURCES`` (the table in
  docs/engines.md is generated from it);
* **runtime limits** that depend on the replica: SGLang's running-request cap derived
  from the KV pool, the largest batch a CUDA graph covers (a decode step above it runs
  eagerly);
* **overlap**: whether the engine plans and launches step n+1 while step n runs (SGLang's
  overlap scheduler, vLLM's asynchronous scheduling, the decoder's ``serve``): a request
  that reaches the scheduler while a step is in flight joins the step planned after it
  (:mod:`dspark_sim.engine.replica`); ``OVERLAP`` holds each engine's default, its source in
  ``DEFAULT_SOURCES`` (``host overlap``); a scenario may set ``engine: {overlap: ...}``;
* **admission**: the KV an engine reserves for output still to come when it admits a request
  (:class:`KvReserve`, ``KV_RESERVE``: TensorRT-LLM's GUARANTEED_NO_EVICT, SGLang's new-token
  ratio; vLLM none), and vLLM 0.6's multi-step scheduling (``multi_step``);
* **host terms** (:class:`EngineTerms`): per-step host time (a bias and a time per request
  the step works on; hidden behind the GPU's work up to its length when the engine overlaps),
  the front end's time per request (HTTP, chat template, tokenizer) and per streamed message
  (one process does both, first come first served, and delivers the tokens the client sees:
  :mod:`dspark_sim.engine.frontend`), and the launch floor of an eager
  decode step. They are host time: they do not move when a profile is projected to another GPU.

``decoder`` is the project's own decoder: its host time is measured into the profile
(``host``, ``schedule``), so it adds nothing here and its defaults are the scenario's.
The shipped host terms of the other engines are fitted by ``benchmarks/external.py
calibrate`` (``engine_terms.json``, which names the measurements they rest on); a
scenario may name its own fit (``calibration:``, written by ``dspark-sim engine-fit``).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import numpy as np

from dspark_sim.config import Section, build, check_choice, check_real, require
from dspark_sim.errors import InputError
from dspark_sim.userfiles import existing_file, read_json

ENGINES = ("decoder", "sglang", "vllm", "trtllm")
# The release each engine's defaults were read from (the first is the default version).
VERSIONS = {"decoder": ("project",), "sglang": ("0.5.23",), "vllm": ("0.33.0",), "trtllm": ("1.2.0rc1",)}
TERMS_FILE = "engine_terms.json"  # shipped host terms, next to this module
CALIBRATION_FORMAT = "dspark-engine-calibration"
MIB = 1 << 20
GIB = 1 << 30

# Whether each engine overlaps host and GPU by default (DEFAULT_SOURCES' "host overlap" rows;
# the decoder: kernels/decoder/engine.py serve(overlap=True), validated by its runs in
# docs/validation_ttft.md). On for SGLang, vLLM and TensorRT-LLM's PyTorch backend, as their
# released sources cited there resolve it: an overlapped step lasts the longer of its GPU and
# host work (cost/engine.py), so one set of host terms serves a release with overlap and one
# without (benchmarks/external.py calibrate fits both kinds of run together).
OVERLAP = {"decoder": True, "sglang": True, "vllm": True, "trtllm": True}
# Where each default comes from: engine -> [(setting, value rule, file:line of the release)].
DEFAULT_SOURCES = {
    "sglang": [
        ("chunked_prefill_tokens", "2048 / 4096 / 4096 / 8192 / 8192 / 16384 for GPU memory < 20 / 35 / 60 / 90 / "
         "160 / above GiB", "sglang 0.5.23 sglang/srt/arg_groups/memory_hook.py:88-172"),
        ("CUDA-graph batch limit", "256 (tp < 4) or 512 (tp >= 4) between 60 and 160 GiB; 512 above; 32/160 below "
         "60 GiB", "sglang 0.5.23 sglang/srt/arg_groups/memory_hook.py:118-172"),
        ("gpu_memory_fraction", "(mem - reserved) / mem, reserved = max(512 + 1.5 x max(chunk, 2048) + tp/8 x 1024 "
         "+ 2 x graph limit, 10240) MiB above 60 GiB", "sglang 0.5.23 sglang/srt/arg_groups/memory_hook.py:306-326, "
         "357-368"),
        ("max_batched_tokens", "16384 (max_prefill_tokens)", "sglang 0.5.23 sglang/srt/arg_groups/fields/schedule.py:71-81"),
        ("max_running_requests", "min(max(min(KV tokens / context x 512, 4096), 2048), KV tokens // 2); a given "
         "cap is still bounded by KV tokens // 2", "sglang 0.5.23 sglang/srt/mem_cache/kv_cache_configurator.py:"
         "3119-3132"),
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
         "sglang/srt/environ.py:646-650"),
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
        ("CUDA-graph batch limit", "min(2 x max_num_seqs, 512; 1024 on Blackwell) tokens",
         "vllm 0.33.0 vllm/config/vllm.py:2460-2470"),
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


@dataclass(frozen=True, slots=True)
class EngineTerms:
    """Host-side seconds an engine adds to the GPU's work (the same on every GPU).

    step_host_s + step_host_s_per_req x R: host time of a step that works on R requests
    (decoding, or prefilling a chunk): scheduling, and per request the output the step hands on
    (sampling results, stop checks, streaming). Without overlap it adds to the GPU's work; an
    overlapping engine hides it behind the GPU's up to its length (cost/engine.py).
    frontend_s: the front end's service time of one request (HTTP, chat template, tokenizer,
    dispatch); one front-end process a replica serves requests one at a time, so a burst
    queues there before the scheduler sees it. eager_step_s: a decode step above the
    CUDA-graph limit lasts at least this long (the host launching every kernel). stream_s: the
    same front-end process's time to stream one output message (a request's tokens of one step:
    detokenize, build the response chunk, send it), which delays the intake of the requests
    behind it (:mod:`dspark_sim.engine.frontend`). A term missing from a file is 0.
    """

    step_host_s: float = 0.0
    step_host_s_per_req: float = 0.0
    frontend_s: float = 0.0
    eager_step_s: float = 0.0
    stream_s: float = 0.0
    source: str = "no host terms"

    def __post_init__(self) -> None:
        for name in ("step_host_s", "step_host_s_per_req", "frontend_s", "eager_step_s", "stream_s"):
            check_real(getattr(self, name), name, 0, 10.0)
        require(isinstance(self.source, str), "source", self.source, "expected a string")

    def to_json_dict(self) -> dict:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}

    @classmethod
    def from_json_dict(cls, raw, *, file=None, key: str = "terms") -> EngineTerms:
        s = Section(raw, file, key)
        kwargs = {name: s.raw(name) for name in cls.__dataclass_fields__}
        s.done()
        return build(cls, {k: v for k, v in kwargs.items() if v is not None}, file, key)


@dataclass(frozen=True, slots=True)
class KvReserve:
    """KV an engine sets aside at admission for output tokens its requests have yet to decode.

    A waiting request is admitted only when its prompt, ``new_ratio`` of its output tokens and
    what the running requests hold and reserve fit the KV pool. A running request reserves a
    ratio of the output tokens it has left (at most ``clip_tokens`` of them): ``running_init``
    after a preemption (and at start), falling linearly to ``running_min`` over ``decay_steps``
    decode steps. An engine without one (vLLM) admits on the prompt alone and preempts when decode
    outgrows the pool.
    """

    new_ratio: float
    running_init: float
    running_min: float
    decay_steps: int = 0
    clip_tokens: int | None = None

    def __post_init__(self) -> None:
        for name in ("new_ratio", "running_init", "running_min"):
            check_real(getattr(self, name), name, 0.0, 1.0)
        require(self.running_min <= self.running_init, "running_min", self.running_min, "above running_init")
        require(isinstance(self.decay_steps, int) and self.decay_steps >= 0, "decay_steps", self.decay_steps,
                "expected an integer >= 0")

    @property
    def decay_per_step(self) -> float:
        return (self.running_init - self.running_min) / self.decay_steps if self.decay_steps else 0.0

    def output_left(self, tokens):
        """Output tokens a request may still write (an int or an array), as the reservation counts them."""
        return tokens if self.clip_tokens is None else np.minimum(tokens, self.clip_tokens)


# SGLang 0.5.23: a new request needs prompt + min(max_new_tokens, 4096); a running one keeps
# new_token_ratio x its remaining (clipped) tokens, 0.7 falling to 0.7 x 0.14 over 600 decode
# steps, back to 0.7 after a retraction. TensorRT-LLM (GUARANTEED_NO_EVICT): every request's
# full output. DEFAULT_SOURCES' "KV reserved at admission" rows cite both.
KV_RESERVE = {"sglang": KvReserve(1.0, 0.7, 0.7 * 0.14, 600, 4096), "trtllm": KvReserve(1.0, 1.0, 1.0)}


@dataclass(frozen=True, slots=True)
class Engine:
    """The serving engine of a scenario (see the module docstring)."""

    name: str = "decoder"
    version: str | None = None
    calibration: Path | None = None
    terms: EngineTerms = field(default_factory=EngineTerms)
    overlap: bool | None = None  # None: the engine's default (OVERLAP)
    multi_step: int = 1  # decode steps run per schedule (vLLM 0.6's --num-scheduler-steps)

    def __post_init__(self) -> None:
        check_choice(self.name, "name", ENGINES)
        if self.version is not None:
            require(isinstance(self.version, str) and self.version in VERSIONS[self.name], "version",
                    self.version, f"{self.name} defaults are read from {', '.join(VERSIONS[self.name])}")
        require(isinstance(self.terms, EngineTerms), "terms", self.terms, "expected EngineTerms")
        require(self.overlap is None or isinstance(self.overlap, bool), "overlap", self.overlap,
                "expected true or false")
        require(isinstance(self.multi_step, int) and not isinstance(self.multi_step, bool)
                and 1 <= self.multi_step <= 64, "multi_step", self.multi_step, "expected an integer from 1 to 64")
        require(self.multi_step == 1 or self.name == "vllm", "multi_step", self.multi_step,
                "multi-step scheduling is a vLLM setting (--num-scheduler-steps)")
        require(self.name != "decoder" or self.calibration is None, "calibration", self.calibration,
                "the decoder's host time is measured into its profile; calibrate sglang, vllm or trtllm")

    @property
    def is_decoder(self) -> bool:
        return self.name == "decoder"

    @property
    def overlapped(self) -> bool:
        """Whether step n+1 is planned while step n runs (the scenario's ``overlap``, else the engine's)."""
        return OVERLAP[self.name] if self.overlap is None else self.overlap

    @property
    def kv_reserve(self) -> KvReserve | None:
        """The KV the engine reserves at admission for output still to decode (None: none)."""
        return KV_RESERVE.get(self.name)

    @property
    def label(self) -> str:
        """``name version`` as outputs name the engine."""
        return f"{self.name} {self.version or VERSIONS[self.name][0]}"

    @classmethod
    def from_dict(cls, raw, *, file=None, key: str = "engine", base: Path | None = None) -> Engine:
        """Build from a scenario's ``engine:`` mapping (or a bare engine name)."""
        if isinstance(raw, str):
            raw = {"name": raw}
        s = Section(raw, file, key)
        name, version, calibration = s.raw("name", "decoder"), s.raw("version"), s.raw("calibration")
        overlap, multi_step = s.raw("overlap"), s.raw("multi_step", 1)
        s.done()
        if isinstance(version, (int, float)) and not isinstance(version, bool):
            version = str(version)
        given = {"name": name, "version": version, "overlap": overlap, "multi_step": multi_step}
        engine = build(cls, given, file, key)
        if calibration is None:
            return build(cls, {**given, "terms": shipped_terms(engine.name)}, file, key)
        if engine.is_decoder:
            raise InputError(file, f"{key}.calibration", calibration, "the decoder's host time is measured into "
                             "its profile; calibrate sglang, vllm or trtllm")
        if not isinstance(calibration, str):
            raise InputError(file, f"{key}.calibration", calibration, "expected a file name")
        path = existing_file(base or Path.cwd(), calibration, file, f"{key}.calibration",
                             "calibration file not found")
        terms = load_calibration(path, engine=engine.name)
        return build(cls, {**given, "calibration": path, "terms": terms}, file, key)

    # -- defaults -----------------------------------------------------------------
    def deployment_defaults(self, gpu, tp: int, model=None) -> dict:
        """Deployment keys the engine sets when the scenario does not (cited in DEFAULT_SOURCES)."""
        mem = gpu.memory_bytes
        if self.name == "sglang":
            chunk = _sglang_chunk(mem)
            graph = self.graph_max_batch(gpu, tp) or 0
            return {"chunked_prefill_tokens": chunk, "max_batched_tokens": 16384, "max_running_requests": 4096,
                    "batching": "prefill_first", "gpu_memory_fraction": _sglang_fraction(mem, chunk, tp, graph)}
        if self.name == "vllm":
            big = mem >= 70 * GIB and gpu.name != "a100"
            tokens = 16384 if mem >= 160 * GIB else (8192 if big else 2048)
            return {"max_batched_tokens": tokens, "max_running_requests": 1024 if big or mem >= 160 * GIB else 256,
                    "gpu_memory_fraction": 0.92, "kv_block_tokens": 16}
        if self.name == "trtllm":
            out = {"max_batched_tokens": 8192, "max_running_requests": 2048, "kv_block_tokens": 32}
            if model is not None:  # 0.9 of what the weights leave
                weights = model.weight_bytes() / tp
                out["gpu_memory_fraction"] = round(min(0.99, (weights + 0.9 * max(mem - weights, 0)) / mem), 4)
            return out
        return {}

    def graph_max_batch(self, gpu, tp: int, max_running: int | None = None) -> int | None:
        """Tokens of the largest decode step a CUDA graph covers (None: no limit modelled)."""
        mem = gpu.memory_bytes
        if self.name == "sglang":
            if mem < 60 * GIB:
                return 32 if tp < 4 else 160
            return 256 if tp < 4 and mem < 160 * GIB else 512
        if self.name == "vllm":
            seqs = max_running or self.deployment_defaults(gpu, tp)["max_running_requests"]
            return min(2 * seqs, 1024 if gpu.fp4 else 512)
        return None

    def running_cap(self, kv_tokens: int, max_context: int) -> int | None:
        """The running-request cap the engine derives from its KV pool (None: none)."""
        if self.name != "sglang":
            return None
        estimated = max(min(int(kv_tokens / max_context * 512), 4096), 2048) if max_context else 4096
        return max(1, min(estimated, kv_tokens // 2))


def _sglang_chunk(mem: int) -> int:
    for limit, chunk in ((20, 2048), (35, 4096), (60, 4096), (90, 8192), (160, 8192)):
        if mem < limit * GIB:
            return chunk
    return 16384


def _sglang_fraction(mem: int, chunk: int, tp: int, graph: int) -> float:
    gpu_mib = mem / MIB
    reserved = 512 + max(chunk, 2048) * 1.5 + tp / 8 * 1024 + graph * 2
    if gpu_mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return round((gpu_mib - reserved) / gpu_mib, 3)


def shipped_terms(name: str) -> EngineTerms:
    """The host terms shipped for engine ``name`` (none for the decoder or an engine not fitted yet)."""
    if name == "decoder":
        return EngineTerms()  # its host time is measured into its profile
    path = resources.files("dspark_sim").joinpath(TERMS_FILE)
    if not path.is_file():
        return EngineTerms(source=f"{name}: no fitted host terms shipped")
    data = json.loads(path.read_text())
    entry = data.get("engines", {}).get(name)
    if entry is None:
        return EngineTerms(source=f"{name}: no fitted host terms shipped")
    return EngineTerms.from_json_dict(entry["terms"], file=TERMS_FILE, key=f"engines.{name}.terms")


def load_calibration(path: str | Path, *, engine: str | None = None) -> EngineTerms:
    """The host terms of a calibration file written by ``dspark-sim engine-fit``."""
    path = Path(path)
    if not path.exists():
        raise InputError(path, None, None, "calibration file not found")
    data = read_json(path)
    if not isinstance(data, dict) or data.get("format") != CALIBRATION_FORMAT:
        raise InputError(path, "format", data.get("format") if isinstance(data, dict) else None,
                         f"expected {CALIBRATION_FORMAT!r} (a file written by dspark-sim engine-fit)")
    if engine is not None and data.get("engine") != engine:
        raise InputError(path, "engine", data.get("engine"), f"the calibration is not for engine {engine!r}")
    terms = EngineTerms.from_json_dict(data.get("terms"), file=path, key="terms")
    if not math.isfinite(terms.step_host_s):
        raise InputError(path, "terms.step_host_s", terms.step_host_s, "must be finite")
    return terms


__all__ = ["CALIBRATION_FORMAT", "DEFAULT_SOURCES", "ENGINES", "Engine", "EngineTerms", "KV_RESERVE", "KvReserve",
           "OVERLAP", "VERSIONS",
           "load_calibration", "shipped_terms"]
