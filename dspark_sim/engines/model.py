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
  (:mod:`dspark_sim.serving.replica`); ``OVERLAP`` holds each engine's default, its source in
  ``DEFAULT_SOURCES`` (``host overlap``); a scenario may set ``engine: {overlap: ...}``;
* **admission**: the KV an engine reserves for output still to come when it admits a request
  (:class:`KvReserve`, ``KV_RESERVE``: TensorRT-LLM's GUARANTEED_NO_EVICT, SGLang's new-token
  ratio; vLLM none), and vLLM 0.6's multi-step scheduling (``multi_step``);
* **host terms** (:class:`EngineTerms`): per-step host time (a bias and a time per request
  the step works on; hidden behind the GPU's work up to its length when the engine overlaps),
  the front end's time per request (HTTP, chat template, tokenizer) and per streamed message
  (one process does both, first come first served, and delivers the tokens the client sees:
  :mod:`dspark_sim.serving.frontend`), and the launch floor of an eager
  decode step. They are host time: they do not move when a profile is projected to another GPU.

``decoder`` is the project's own decoder: its host time is measured into the profile
(``host``, ``schedule``), so it adds nothing here and its defaults are the scenario's.
The shipped host terms of the other engines are fitted by ``benchmarks/external.py
calibrate`` (``terms.json`` beside this module, which names the measurements they rest on); a
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
from dspark_sim.engines.releases import DEFAULT_SOURCES, OVERLAP, VERSIONS, Release, release_of
from dspark_sim.errors import InputError
from dspark_sim.userfiles import existing_file, read_json

ENGINES = ("decoder", "sglang", "vllm", "trtllm")
TERMS_FILE = "terms.json"  # shipped host terms, next to this module
CALIBRATION_FORMAT = "dspark-engine-calibration"
SGLANG_V4_SWA_RATIO = 0.1  # DeepSeek-V4's swa_full_tokens_ratio in SGLang (DEFAULT_SOURCES)
MIB = 1 << 20
GIB = 1 << 30

@dataclass(frozen=True, slots=True)
class EngineTerms:
    """Host-side seconds an engine adds to the GPU's work (the same on every GPU).

    step_host_s + step_host_s_per_req x R: host time of a step that works on R requests
    (decoding, or prefilling a chunk): scheduling, and per request the output the step hands on
    (sampling results, stop checks, streaming). Without overlap it adds to the GPU's work; an
    overlapping engine hides it behind the GPU's up to its length (engines/step_cost.py).
    frontend_s: the front end's service time of one request (HTTP, chat template, tokenizer,
    dispatch); one front-end process a replica serves requests one at a time, so a burst
    queues there before the scheduler sees it. eager_step_s: a decode step above the
    CUDA-graph limit lasts at least this long (the host launching every kernel). stream_s: the
    same front-end process's time to stream one output message (a request's tokens of one step:
    detokenize, build the response chunk, send it), which delays the intake of the requests
    behind it (:mod:`dspark_sim.serving.frontend`). A term missing from a file is 0.
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
class GpuWork:
    """The engines' MoE roofline (:func:`~dspark_sim.cost.roofline.engine_roofline_params`): the
    GPU work of an MoE model the engines run on kernels the project has no profile of.

    layer_s: (floor kind, seconds) pairs, the least time a layer of a forward takes (its
    kernels' floors at a batch of one) for layers of each kind (``gqa``, ``mla``, ``v4``; a kind and
    a served format, ``v4/fp4-experts-w4a16``, where a GPU runs other kernels:
    :func:`~dspark_sim.cost.roofline.floor_kind`);
    first_token_layer_s: (kind, seconds) pairs, a layer's share of the latency a request's first
    token takes beyond the steps that compute it, the same for requests taken in together (a model
    of ``L`` layers: ``L`` times it); moe_bw_eff: the share of HBM
    bandwidth the expert GEMMs reach; flops_eff: (served weight format, share) pairs, the share of
    the tensor cores' FLOP/s the GEMMs reach at a large batch, by the kernels a format runs on (a
    format not named keeps the roofline's); eager_layer_s: (kind, seconds) pairs, the host's time
    to run one layer of a forward eagerly (SGLang's steps with prompt tokens in which a DP-attention
    rank is idle: :class:`~dspark_sim.engines.step_cost.EngineCost`); fitted_from: the published
    runs it was fitted on.
    """

    layer_s: tuple[tuple[str, float], ...] = ()
    first_token_layer_s: tuple[tuple[str, float], ...] = ()
    moe_bw_eff: float | None = None
    fitted_from: tuple[str, ...] = ()
    flops_eff: tuple[tuple[str, float], ...] = ()
    eager_layer_s: tuple[tuple[str, float], ...] = ()

    def to_json_dict(self) -> dict:
        return {"layer_s": dict(self.layer_s), "first_token_layer_s": dict(self.first_token_layer_s),
                "moe_bw_eff": self.moe_bw_eff, "flops_eff": dict(self.flops_eff),
                "eager_layer_s": dict(self.eager_layer_s), "fitted_from": list(self.fitted_from)}

    @classmethod
    def from_json_dict(cls, raw: dict) -> GpuWork:
        known = cls.__dataclass_fields__
        if unknown := sorted(set(raw) - set(known)):  # a term renamed since the file was fitted
            raise InputError(None, "gpu_work", unknown[0], "unknown term; known: " + ", ".join(known))
        return cls(tuple(sorted(raw.get("layer_s", {}).items())),
                   tuple(sorted(raw.get("first_token_layer_s", {}).items())),
                   raw.get("moe_bw_eff"), tuple(raw.get("fitted_from", ())),
                   tuple(sorted(raw.get("flops_eff", {}).items())),
                   tuple(sorted(raw.get("eager_layer_s", {}).items())))


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
# SGLang 0.5.23 with DP attention: schedule_conservativeness x 0.3, which scales the running
# requests' new-token ratio (sglang/srt/arg_groups/parallel_hook.py:314-319,
# managers/scheduler_components/new_token_ratio_tracker.py:20-31).
SGLANG_DP_CONSERVATIVENESS = 0.3


@dataclass(frozen=True, slots=True)
class Engine:
    """The serving engine of a scenario (see the module docstring)."""

    name: str = "decoder"
    version: str | None = None
    calibration: Path | None = None
    terms: EngineTerms = field(default_factory=EngineTerms)
    overlap: bool | None = None  # None: the engine's default (OVERLAP)
    multi_step: int = 1  # decode steps run per schedule (vLLM 0.6's --num-scheduler-steps)
    gpu_work: GpuWork | None = None  # the engines' MoE roofline (None: none fitted; shipped_gpu_work)
    swa_full_tokens_ratio: float | None = None  # SGLang's DeepSeek-V4 window pool (None: its default)

    def __post_init__(self) -> None:
        check_choice(self.name, "name", ENGINES)
        require(self.version is None or isinstance(self.version, str), "version", self.version,
                "expected a release number")
        release_of(self.name, self.version, key="version")  # a release number (any; the nearest modelled stands in)
        require(isinstance(self.terms, EngineTerms), "terms", self.terms, "expected EngineTerms")
        require(self.overlap is None or isinstance(self.overlap, bool), "overlap", self.overlap,
                "expected true or false")
        require(isinstance(self.multi_step, int) and not isinstance(self.multi_step, bool)
                and 1 <= self.multi_step <= 64, "multi_step", self.multi_step, "expected an integer from 1 to 64")
        require(self.multi_step == 1 or self.name == "vllm", "multi_step", self.multi_step,
                "multi-step scheduling is a vLLM setting (--num-scheduler-steps)")
        require(self.swa_full_tokens_ratio is None or self.name == "sglang", "swa_full_tokens_ratio",
                self.swa_full_tokens_ratio, "an SGLang setting (--swa-full-tokens-ratio)")
        if self.swa_full_tokens_ratio is not None:
            check_real(self.swa_full_tokens_ratio, "swa_full_tokens_ratio", 0.001, 1.0)
        require(self.name != "decoder" or self.calibration is None, "calibration", self.calibration,
                "the decoder's host time is measured into its profile; calibrate sglang, vllm or trtllm")

    @property
    def is_decoder(self) -> bool:
        return self.name == "decoder"

    @property
    def release(self) -> Release:
        """The release named and the modelled one standing in for it (:func:`release_of`)."""
        return release_of(self.name, self.version, key="version")

    @property
    def overlapped(self) -> bool:
        """Whether step n+1 is planned while step n runs: the scenario's ``overlap``, else what the
        named release did by default (``RELEASE_TERMS``), else the engine's (``OVERLAP``)."""
        if self.overlap is not None:
            return self.overlap
        return self.release.term("overlap", OVERLAP[self.name])

    @property
    def kv_reserve(self) -> KvReserve | None:
        """The KV the engine reserves at admission for output still to decode (None: none)."""
        return KV_RESERVE.get(self.name)

    def kv_reserve_for(self, dp_attention: bool) -> KvReserve | None:
        """:attr:`kv_reserve` as deployed: SGLang under DP attention scales its new-token ratios by
        0.3 (``schedule_conservativeness``; DEFAULT_SOURCES' "KV reserved at admission")."""
        reserve = self.kv_reserve
        if reserve is None or not (dp_attention and self.name == "sglang"):
            return reserve
        k = SGLANG_DP_CONSERVATIVENESS
        return KvReserve(reserve.new_ratio, reserve.running_init * k, reserve.running_min * k, reserve.decay_steps,
                         reserve.clip_tokens)

    def ranks_prefill_apart(self, speculating: bool) -> bool:
        """Whether, under DP attention, a step in which any rank prefills decodes on none: SGLang
        with speculative decoding gathers the ranks' new prefill batches first and runs the others
        idle (DEFAULT_SOURCES' "DP attention with speculative decoding")."""
        return speculating and self.name == "sglang"

    @property
    def label(self) -> str:
        """``name version`` as outputs name the engine (and the modelled release standing in for
        a release not modelled)."""
        r = self.release
        return f"{self.name} {r.version}" + (f" (defaults of {r.modelled})" if r.substituted else "")

    @classmethod
    def from_dict(cls, raw, *, file=None, key: str = "engine", base: Path | None = None) -> Engine:
        """Build from a scenario's ``engine:`` mapping (or a bare engine name)."""
        if isinstance(raw, str):
            raw = {"name": raw}
        s = Section(raw, file, key)
        name, version, calibration = s.raw("name", "decoder"), s.raw("version"), s.raw("calibration")
        overlap, multi_step, swa = s.raw("overlap"), s.raw("multi_step", 1), s.raw("swa_full_tokens_ratio")
        s.done()
        if isinstance(version, (int, float)) and not isinstance(version, bool):
            version = str(version)
        given = {"name": name, "version": version, "overlap": overlap, "multi_step": multi_step,
                 "swa_full_tokens_ratio": swa}
        engine = build(cls, given, file, key)
        if not engine.is_decoder:
            given["gpu_work"] = shipped_gpu_work()
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
    def deployment_defaults(self, gpu, tp: int, model=None, speculating: bool = False) -> dict:
        """Deployment keys the engine sets when the scenario does not (cited in DEFAULT_SOURCES);
        ``speculating``: the scenario runs speculative decoding."""
        mem = gpu.memory_bytes
        if self.name == "sglang":
            chunk = _sglang_chunk(mem)
            graph = self.graph_max_batch(gpu, tp) or 0
            running = 4096  # bounded by the KV pool (running_cap)
            if model is not None and model.v4 is not None:
                running = 256  # DeepSeek-V4's own default, set before speculative decoding's
            elif speculating:
                running = 48
            return {"chunked_prefill_tokens": chunk, "max_batched_tokens": 16384, "max_running_requests": running,
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

    def graph_max_batch(self, gpu, tp: int, max_running: int | None = None, dp_ranks: int = 1) -> int | None:
        """Tokens of the largest decode step a CUDA graph covers (None: no limit modelled). Under
        DP attention each of ``dp_ranks`` ranks captures its own graphs for its own batch: the
        replica's limit is theirs together (the ranks' batches are dealt evenly)."""
        mem = gpu.memory_bytes
        if self.name == "sglang":
            if mem < 60 * GIB:
                return (32 if tp < 4 else 160) * dp_ranks
            return (256 if tp < 4 and mem < 160 * GIB else 512) * dp_ranks
        if self.name == "vllm":
            seqs = max_running or self.deployment_defaults(gpu, tp)["max_running_requests"]
            return min(2 * seqs, 1024 if gpu.fp4 else 512) * dp_ranks
        return None

    def front_end_layout(self, dp_ranks: int = 1) -> tuple[bool, int]:
        """(shared, processes): whether the API server takes requests in on the loop that streams
        the output, and how many API server processes a replica runs (vLLM: one per data-parallel
        rank; DEFAULT_SOURCES' "front end" rows). Every engine's intake shares its loop: vLLM's
        renderer tokenizes on a worker thread, but renders the chat template and sets the request
        up on the loop, and its published runs replay closer with the intake shared (the external
        check, docs/external.md)."""
        return True, dp_ranks if self.name == "vllm" else 1

    def held_kv_tokens(self, full_tokens: int, model, block: int) -> int:
        """KV tokens the running requests may hold on a pool of ``full_tokens``: DeepSeek-V4 under
        SGLang keeps each running request's prompt in its sliding-window pool too (the prefix cache
        locks a prefill's window KV until the request ends), a pool of ``swa_full_tokens_ratio`` of
        the full one (DEFAULT_SOURCES' "DeepSeek-V4 window pool"), which binds first."""
        if self.name != "sglang" or model.v4 is None:
            return full_tokens
        tokens = int(full_tokens * (self.swa_full_tokens_ratio or SGLANG_V4_SWA_RATIO))
        return max(block, tokens - tokens % block)

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
    entry = _shipped().get("engines", {}).get(name)
    if entry is None:
        return EngineTerms(source=f"{name}: no fitted host terms shipped")
    return EngineTerms.from_json_dict(entry["terms"], file=TERMS_FILE, key=f"engines.{name}.terms")


def _shipped() -> dict:
    path = resources.files("dspark_sim.engines").joinpath(TERMS_FILE)
    return json.loads(path.read_text()) if path.is_file() else {}


def shipped_gpu_work() -> GpuWork | None:
    """The engines' MoE roofline shipped with the host terms (``gpu_work`` in terms.json);
    None when none is fitted."""
    raw = _shipped().get("gpu_work")
    return GpuWork.from_json_dict(raw) if raw else None


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


__all__ = ["CALIBRATION_FORMAT", "DEFAULT_SOURCES", "ENGINES", "Engine", "EngineTerms", "GpuWork", "KV_RESERVE",
           "KvReserve",
           "OVERLAP", "VERSIONS",
           "load_calibration", "shipped_gpu_work", "shipped_terms"]
