"""The scenario file (``trace.yaml``): what to simulate, as dataclasses that check themselves.

The keys are a contract users and tests rely on: extend them, never rename.
Paths inside the file are relative to the file. Each dataclass validates its own fields
(``__post_init__``) and reads its YAML section (``from_dict``); an error names the file,
the key and the value in one line (docs/scenario.md lists every key).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from dspark_sim.catalog import get_gpu, get_model
from dspark_sim.config import (Section, build, check_bool, check_choice, check_int, check_real, is_real, load_yaml,
                               located, require)
from dspark_sim.cost.parallel import Parallel
from dspark_sim.engines.model import Engine
from dspark_sim.errors import InputError
from dspark_sim.limits import (MAX_ARRIVAL_S, MAX_KV_BLOCK_TOKENS, MAX_REPLICAS, MAX_REQUESTS, MAX_RUNNING_REQUESTS,
                               MAX_SEED, MAX_TIME_SCALE, MIN_TIME_SCALE)
from dspark_sim.metrics.outdir import check_name
from dspark_sim.names import DOMAINS
from dspark_sim.slo import Slo
from dspark_sim.speculation.config import ScheduleRule, Speculation, file_path
from dspark_sim.userfiles import existing_file
from dspark_sim.workload import FORMATS, SyntheticConfig, arriving_by

ROUTERS = ("round_robin", "least_outstanding", "cache_aware")
BATCHING = ("mixed", "prefill_first")
KV_DTYPES = {"bf16": 2.0, "fp8": 1.0}  # bytes of one KV-cache element

__all__ = ["BATCHING", "KV_DTYPES", "ROUTERS", "Deployment", "ScheduleRule", "Scenario", "Slo", "Speculation",
           "Workload", "load_scenario"]


@dataclass(frozen=True, slots=True)
class Workload:
    """Where requests come from: a trace file or a synthetic generator."""

    trace: Path | None = None
    format: str | None = None
    time_scale: float = 1.0
    max_requests: int | None = None
    until_s: float | None = None  # only the requests arriving by then (seconds from the first)
    domain_mix: tuple[tuple[str, float], ...] = (("chat", 1.0),)
    synthetic: SyntheticConfig | None = None
    hash_block_tokens: int = 512  # prompt tokens one prefix hash id covers (Mooncake's hash_ids: 512)
    max_concurrency: int | None = None  # a client keeping at most this many requests in flight (serving/client.py)

    def __post_init__(self) -> None:
        require((self.trace is None) != (self.synthetic is None), "", None if self.trace is None else str(self.trace),
                "give exactly one of workload.trace and workload.synthetic")
        require(self.trace is None or Path(self.trace).is_file(), "trace", str(self.trace), "trace file not found")
        check_choice(self.format, "format", FORMATS, optional=True)
        check_real(self.time_scale, "time_scale", MIN_TIME_SCALE, MAX_TIME_SCALE)
        check_int(self.max_requests, "max_requests", 1, MAX_REQUESTS, optional=True)
        check_real(self.until_s, "until_s", 0, MAX_ARRIVAL_S, optional=True)
        check_int(self.hash_block_tokens, "hash_block_tokens", 1, 1 << 20)
        check_int(self.max_concurrency, "max_concurrency", 1, MAX_RUNNING_REQUESTS, optional=True)
        require(self.synthetic is None or isinstance(self.synthetic, SyntheticConfig), "synthetic", self.synthetic,
                "expected a mapping")
        require(isinstance(self.domain_mix, tuple) and len(self.domain_mix) > 0
                and all(name in DOMAINS and is_real(w) and w >= 0 for name, w in self.domain_mix)
                and sum(w for _, w in self.domain_mix) > 0, "domain", self.domain_mix,
                f"expected weights >= 0 of {', '.join(DOMAINS)} summing to more than 0")

    @property
    def carries_prefixes(self) -> bool:
        """Whether requests carry prefix ``hash_ids``: a Mooncake trace or synthetic sessions."""
        if self.synthetic is not None:
            return self.synthetic.sessions is not None
        from dspark_sim.workload.readers import detect_format

        return (self.format or detect_format(self.trace)) == "mooncake"

    def requests(self, seed: int):
        """The requests as a stream of :class:`~dspark_sim.workload.RequestChunk`: the trace's, or
        the generator's for ``seed``."""
        from dspark_sim.workload import read_trace, synthetic_requests

        if self.trace is not None:
            chunks = read_trace(self.trace, fmt=self.format, time_scale=self.time_scale, max_requests=self.max_requests)
        else:
            chunks = synthetic_requests(self.synthetic, seed, hash_block_tokens=self.hash_block_tokens)
        return chunks if self.until_s is None else arriving_by(chunks, self.until_s)

    @classmethod
    def from_dict(cls, raw, *, file=None, key: str = "workload", base: Path | None = None) -> Workload:
        """Build from a scenario's ``workload:`` mapping; the trace path resolves against ``base``."""
        s = Section(raw, file, key)
        base = base if base is not None else Path.cwd()
        trace, synthetic = s.raw("trace"), s.raw("synthetic")
        kwargs = {name: s.raw(name) for name in ("format", "time_scale", "max_requests", "until_s",
                                                 "hash_block_tokens", "max_concurrency")}
        kwargs = {k: v for k, v in kwargs.items() if v is not None}
        kwargs["domain_mix"] = _domain_mix(s.raw("domain", "chat"), file, s.path("domain"))
        s.done()
        if (trace is None) == (synthetic is None):
            raise InputError(file, key, trace, "give exactly one of workload.trace and workload.synthetic")
        if synthetic is not None:
            kwargs["synthetic"] = SyntheticConfig.from_dict(synthetic, file=file, key=s.path("synthetic"))
        if trace is not None:
            if not isinstance(trace, str):
                raise InputError(file, s.path("trace"), trace, "expected a string")
            kwargs["trace"] = existing_file(base, trace, file, s.path("trace"), "trace file not found")
        return build(cls, kwargs, file, key)


def _domain_mix(value: Any, file, key: str) -> tuple[tuple[str, float], ...]:
    """A domain name or a mapping of weights, as (domain, share) pairs summing to 1."""
    if isinstance(value, str):
        value = {value: 1.0}
    if not isinstance(value, dict) or not value:
        raise InputError(file, key, value, f"expected a domain ({', '.join(DOMAINS)}) or a mapping of weights")
    mix = []
    for name, weight in value.items():
        if name not in DOMAINS:
            raise InputError(file, f"{key}.{name}", name, f"unknown domain; expected {', '.join(DOMAINS)}")
        with located(file, key):
            check_real(weight, str(name), 0)
        mix.append((name, float(weight)))
    total = sum(w for _, w in mix)
    if total <= 0:
        raise InputError(file, key, value, "domain weights must sum to more than 0")
    return tuple((n, w / total) for n, w in mix)


@dataclass(frozen=True, slots=True)
class Deployment:
    """How the model is served: replicas, their GPUs and how the model splits over them, engine limits.

    ``tp`` GPUs serve one replica; ``ep`` of them split the MoE layers' experts, and
    ``dp_attention`` gives each its own requests (see :class:`~dspark_sim.cost.parallel.Parallel`).
    Whether a model splits this way on a GPU is the :class:`Scenario`'s check.
    """

    replicas: int = 1
    tp: int = 1
    max_running_requests: int = 256
    max_batched_tokens: int = 8192
    chunked_prefill_tokens: int | None = None  # per-step prefill cap; None = the batch budget
    router: str = "round_robin"
    gpu_memory_fraction: float = 0.90
    kv_block_tokens: int = 16
    batching: str = "mixed"  # or "prefill_first": prefill-only steps while any prompt is pending
    ep: int = 1  # expert parallel: the MoE layers' experts split over ep of the tp GPUs
    dp_attention: bool = False  # attention data-parallel over the tp GPUs (each its own requests)
    kv_cache_dtype: str = "bf16"  # or "fp8"
    routing_skew: float = 0.0  # Zipf exponent of expert popularity; 0 = uniform routing
    prefix_cache: bool = True  # share prompt KV between requests (SGLang's radix cache, vLLM's prefix caching)
    prefix_block_tokens: int | None = None  # the cache's block; None = the engines' (see prefix_block)
    comm_curves: Path | None = None  # measured collectives (dspark-profile comm) pricing the communication

    def __post_init__(self) -> None:
        check_int(self.replicas, "replicas", 1, MAX_REPLICAS)
        check_int(self.tp, "tp", 1, 64)
        check_int(self.max_running_requests, "max_running_requests", 1, MAX_RUNNING_REQUESTS)
        check_int(self.max_batched_tokens, "max_batched_tokens", 1, 1 << 20)
        check_int(self.chunked_prefill_tokens, "chunked_prefill_tokens", 1, 1 << 20, optional=True)
        check_choice(self.router, "router", ROUTERS)
        check_real(self.gpu_memory_fraction, "gpu_memory_fraction", 0.05, 1.0)
        check_int(self.kv_block_tokens, "kv_block_tokens", 1, MAX_KV_BLOCK_TOKENS)
        check_choice(self.batching, "batching", BATCHING)
        check_int(self.ep, "ep", 1, 64)
        check_bool(self.dp_attention, "dp_attention")
        check_choice(self.kv_cache_dtype, "kv_cache_dtype", tuple(KV_DTYPES))
        check_real(self.routing_skew, "routing_skew", 0, 4)
        check_bool(self.prefix_cache, "prefix_cache")
        check_int(self.prefix_block_tokens, "prefix_block_tokens", 1, 1 << 20, optional=True)
        require(self.prefix_block_tokens is None or self.prefix_block_tokens % self.kv_block_tokens == 0,
                "prefix_block_tokens", self.prefix_block_tokens,
                f"a cache block holds whole KV pages: a multiple of kv_block_tokens={self.kv_block_tokens}")

    @property
    def num_gpus(self) -> int:
        return self.replicas * self.tp

    @property
    def kv_dtype_bytes(self) -> float:
        """Bytes of one KV-cache element."""
        return KV_DTYPES[self.kv_cache_dtype]

    def prefix_block(self, model) -> int:
        """Tokens of one prefix-cache block: ``prefix_block_tokens``, else the KV page as vLLM
        (``block_size``) and SGLang (``page_size``) cache, which SGLang 0.5.23 sets to 256 for
        DeepSeek-V4 (``arg_groups/model_overrides/deepseek_v4.py``)."""
        if self.prefix_block_tokens is not None:
            return self.prefix_block_tokens
        return max(256, self.kv_block_tokens) if model.v4 is not None else self.kv_block_tokens

    @property
    def parallel(self) -> Parallel:
        """The replica's split over its GPUs (experts, attention heads or requests)."""
        return Parallel(self.tp, self.ep, self.dp_attention)

    @classmethod
    def from_dict(cls, raw, *, file=None, key: str = "deployment", defaults: dict | None = None,
                  base: Path | None = None) -> Deployment:
        """Build from a scenario's ``deployment:`` mapping; ``defaults`` (the engine's) fill the keys
        it does not give (``comm_curves`` resolves against ``base``)."""
        s = Section(raw, file, key)
        kwargs = {name: s.raw(name) for name in cls.__dataclass_fields__ if name != "comm_curves"}
        kwargs["comm_curves"] = file_path(s, "comm_curves", base or Path.cwd())
        s.done()
        given = {k: v for k, v in kwargs.items() if v is not None}
        return build(cls, {**(defaults or {}), **given}, file, key)


@dataclass(frozen=True, slots=True)
class Scenario:
    """One simulation: workload, model, GPU, deployment, speculation, SLO, seed."""

    name: str
    workload: Workload
    model: str
    gpu: str
    deployment: Deployment = field(default_factory=Deployment)
    speculation: Speculation = field(default_factory=Speculation)
    slo: Slo = field(default_factory=Slo)
    seed: int = 0
    exact: bool = False  # one simulation event per engine step (no skip-ahead); the same numbers
    file: Path | None = None
    cost_scale: float = 1.0  # every profiled step time times this (sensitivity; the answers' intervals)
    engine: Engine = field(default_factory=Engine)

    def __post_init__(self) -> None:
        check_name(self.name, None, "name")  # it names the output directory (runs/<name>)
        model, gpu = get_model(self.model, key="model"), get_gpu(self.gpu, key="gpu")
        for name, cls in (("workload", Workload), ("deployment", Deployment), ("speculation", Speculation),
                          ("slo", Slo), ("engine", Engine)):
            require(isinstance(getattr(self, name), cls), name, getattr(self, name), "expected a mapping")
        self.deployment.parallel.check(model, gpu, file=self.file)  # heads, experts and the node split as deployed
        block = self.deployment.prefix_block(model)
        require(not (self.deployment.prefix_cache and self.workload.carries_prefixes)
                or self.workload.hash_block_tokens % block == 0,
                "deployment.prefix_block_tokens", block, f"a cache block must divide the workload's "
                f"hash_block_tokens={self.workload.hash_block_tokens} (the tokens of one prefix hash id)")
        check_int(self.seed, "seed", 0, MAX_SEED)
        check_real(self.cost_scale, "cost_scale", 0.1, 10.0)
        check_bool(self.exact, "exact")

    def with_seed(self, seed: int) -> Scenario:
        return replace(self, seed=seed)

    @classmethod
    def from_dict(cls, raw, *, file: str | Path | None = None) -> Scenario:
        """Build from a scenario mapping; relative paths resolve against ``file``'s folder
        (the working directory without one), and errors name ``file``."""
        file = Path(file) if file is not None else None
        top = Section(raw, file, "")
        base = file.parent if file is not None else Path.cwd()
        name = top.raw("name", file.stem if file is not None else "scenario")
        workload = Workload.from_dict(top.raw("workload"), file=file, base=base)
        model, gpu = top.raw("model"), top.raw("gpu")
        for key, value in (("model", model), ("gpu", gpu)):
            if value is None:
                raise InputError(file, key, None, "missing: name a " + key)
            if not isinstance(value, str):
                raise InputError(file, key, value, "expected a string")
        engine = Engine.from_dict(top.raw("engine"), file=file, base=base)
        speculation = Speculation.from_dict(top.raw("speculation"), file=file, base=base)
        kwargs = dict(name=name, workload=workload, model=model.lower(), gpu=gpu.lower(), engine=engine,
                      deployment=_deployment(top.raw("deployment"), engine, gpu, model, file, base,
                                             speculation.method != "none"),
                      speculation=speculation,
                      slo=Slo.from_dict(top.raw("slo"), file=file), seed=top.raw("seed", 0),
                      exact=top.raw("exact", False), file=file, cost_scale=top.raw("cost_scale", 1.0))
        top.done()
        return build(cls, kwargs, file, None)


def _deployment(raw, engine: Engine, gpu: str, model: str, file, base, speculating: bool = False) -> Deployment:
    """The ``deployment:`` mapping with the engine's defaults for the keys it leaves out (some
    depend on whether the scenario speculates)."""
    if engine.is_decoder:
        return Deployment.from_dict(raw, file=file, base=base)
    tp = raw.get("tp", 1) if isinstance(raw, dict) else 1
    tp = tp if isinstance(tp, int) and not isinstance(tp, bool) and tp >= 1 else 1
    defaults = engine.deployment_defaults(get_gpu(gpu, file=file, key="gpu"), tp,
                                          get_model(model, file=file, key="model"), speculating)
    return Deployment.from_dict(raw, file=file, defaults=defaults, base=base)


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario file; bad input raises one InputError."""
    path = Path(path)
    return Scenario.from_dict(load_yaml(path), file=path)
