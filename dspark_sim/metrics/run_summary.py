"""A simulated run's summary as types: what ``summary.json`` holds, one attribute per key.

:func:`dspark_sim.metrics.summary.summarize` builds a :class:`RunSummary`; readers use its
attributes. :meth:`RunSummary.to_json` gives ``summary.json``'s mapping (the keys a run has
always written: ``vllm bench serve`` names plus capacity and speculation metrics) and
:meth:`RunSummary.from_json` reads one back. Four keys appear only where they apply: ``engine``
(not for the decoder's runs), ``request_goodput`` and ``slo_attainment`` (a scenario with an
SLO), ``prefix_cache`` (requests that carried prefix hash ids); they are None otherwise.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Mapping

# Keys summary.json leaves out where they do not apply (None here).
ABSENT_WHEN_NONE = ("engine", "request_goodput", "slo_attainment", "prefix_cache")


@dataclass(frozen=True, slots=True)
class BudgetStats:
    """The verify budget K (extra verify tokens a decode step) over decode steps."""

    mean: float
    p10: float
    median: float
    p90: float
    max: int


@dataclass(frozen=True, slots=True)
class DomainStats:
    """Completed requests of one domain (``per_domain`` of the summary)."""

    completed: int
    acceptance_rate: float | None
    accepted_drafts: int
    verified_drafts: int
    mean_tpot_ms: float | None
    mean_ttft_ms: float


@dataclass(frozen=True, slots=True)
class PrefixStats:
    """The prefix cache's effect (see :func:`dspark_sim.metrics.summary.prefix_stats`)."""

    enabled: bool
    block_tokens: int
    hash_block_tokens: int
    hit_rate: float
    block_hit_rate: float
    mean_cached_tokens_per_request: float
    prefill_tokens_saved: int
    prefill_tokens_computed: int
    evicted_blocks: int
    evicted_tokens: int
    peak_cached_tokens: int


@dataclass(frozen=True, slots=True)
class RunSummary:
    """Every statistic a simulated run is reduced to; latencies in ms, throughputs a second,
    ``None`` where a run has no data for a figure (no decode step, no finished request)."""

    name: str
    model: str
    gpu: str
    num_gpus: int
    method: str
    seed: int
    requests: int
    completed: int
    rejected: int
    rejected_reasons: dict[str, int]
    duration_s: float
    total_input_tokens: int
    total_output_tokens: int
    request_throughput: float
    output_throughput: float
    total_token_throughput: float
    output_throughput_per_gpu: float
    engine: str | None
    mean_ttft_ms: float | None
    median_ttft_ms: float | None
    p90_ttft_ms: float | None
    p99_ttft_ms: float | None
    mean_tpot_ms: float | None
    median_tpot_ms: float | None
    p90_tpot_ms: float | None
    p99_tpot_ms: float | None
    mean_e2el_ms: float | None
    median_e2el_ms: float | None
    p90_e2el_ms: float | None
    p99_e2el_ms: float | None
    mean_itl_ms: float | None
    median_itl_ms: float | None
    p90_itl_ms: float | None
    p99_itl_ms: float | None
    mean_queue_delay_ms: float | None
    median_queue_delay_ms: float | None
    p90_queue_delay_ms: float | None
    p99_queue_delay_ms: float | None
    mean_tok_per_s_per_user: float | None
    request_goodput: float | None
    slo_attainment: float | None
    mean_accept_length: float | None
    acceptance_rate: float | None
    accepted_drafts: int
    verified_drafts: int
    wasted_verify_tokens: int
    wasted_verify_fraction: float | None
    mean_verify_tokens_per_step: float | None
    mean_verify_tokens_per_request: float | None
    budget_k: BudgetStats | None
    num_steps: int
    mean_batch_size: float
    mean_decode_batch_size: float
    num_preemptions: int
    kv_capacity_tokens: int
    kv_peak_fraction: float
    per_domain: dict[str, DomainStats]
    prefix_cache: PrefixStats | None
    provenance: dict
    sim_wall_s: float | None = None  # filled by the caller; kept out of determinism checks

    def to_json(self) -> dict[str, Any]:
        """``summary.json``'s mapping: every key, those of :data:`ABSENT_WHEN_NONE` only where set."""
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None and f.name in ABSENT_WHEN_NONE:
                continue
            out[f.name] = _plain(value)
        return out

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> RunSummary:
        """A summary read back from ``summary.json``'s mapping (a key it lacks is None)."""
        values = {f.name: raw.get(f.name) for f in fields(cls)}
        budget, prefix = values["budget_k"], values["prefix_cache"]
        values["budget_k"] = None if budget is None else BudgetStats(**budget)
        values["prefix_cache"] = None if prefix is None else PrefixStats(**prefix)
        values["per_domain"] = {name: DomainStats(**d) for name, d in (values["per_domain"] or {}).items()}
        return cls(**values)


@dataclass(frozen=True, slots=True)
class RecordMetrics:
    """The metrics of any run record, simulated or served, that ``validate`` and the fidelity
    comparison set side by side (:func:`dspark_sim.metrics.summary.record_metrics`); latencies in
    ms (ITL over decode steps, each step's duration once per request it decoded), NaN where a
    record has no data for one."""

    requests: int
    output_throughput: float
    mean_ttft_ms: float
    p50_ttft_ms: float
    p99_ttft_ms: float
    mean_tpot_ms: float
    p50_tpot_ms: float
    p99_tpot_ms: float
    mean_e2el_ms: float
    p50_e2el_ms: float
    p99_e2el_ms: float
    mean_itl_ms: float
    p50_itl_ms: float
    p99_itl_ms: float
    mean_accept_length: float
    mean_verify_tokens_per_step: float

    def compared(self) -> dict[str, float]:
        """The metrics a comparison sets side by side (every one but the request count), by name."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "requests"}


def _plain(value):
    """``value`` with the summary's records as mappings, for JSON."""
    if isinstance(value, (BudgetStats, DomainStats, PrefixStats)):
        return {f.name: getattr(value, f.name) for f in fields(value)}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value
