"""The run summary: ``vllm bench serve`` keys plus capacity and speculation metrics."""
from __future__ import annotations

import numpy as np

from dspark_sim.names import DOMAINS
from dspark_sim.scenario import Slo

PERCENTILES = (("mean", None), ("median", 50), ("p90", 90), ("p99", 99))


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


def _stats(name: str, values: np.ndarray, out: dict) -> None:
    values = values[~np.isnan(values)]
    for label, q in PERCENTILES:
        key = f"{label}_{name}_ms"
        if values.size == 0:
            out[key] = None
        else:
            out[key] = float(values.mean() if q is None else np.percentile(values, q))


def _itl_stats(gap_s: np.ndarray, count: np.ndarray, out: dict) -> None:
    for label, q in PERCENTILES:
        key = f"{label}_itl_ms"
        if count.sum() == 0:
            out[key] = None
        elif q is None:
            out[key] = float((gap_s * count).sum() / count.sum() * 1e3)
        else:
            out[key] = weighted_percentile(gap_s, count, q) * 1e3


def good_mask(req, slo: Slo) -> np.ndarray:
    """Requests that meet every SLO given (TPOT of single-token outputs counts as met)."""
    ok = np.ones(req["ttft_ms"].size, dtype=bool)
    if slo.ttft_ms is not None:
        ok &= req["ttft_ms"] <= slo.ttft_ms
    if slo.tpot_ms is not None:
        tpot = req["tpot_ms"]
        ok &= np.isnan(tpot) | (tpot <= slo.tpot_ms)
    return ok


def summarize(result) -> dict:
    """Everything ``summary.json`` holds, from a :class:`RunResult`."""
    col, scen = result.collector, result.scenario
    req, steps, gaps = col.requests, col.steps, col.gaps
    num_gpus = scen.deployment.num_gpus
    done = req.n
    duration = float(req["finish_s"].max()) if done else 0.0
    out_tok = int(req["output_tokens"].sum())
    in_tok = int(req["prompt_tokens"].sum())
    rate = (lambda x: x / duration) if duration > 0 else (lambda x: 0.0)
    s = {"name": scen.name, "model": scen.model, "gpu": scen.gpu, "num_gpus": num_gpus,
         "method": scen.speculation.method, "seed": scen.seed,
         "completed": done, "num_rejected": col.rejected, "duration_s": duration,
         "total_input_tokens": in_tok, "total_output_tokens": out_tok,
         "request_throughput": rate(done), "output_throughput": rate(out_tok),
         "total_token_throughput": rate(out_tok + in_tok),
         "output_throughput_per_gpu": rate(out_tok) / num_gpus}
    for name in ("ttft", "tpot", "e2el"):
        _stats(name, req[f"{name}_ms"], s)
    _itl_stats(gaps["gap_s"], gaps["count"], s)
    _stats("queue_delay", req["queue_delay_ms"], s)
    tpot = req["tpot_ms"]
    tpot = tpot[~np.isnan(tpot)]
    s["mean_tok_per_s_per_user"] = float((1e3 / tpot).mean()) if tpot.size else None
    if scen.slo.given:
        good = good_mask(req, scen.slo)
        s["request_goodput"] = rate(int(good.sum()))
        s["slo_attainment"] = float(good.mean()) if done else 0.0
    s.update(_speculation_stats(req, steps))
    s["num_steps"] = steps.n
    s["mean_batch_size"] = float(steps["running"].mean()) if steps.n else 0.0
    s["mean_decode_batch_size"] = float(steps["decode_reqs"].mean()) if steps.n else 0.0
    s["num_preemptions"] = result.num_preemptions
    s["kv_capacity_tokens"] = result.kv_capacity_tokens
    s["kv_peak_fraction"] = result.kv_peak_tokens / result.kv_capacity_tokens
    s["per_domain"] = _per_domain(req)
    s["sim_wall_s"] = None  # filled by the caller; kept out of determinism checks
    return s


def _speculation_stats(req, steps) -> dict:
    decode_steps = int(steps["decode_reqs"].sum())
    accepted = int(req["accepted_tokens"].sum())
    verified = int(req["verified_drafts"].sum())
    budget = steps["budget_k"][steps["decode_reqs"] > 0]
    dec = steps["decode_reqs"]
    verify = steps["verify_tokens"]
    return {
        "mean_accept_length": (accepted + decode_steps) / decode_steps if decode_steps else None,
        "acceptance_rate": accepted / verified if verified else None,
        "accepted_drafts": accepted,
        "verified_drafts": verified,
        "wasted_verify_tokens": verified - accepted,
        "wasted_verify_fraction": (verified - accepted) / verified if verified else None,
        "mean_verify_tokens_per_step": float(verify[dec > 0].mean()) if (dec > 0).any() else None,
        "mean_verify_tokens_per_request": float(verify.sum() / dec.sum()) if dec.sum() else None,
        "budget_k": {"mean": float(budget.mean()), "p10": float(np.percentile(budget, 10)),
                     "median": float(np.percentile(budget, 50)), "p90": float(np.percentile(budget, 90)),
                     "max": int(budget.max())} if budget.size else None,
    }


def _per_domain(req) -> dict:
    out = {}
    for i, name in enumerate(DOMAINS):
        sel = req["domain"] == i
        if not sel.any():
            continue
        acc = int(req["accepted_tokens"][sel].sum())
        ver = int(req["verified_drafts"][sel].sum())
        tpot = req["tpot_ms"][sel]
        tpot = tpot[~np.isnan(tpot)]
        out[name] = {"completed": int(sel.sum()),
                     "acceptance_rate": acc / ver if ver else None,
                     "accepted_drafts": acc, "verified_drafts": ver,
                     "mean_tpot_ms": float(tpot.mean()) if tpot.size else None,
                     "mean_ttft_ms": float(req["ttft_ms"][sel].mean())}
    return out
