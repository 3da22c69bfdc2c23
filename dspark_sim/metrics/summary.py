"""Every statistic a run is reduced to, defined once.

:func:`summarize` gives a simulated run's :class:`~dspark_sim.metrics.run_summary.RunSummary`
(``summary.json``: ``vllm bench serve`` keys plus capacity and speculation metrics); :func:`record_metrics` gives the metrics of any run
record, simulated or served, that ``validate`` and the fidelity comparison set side by
side. Both take latency statistics from :func:`latency_stats`. Two figures come from
different data, named apart: ITL in ``summary.json`` is over every per-token gap the
simulator saw (:func:`token_gap_itl`), in a record over decode steps, each step's
duration weighted by the requests it decoded (:func:`step_itl`: the ITL a served run's
files give, so both sides of a comparison use it). Accepted drafts count the way the output
does: those a request emitted (a last step may accept drafts past its output, which are never
emitted), so ``acceptance_rate`` is emitted drafts over verified ones and the accept length in
``summary.json`` (accepted drafts plus one a decode step) is the tokens decode steps emitted, as
in a record.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from dspark_sim.metrics.record import Record, RequestColumns
from dspark_sim.metrics.run_summary import BudgetStats, DomainStats, PrefixStats, RecordMetrics, RunSummary
from dspark_sim.names import DOMAINS

if TYPE_CHECKING:
    from dspark_sim.metrics.columns import StepLog
    from dspark_sim.serving.prefix import CacheTotals

PERCENTILES = (("mean", None), ("median", 50), ("p90", 90), ("p99", 99))
RECORD_STATS = (("mean", None), ("p50", 50), ("p99", 99))
# The columns record_metrics reads.
RECORD_REQUESTS = ("request_id", "arrival_s", "output_tokens", "ttft_ms", "tpot_ms", "e2el_ms", "finish_s")
RECORD_STEPS = ("step_s", "decode_reqs", "verify_tokens", "accepted_tokens", "prefill_tokens")


def weighted_percentile(values: np.ndarray, counts: np.ndarray, q: float) -> float:
    """``np.percentile(np.repeat(values, counts), q)`` (linear) without expanding."""
    order = np.argsort(values, kind="stable")
    v, c = values[order], counts[order]
    cum = np.cumsum(c)
    pos = q / 100.0 * (cum[-1] - 1)
    lo, hi = int(np.floor(pos)), int(np.ceil(pos))
    v_lo = v[np.searchsorted(cum, lo, side="right")]
    v_hi = v[np.searchsorted(cum, hi, side="right")]
    return float(v_lo + (v_hi - v_lo) * (pos - lo))


def latency_stats(name: str, values: np.ndarray, stats=PERCENTILES, empty=None) -> dict:
    """``{label}_{name}_ms`` for each (label, percentile or None for the mean) of ``stats``,
    over the values that are not NaN; ``empty`` when there are none."""
    values = values[~np.isnan(values)]
    out = {}
    for label, q in stats:
        key = f"{label}_{name}_ms"
        if values.size == 0:
            out[key] = empty
        else:
            out[key] = float(values.mean() if q is None else np.percentile(values, q))
    return out


def token_gap_itl(gap_s: np.ndarray, count: np.ndarray) -> dict:
    """ITL statistics over per-token gaps: ``count[i]`` gaps of ``gap_s[i]`` seconds (summary.json)."""
    out = {}
    for label, q in PERCENTILES:
        key = f"{label}_itl_ms"
        if count.sum() == 0:
            out[key] = None
        elif q is None:
            out[key] = float((gap_s * count).sum() / count.sum() * 1e3)
        else:
            out[key] = weighted_percentile(gap_s, count, q) * 1e3
    return out


def step_itl(step_s: np.ndarray, decode_reqs: np.ndarray) -> dict:
    """ITL statistics over decode steps: each step's duration once per request it decoded (a record)."""
    has = decode_reqs > 0
    gaps, weights = step_s[has] * 1e3, decode_reqs[has].astype(np.int64)
    out = {}
    for label, q in RECORD_STATS:
        if not weights.sum():
            out[f"{label}_itl_ms"] = math.nan
        elif q is None:
            out[f"{label}_itl_ms"] = float((gaps * weights).sum() / weights.sum())
        else:
            out[f"{label}_itl_ms"] = weighted_percentile(gaps, weights, q)
    return out


def record_metrics(record: Record) -> RecordMetrics:
    """Throughput, latency statistics, accept length and verify tokens of a run record
    (columns ``RECORD_REQUESTS`` and ``RECORD_STEPS``)."""
    req, steps = record.requests, record.steps
    duration = req.finish_s.max() - req.arrival_s.min() if req.finish_s.size else 0.0
    m = {"requests": int(req.request_id.size),
         "output_throughput": float(req.output_tokens.sum() / duration) if duration > 0 else 0.0}
    for name in ("ttft", "tpot", "e2el"):
        m.update(latency_stats(name, getattr(req, f"{name}_ms"), RECORD_STATS, math.nan))
    dec = steps.decode_reqs
    m.update(step_itl(steps.step_s, dec))
    # steps.csv accepted_tokens: tokens the decoding requests emitted (accepted drafts + bonus)
    m["mean_accept_length"] = float(steps.accepted_tokens.sum() / dec.sum()) if dec.sum() else math.nan
    has = dec > 0
    m["mean_verify_tokens_per_step"] = float(steps.verify_tokens[has].mean()) if has.any() else math.nan
    return RecordMetrics(**m)


def summarize(result) -> RunSummary:
    """Everything ``summary.json`` holds, from a :class:`RunResult`."""
    col, scen = result.collector, result.scenario
    req, steps, gaps = col.requests, col.steps, col.gaps
    num_gpus = scen.deployment.num_gpus
    done = len(req)
    duration = float(req.finish_s.max()) if done else 0.0
    out_tok = int(req.output_tokens.sum())
    in_tok = int(req.prompt_tokens.sum())
    rate = (lambda x: x / duration) if duration > 0 else (lambda x: 0.0)
    s = {"name": scen.name, "model": scen.model, "gpu": scen.gpu, "num_gpus": num_gpus,
         "method": scen.speculation.method, "seed": scen.seed,
         "requests": result.num_arrived, "completed": done, "rejected": col.rejected,
         "rejected_reasons": dict(sorted(col.rejected_by.items())), "duration_s": duration,
         "total_input_tokens": in_tok, "total_output_tokens": out_tok,
         "request_throughput": rate(done), "output_throughput": rate(out_tok),
         "total_token_throughput": rate(out_tok + in_tok),
         "output_throughput_per_gpu": rate(out_tok) / num_gpus}
    s["engine"] = None if scen.engine.is_decoder else scen.engine.label  # the decoder's runs: no key
    for name in ("ttft", "tpot", "e2el"):
        s.update(latency_stats(name, getattr(req, f"{name}_ms")))
    s.update(token_gap_itl(gaps.gap_s, gaps.count))
    s.update(latency_stats("queue_delay", req.queue_delay_ms))
    tpot = req.tpot_ms
    tpot = tpot[tpot > 0]  # NaN: one token; 0: a front end delivered every token at once (no rate)
    s["mean_tok_per_s_per_user"] = float((1e3 / tpot).mean()) if tpot.size else None
    s["request_goodput"] = s["slo_attainment"] = None
    if scen.slo.given:
        good = scen.slo.good(req)
        s["request_goodput"] = rate(int(good.sum()))
        s["slo_attainment"] = float(good.mean()) if done else 0.0
    s.update(_speculation_stats(req, steps))
    s["num_steps"] = len(steps)
    s["mean_batch_size"] = float(steps.running.mean()) if len(steps) else 0.0
    s["mean_decode_batch_size"] = float(steps.decode_reqs.mean()) if len(steps) else 0.0
    s["num_preemptions"] = result.num_preemptions
    s["kv_capacity_tokens"] = result.kv_capacity_tokens
    s["kv_peak_fraction"] = result.kv_peak_tokens / result.kv_capacity_tokens
    s["per_domain"] = _per_domain(req)
    s["prefix_cache"] = None if result.prefix is None else prefix_stats(result.prefix, req, steps)
    s["provenance"] = result.provenance
    return RunSummary(**s)


def _speculation_stats(req: RequestColumns, steps: StepLog) -> dict:
    """The summary's speculation keys, by name."""
    decode_steps = int(steps.decode_reqs.sum())
    accepted = int(req.accepted_tokens.sum())
    verified = int(req.verified_drafts.sum())
    dec = steps.decode_reqs
    budget = steps.budget_k[dec > 0]
    verify = steps.verify_tokens
    return {
        "mean_accept_length": (accepted + decode_steps) / decode_steps if decode_steps else None,
        "acceptance_rate": accepted / verified if verified else None,
        "accepted_drafts": accepted,
        "verified_drafts": verified,
        "wasted_verify_tokens": verified - accepted,
        "wasted_verify_fraction": (verified - accepted) / verified if verified else None,
        "mean_verify_tokens_per_step": float(verify[dec > 0].mean()) if (dec > 0).any() else None,
        "mean_verify_tokens_per_request": float(verify.sum() / dec.sum()) if dec.sum() else None,
        "budget_k": BudgetStats(float(budget.mean()), float(np.percentile(budget, 10)),
                                float(np.percentile(budget, 50)), float(np.percentile(budget, 90)),
                                int(budget.max())) if budget.size else None,
    }


def prefix_stats(totals: CacheTotals, req: RequestColumns, steps: StepLog) -> PrefixStats:
    """The prefix cache's effect (a run whose requests carried prefix hash ids): the share of
    completed requests' prompt tokens their first prefill read from the cache (``hit_rate``)
    and of their hash blocks found cached (``block_hit_rate``), prompt tokens served from the
    cache over every admission (preempted requests' too) and those computed, evictions."""
    prompt = int(req.prompt_tokens.sum())
    cached = int(req.cached_tokens.sum())
    c = totals.counters
    return PrefixStats(enabled=totals.enabled, block_tokens=totals.block_tokens,
                       hash_block_tokens=totals.hash_block_tokens, hit_rate=cached / prompt if prompt else 0.0,
                       block_hit_rate=c.first_hit_blocks / c.first_blocks if c.first_blocks else 0.0,
                       mean_cached_tokens_per_request=cached / len(req) if len(req) else 0.0,
                       prefill_tokens_saved=c.hit_tokens, prefill_tokens_computed=int(steps.prefill_tokens.sum()),
                       evicted_blocks=c.evicted_blocks, evicted_tokens=c.evicted_tokens,
                       peak_cached_tokens=c.peak_tokens)


def _per_domain(req: RequestColumns) -> dict[str, DomainStats]:
    out = {}
    for i, name in enumerate(DOMAINS):
        sel = req.domain == i
        if not sel.any():
            continue
        acc = int(req.accepted_tokens[sel].sum())
        ver = int(req.verified_drafts[sel].sum())
        tpot = req.tpot_ms[sel]
        tpot = tpot[~np.isnan(tpot)]
        out[name] = DomainStats(completed=int(sel.sum()), acceptance_rate=acc / ver if ver else None,
                                accepted_drafts=acc, verified_drafts=ver,
                                mean_tpot_ms=float(tpot.mean()) if tpot.size else None,
                                mean_ttft_ms=float(req.ttft_ms[sel].mean()))
    return out
