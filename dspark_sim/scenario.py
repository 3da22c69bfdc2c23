"""The scenario file (``trace.yaml``): what to simulate, as validated dataclasses.

The keys are a contract users and tests rely on: extend them, never rename.
Paths inside the file are relative to the file.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from dspark_sim.config import Section, load_yaml
from dspark_sim.errors import InputError

DOMAINS = ("math", "code", "chat")
METHODS = ("none", "static", "threshold", "schedule", "dspark")
BLOCK_DRAFTERS = ("dspark", "dflash")
CHAIN_DRAFTERS = ("eagle3", "mtp")
ROUTERS = ("round_robin", "least_outstanding")


@dataclass(frozen=True, slots=True)
class Workload:
    """Where requests come from: a trace file or a synthetic generator."""

    trace: Path | None = None
    format: str | None = None
    time_scale: float = 1.0
    max_requests: int | None = None
    domain_mix: tuple[tuple[str, float], ...] = (("chat", 1.0),)
    synthetic: Any = None  # dspark_sim.workload.SyntheticConfig

    def __post_init__(self) -> None:
        if (self.trace is None) == (self.synthetic is None):
            raise ValueError("a workload needs exactly one of trace and synthetic")


@dataclass(frozen=True, slots=True)
class Deployment:
    """How the model is served: replicas, tensor parallelism and engine limits."""

    replicas: int = 1
    tp: int = 1
    max_running_requests: int = 256
    max_batched_tokens: int = 8192
    chunked_prefill_tokens: int | None = None  # per-step prefill cap; None = the batch budget
    router: str = "round_robin"
    gpu_memory_fraction: float = 0.90
    kv_block_tokens: int = 16
    batching: str = "mixed"  # or "prefill_first": prefill-only steps while any prompt is pending

    @property
    def num_gpus(self) -> int:
        return self.replicas * self.tp


@dataclass(frozen=True, slots=True)
class ScheduleRule:
    """Draft tokens ``num_draft_tokens`` while the batch has at most ``max_batch_size`` requests."""

    max_batch_size: int | None
    num_draft_tokens: int


@dataclass(frozen=True, slots=True)
class Speculation:
    """Speculative decoding method and its knobs (DSPARK.md section 3)."""

    method: str = "none"
    drafter: str = "dspark"
    block_size: int = 7  # drafts produced per request per step (gamma, or k)
    scheduler: str = "production"
    lag_steps: int = 2
    min_verify_len: int = 1  # counts the anchor
    max_verify_len: int | None = None  # counts the anchor; None = block_size + 1
    survival_eps: float = 1e-6
    threshold: float = 0.5
    schedule: tuple[ScheduleRule, ...] = ()
    graph_tiers: tuple[int, ...] = ()
    pad_to_graph_tier: bool = False
    sps_table: Path | None = None
    sts: Path | None = None  # SGLang STS JSON; its temperatures replace the preset's
    acceptance: Any = None  # dspark_sim.acceptance.AcceptanceConfig
    drafter_checkpoint: str | None = None  # HF id or absolute path of the drafter's weights

    @property
    def draft_kind(self) -> str | None:
        if self.method == "none":
            return None
        return "block" if self.drafter in BLOCK_DRAFTERS else "chain"

    @property
    def verify_cap(self) -> int:
        """Largest verify length (anchor counted)."""
        cap = self.block_size + 1
        return min(cap, self.max_verify_len) if self.max_verify_len else cap


@dataclass(frozen=True, slots=True)
class Slo:
    """Service-level objectives a request must meet to count as good."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None

    @property
    def given(self) -> bool:
        return self.ttft_ms is not None or self.tpot_ms is not None


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
    file: Path | None = None

    def with_seed(self, seed: int) -> "Scenario":
        return replace(self, seed=seed)


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario file; bad input raises one InputError."""
    path = Path(path)
    top = Section(load_yaml(path), path, "")
    name = top.string("name", path.stem)
    workload = _workload(top.section("workload"), path.parent)
    model = top.string("model")
    gpu = top.string("gpu")
    for key, value in (("model", model), ("gpu", gpu)):
        if value is None:
            raise InputError(path, key, None, "missing: name a " + key)
    _check_catalog(model, gpu, path)
    deployment = _deployment(top.section("deployment"))
    speculation = _speculation(top.section("speculation"), path.parent)
    slo_s = top.section("slo")
    slo = Slo(slo_s.number("ttft_ms", minimum=0, strict_min=True),
              slo_s.number("tpot_ms", minimum=0, strict_min=True))
    slo_s.done()
    seed = top.integer("seed", 0, minimum=0, maximum=2**63 - 1)
    top.done()
    return Scenario(name, workload, model.lower(), gpu.lower(), deployment, speculation, slo, seed, path)


def _check_catalog(model: str, gpu: str, file: Path) -> None:
    from dspark_sim.catalog import get_gpu, get_model

    get_model(model, file=file, key="model")
    get_gpu(gpu, file=file, key="gpu")


def _workload(s: Section, base: Path) -> Workload:
    from dspark_sim.workload import SyntheticConfig

    trace = s.string("trace")
    fmt = s.string("format", choices=("azure", "mooncake", "burstgpt"))
    time_scale = s.number("time_scale", 1.0, minimum=0, strict_min=True)
    max_requests = s.integer("max_requests", None, minimum=1)
    domain_mix = _domain_mix(s.raw("domain", "chat"), s.file, s.path("domain"))
    synthetic_raw = s.raw("synthetic")
    s.done()
    if (trace is None) == (synthetic_raw is None):
        raise InputError(s.file, s.key, trace, "give exactly one of workload.trace and workload.synthetic")
    synthetic = None
    if synthetic_raw is not None:
        synthetic = SyntheticConfig.from_dict(synthetic_raw, file=s.file, key=s.path("synthetic"))
    trace_path = None
    if trace is not None:
        trace_path = (base / trace).resolve()
        if not trace_path.is_file():
            raise InputError(s.file, s.path("trace"), trace, "trace file not found")
    return Workload(trace_path, fmt, time_scale, max_requests, domain_mix, synthetic)


def _domain_mix(value: Any, file, key: str) -> tuple[tuple[str, float], ...]:
    if isinstance(value, str):
        value = {value: 1.0}
    if not isinstance(value, dict) or not value:
        raise InputError(file, key, value, f"expected a domain ({', '.join(DOMAINS)}) or a mapping of weights")
    mix = []
    for name, weight in value.items():
        if name not in DOMAINS:
            raise InputError(file, f"{key}.{name}", name, f"unknown domain; expected {', '.join(DOMAINS)}")
        Section({name: weight}, file, key).number(name, minimum=0)
        mix.append((name, float(weight)))
    total = sum(w for _, w in mix)
    if total <= 0:
        raise InputError(file, key, value, "domain weights must sum to more than 0")
    return tuple((n, w / total) for n, w in mix)


BATCHING = ("mixed", "prefill_first")


def _deployment(s: Section) -> Deployment:
    d = Deployment(
        replicas=s.integer("replicas", 1, minimum=1, maximum=4096),
        tp=s.integer("tp", 1, minimum=1, maximum=64),
        max_running_requests=s.integer("max_running_requests", 256, minimum=1, maximum=1 << 16),
        max_batched_tokens=s.integer("max_batched_tokens", 8192, minimum=1, maximum=1 << 20),
        chunked_prefill_tokens=s.integer("chunked_prefill_tokens", None, minimum=1, maximum=1 << 20),
        router=s.string("router", "round_robin", choices=ROUTERS),
        gpu_memory_fraction=s.number("gpu_memory_fraction", 0.90, minimum=0.05, maximum=1.0),
        kv_block_tokens=s.integer("kv_block_tokens", 16, minimum=1),
        batching=s.string("batching", "mixed", choices=BATCHING),
    )
    s.done()
    return d


def _speculation(s: Section, base: Path) -> Speculation:
    from dspark_sim.acceptance import AcceptanceConfig

    method = s.string("method", "none", choices=METHODS)
    drafter = s.string("drafter", None, choices=BLOCK_DRAFTERS + CHAIN_DRAFTERS)
    block_size = s.integer("block_size", None, minimum=1, maximum=16)
    k = s.integer("num_draft_tokens", None, minimum=1, maximum=16)
    if block_size is not None and k is not None and block_size != k:
        raise InputError(s.file, s.path("num_draft_tokens"), k, "conflicts with block_size; give one")
    gamma = block_size or k or (7 if method in ("dspark", "threshold") else 3)
    acceptance_raw = s.raw("acceptance", {})
    if not isinstance(acceptance_raw, dict):
        raise InputError(s.file, s.path("acceptance"), acceptance_raw, "expected a mapping")
    acceptance_raw = dict(acceptance_raw)
    default_drafter = "dspark" if method in ("dspark", "threshold") else "mtp"
    drafter = drafter or acceptance_raw.get("drafter") or default_drafter
    acceptance_raw.setdefault("drafter", drafter)
    spec = Speculation(
        method=method, drafter=drafter, block_size=gamma,
        scheduler=s.string("scheduler", "production", choices=("production", "algorithm1")),
        lag_steps=s.integer("lag_steps", 2, minimum=0, maximum=16),
        min_verify_len=s.integer("min_verify_len", 1, minimum=1, maximum=17),
        max_verify_len=s.integer("max_verify_len", None, minimum=1, maximum=17),
        survival_eps=s.number("survival_eps", 1e-6, minimum=0, maximum=1),
        threshold=s.number("threshold", 0.5, minimum=0, maximum=1),
        schedule=_schedule(s),
        graph_tiers=_tiers(s),
        pad_to_graph_tier=s.boolean("pad_to_graph_tier", False),
        sps_table=_optional_path(s, "sps_table", base),
        sts=_optional_path(s, "sts", base),
        acceptance=AcceptanceConfig.from_dict(acceptance_raw, file=s.file, key=s.path("acceptance")),
        drafter_checkpoint=_drafter_checkpoint(s, base),
    )
    if spec.max_verify_len is not None and spec.max_verify_len < spec.min_verify_len:
        raise InputError(s.file, s.path("max_verify_len"), spec.max_verify_len, "must be >= min_verify_len")
    if method == "schedule" and not spec.schedule:
        raise InputError(s.file, s.path("schedule"), None, "method schedule needs a schedule list")
    if spec.pad_to_graph_tier and not spec.graph_tiers:
        raise InputError(s.file, s.path("graph_tiers"), None, "pad_to_graph_tier needs graph_tiers")
    s.done()
    return spec


def _schedule(s: Section) -> tuple[ScheduleRule, ...]:
    raw = s.raw("schedule") or []
    if not isinstance(raw, list):
        raise InputError(s.file, s.path("schedule"), raw, "expected a list of {max_batch_size, num_draft_tokens}")
    rules = []
    for i, item in enumerate(raw):
        r = Section(item, s.file, f"{s.path('schedule')}[{i}]")
        rules.append(ScheduleRule(r.integer("max_batch_size", None, minimum=1),
                                  r.integer("num_draft_tokens", 0, minimum=0, maximum=16)))
        r.done()
    bounds = [r.max_batch_size for r in rules if r.max_batch_size is not None]
    if bounds != sorted(bounds) or len(set(bounds)) != len(bounds):
        raise InputError(s.file, s.path("schedule"), bounds, "max_batch_size must strictly increase")
    return tuple(rules)


def _tiers(s: Section) -> tuple[int, ...]:
    raw = s.raw("graph_tiers") or []
    if not isinstance(raw, list) or not all(isinstance(t, int) and not isinstance(t, bool) and t > 0 for t in raw):
        raise InputError(s.file, s.path("graph_tiers"), raw, "expected a list of positive token counts")
    if raw != sorted(set(raw)):
        raise InputError(s.file, s.path("graph_tiers"), raw, "tiers must strictly increase")
    return tuple(raw)


def _drafter_checkpoint(s: Section, base: Path) -> str | None:
    """``speculation.drafter_checkpoint``: the drafter's weights, a Hugging Face id or a path."""
    from dspark_sim.catalog.drafters import check_checkpoint

    value = s.raw("drafter_checkpoint")
    return None if value is None else check_checkpoint(value, s.file, s.path("drafter_checkpoint"), base)


def _optional_path(s: Section, name: str, base: Path) -> Path | None:
    value = s.string(name)
    if value is None:
        return None
    path = (base / value).resolve()
    if not path.is_file():
        raise InputError(s.file, s.path(name), value, "file not found")
    return path
