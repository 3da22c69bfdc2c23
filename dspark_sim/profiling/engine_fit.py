"""Fit an engine's host terms on top of the GPU's kernel profile, from the engine's own files.

Timed steps (``dspark_sps_profiler`` output, a step CSV) give the per-step host time
directly: what a step took beyond the GPU work the profile predicts for it, fitted as
``step_host_s + step_host_s_per_req x R`` (least squares, terms >= 0). Serving benchmarks
(``sglang.bench_serving``, ``vllm bench serve``) are replayed in the simulator: the
requests of each run (their lengths when the file kept them, else the run's mean
lengths) arrive at the run's rate, and the per-step host time is moved until the median
TPOT of the runs matches, then the front-end time until the median TTFT does (medians
over runs, so one run does not decide). The result is written as a calibration file that
names every file it was fitted from and how well it replays each.
"""
from __future__ import annotations

import hashlib
import json
import math
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np

from dspark_sim.cost.base import DraftWork, StepWork
from dspark_sim.engines import CALIBRATION_FORMAT, EngineTerms
from dspark_sim.errors import InputError
from dspark_sim.profiling.engine_files import BenchRun, StepRows, read_engine_file
from dspark_sim.scenario import Scenario, Workload
from dspark_sim.workload import SyntheticConfig
from dspark_sim.workload.synthetic import LengthDist

ALL_AT_ONCE_RATE = 1e9  # requests a second standing for "all at once" (request_rate inf)
MAX_HOST_S = 0.05
HOST_ROUNDS = 3  # replays of the runs while the host terms settle
FRONTEND_ROUNDS = 2  # secant steps on the front end

def with_terms(scenario: Scenario, terms: EngineTerms) -> Scenario:
    """``scenario`` under the same engine with other host terms."""
    return replace(scenario, engine=replace(scenario.engine, terms=terms))


def replay_scenario(base: Scenario, run: BenchRun, folder: Path, *, seed: int = 0) -> Scenario:
    """``base`` serving ``run``'s requests: its own lengths (and start times) when the file kept
    them, else ``completed`` requests of the run's mean lengths, at its request rate (all at
    once for inf). A client concurrency limit becomes the engine's running cap (its queue
    time then counts in TTFT, which the client's does not)."""
    dep = base.deployment
    if run.max_concurrency is not None:
        dep = replace(dep, max_running_requests=min(dep.max_running_requests, run.max_concurrency))
    if run.detailed:
        n = len(run.input_lens)
        if run.start_times_s is not None:
            t0 = min(run.start_times_s)
            arrivals = [s - t0 for s in run.start_times_s]
        elif math.isinf(run.request_rate):
            arrivals = [0.0] * n
        else:
            rng = np.random.default_rng(seed)
            arrivals = np.concatenate([[0.0], np.cumsum(rng.exponential(1.0 / run.request_rate, n - 1))]).tolist()
        order = sorted(range(n), key=lambda i: arrivals[i])
        trace = folder / f"replay_{abs(hash((run.source, run.duration_s))) % 10**8}.jsonl"
        with trace.open("w") as out:
            for i in order:
                if run.input_lens[i] >= 1 and run.output_lens[i] >= 1:
                    out.write(json.dumps({"timestamp": arrivals[i] * 1e3, "input_length": run.input_lens[i],
                                          "output_length": run.output_lens[i]}) + "\n")
        workload = Workload(trace=trace, format="mooncake")
    else:
        rate = ALL_AT_ONCE_RATE if math.isinf(run.request_rate) else run.request_rate
        mean_in = max(1, round(run.total_input_tokens / run.completed))
        mean_out = max(1, round(run.total_output_tokens / run.completed))
        workload = Workload(synthetic=SyntheticConfig(
            num_requests=run.completed, rate_per_s=rate, prompt_tokens=LengthDist("constant", mean=mean_in),
            output_tokens=LengthDist("constant", mean=mean_out)))
    return replace(base, workload=workload, deployment=dep, seed=seed)


def replay(scenario: Scenario) -> dict:
    """Median TTFT and TPOT (ms) and output tokens a second of one simulated run."""
    from dspark_sim.engine.simulator import simulate
    from dspark_sim.metrics.summary import summarize

    result = simulate(scenario)
    s = summarize(result)
    dec = result.collector.steps["decode_reqs"].astype(float)
    return {"token_batch": float((dec * dec).sum() / dec.sum()) if dec.sum() else 0.0,  # an output token's batch
            "median_ttft_ms": s["median_ttft_ms"], "median_tpot_ms": s["median_tpot_ms"],
            "output_throughput": s["output_throughput"], "num_rejected": s["rejected"],
            "mean_decode_batch_size": s["mean_decode_batch_size"]}


def step_residuals(base: Scenario, rows: StepRows) -> np.ndarray:
    """Measured step seconds less the GPU work the scenario's cost model gives each step."""
    from dspark_sim.cost import scenario_cost

    cost = scenario_cost(with_terms(base, EngineTerms()), warn=False)
    out = np.empty(rows.step_s.size)
    for i, (r, v, c, s) in enumerate(zip(rows.reqs.tolist(), rows.verify_tokens.tolist(),
                                         rows.context.tolist(), rows.step_s.tolist())):
        block = round(v / r) - 1
        draft = DraftWork("block", r, block, c) if block > 0 else None
        work = StepWork(decode_reqs=r, verify_tokens=v, decode_context_tokens=c, draft=draft, running_reqs=r,
                        decode_max_context=c // r if r else 0)
        out[i] = s - cost.step_s(work)
    return out


def fit_step_terms(reqs: np.ndarray, residual_s: np.ndarray) -> tuple[float, float]:
    """``(bias_s, per_req_s)`` >= 0 fitting ``residual = bias + per_req x R`` by least squares."""
    reqs = np.asarray(reqs, dtype=float)
    a = np.column_stack([np.ones(reqs.size), reqs])
    bias, per_req = np.linalg.lstsq(a, residual_s, rcond=None)[0] if reqs.size > 1 and np.ptp(reqs) else \
        (float(np.median(residual_s)), 0.0)
    if per_req < 0:
        bias, per_req = float(np.median(residual_s)), 0.0
    if bias < 0:
        per_req = max(0.0, float(np.dot(reqs, residual_s) / np.dot(reqs, reqs)))
        bias = 0.0
    return min(max(float(bias), 0.0), MAX_HOST_S), min(max(float(per_req), 0.0), MAX_HOST_S)


def fit_replay_terms(scenarios: list[Scenario], measured: list[dict], terms: EngineTerms, *, fit_step: bool,
                     frontend_from: list[bool] | None = None, progress=None) -> EngineTerms:
    """``terms`` with the per-step host time (when ``fit_step``) and the front-end time moved so the
    replayed ``scenarios`` match ``measured`` (``median_tpot_ms``, ``median_ttft_ms``).

    Host time: each output token of a run waits about one step's host time, ``step_host_s +
    step_host_s_per_req x R`` with R the decode batch an output token sees, so the TPOT gaps of the runs
    are fitted by least squares (terms >= 0) on their batches, and the replay repeated (a few
    rounds, the batches moving with the terms); runs at one batch size fit the bias alone.
    Front end: its service time moves until the median TTFT over the runs ``frontend_from``
    marks (default all) matches; the front end is fitted first, then the host time with it in
    place, then the front end again."""
    def results(t: EngineTerms, which: list[Scenario] | None = None) -> list[dict]:
        out = []
        for scenario in scenarios if which is None else which:
            out.append(replay(with_terms(scenario, t)))
            if progress is not None:
                progress(len(out), len(scenarios))
        return out

    tpot = [i for i, m in enumerate(measured) if m.get("median_tpot_ms") is not None]
    chosen = frontend_from or [True] * len(scenarios)
    ttft = [i for i, m in enumerate(measured) if chosen[i] and m.get("median_ttft_ms") is not None]

    def fit_host(terms: EngineTerms) -> EngineTerms:
        for _ in range(HOST_ROUNDS):
            sim = results(terms)
            batch = np.array([max(sim[i]["token_batch"], 1.0) for i in tpot])
            need = np.array([(measured[i]["median_tpot_ms"] - sim[i]["median_tpot_ms"]) / 1e3 for i in tpot]) \
                + terms.step_host_s + terms.step_host_s_per_req * batch
            bias, per_req = fit_step_terms(batch, need)
            moved = abs(bias - terms.step_host_s) + abs(per_req - terms.step_host_s_per_req) * batch.max()
            terms = replace(terms, step_host_s=bias, step_host_s_per_req=per_req)
            if moved < 2e-5:
                break
        return terms

    def excess_s(terms: EngineTerms, frontend: float) -> float:  # median simulated less measured TTFT
        sim = results(replace(terms, frontend_s=frontend), [scenarios[i] for i in ttft])
        return float(np.median([(s["median_ttft_ms"] - measured[i]["median_ttft_ms"]) / 1e3
                                for s, i in zip(sim, ttft)]))

    def fit_frontend(terms: EngineTerms) -> EngineTerms:
        # one request's service time is the gap when nothing queues at the front end; a burst
        # queues there, so a secant step or two on the median TTFT gap finds the service time
        if not ttft:
            return replace(terms, frontend_s=0.0)
        low, g_low = 0.0, excess_s(terms, 0.0)
        high = min(max(-g_low, 0.0), 10.0)
        for _ in range(FRONTEND_ROUNDS):
            if high <= 0.0:
                break
            g_high = excess_s(terms, high)
            if abs(g_high) < 1e-3 or g_high == g_low:
                break
            low, g_low, high = high, g_high, min(max(high - g_high * (high - low) / (g_high - g_low), 0.0), 10.0)
        return replace(terms, frontend_s=high)

    # the front end sets how fast a burst reaches the batch and the host time how fast the batch
    # runs: each fitted with the other in place
    terms = fit_frontend(terms)
    if fit_step and tpot:
        terms = fit_frontend(fit_host(terms))
    return terms


def fit_bench_terms(base: Scenario, runs: list[BenchRun], terms: EngineTerms, *, fit_step: bool,
                    folder: Path, progress=None) -> EngineTerms:
    """:func:`fit_replay_terms` on ``base`` replaying each of ``runs``."""
    scenarios = [replay_scenario(base, run, folder) for run in runs]
    measured = [{"median_tpot_ms": r.median_tpot_ms, "median_ttft_ms": r.median_ttft_ms} for r in runs]
    bursts = [math.isinf(r.request_rate) for r in runs]  # where requests queue at the front end
    return fit_replay_terms(scenarios, measured, terms, fit_step=fit_step, progress=progress,
                            frontend_from=bursts if any(bursts) else None)


def _sha256(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def calibrate(base: Scenario, files: list[str | Path], *, progress=None) -> dict:
    """The calibration of ``base``'s engine from ``files`` (see the module docstring), as the JSON
    object :func:`~dspark_sim.engines.load_calibration` reads."""
    if base.engine.is_decoder:
        raise InputError(base.file, "engine.name", "decoder", "engine-fit calibrates sglang, vllm or trtllm; "
                         "the decoder's host time is fitted into its profile by dspark-profile fit")
    runs, steps, read = [], [], []
    for path in files:
        got = read_engine_file(path)
        if isinstance(got, StepRows):
            steps.append(got)
            read.append({"file": str(path), "format": got.format, "rows": int(got.step_s.size)})
        else:
            runs.extend(got)
            read.append({"file": str(path), "format": got[0].format, "runs": len(got)})
    terms = EngineTerms()
    if steps:
        reqs = np.concatenate([s.reqs for s in steps])
        residual = np.concatenate([step_residuals(base, s) for s in steps])
        bias, per_req = fit_step_terms(reqs, residual)
        terms = replace(terms, step_host_s=bias, step_host_s_per_req=per_req)
    with tempfile.TemporaryDirectory() as tmp:
        if runs:
            terms = fit_bench_terms(base, runs, terms, fit_step=not steps, folder=Path(tmp), progress=progress)
        names = ", ".join(sorted({Path(f).name for f in files}))
        terms = replace(terms, source=f"fitted by dspark-sim engine-fit from {names} on {base.gpu}/{base.model}")
        checks = [{"file": run.source, **_errors(run, replay(with_terms(replay_scenario(base, run, Path(tmp)),
                                                                         terms)))} for run in runs]
    return {"format": CALIBRATION_FORMAT, "format_version": 1, "engine": base.engine.name,
            "version": base.engine.label.split(" ", 1)[1], "gpu": base.gpu, "model": base.model,
            "tp": base.deployment.tp, "terms": terms.to_json_dict(),
            "fitted_from": [{**entry, "sha256": _sha256(entry["file"])} for entry in read],
            "step_rows": int(sum(s.step_s.size for s in steps)), "bench_runs": len(runs), "replay": checks,
            "note": "host terms are host time: they do not move when the GPU changes"}


def _errors(run: BenchRun, sim: dict) -> dict:
    def err(sim_value, measured):
        return sim_value / measured - 1.0 if measured else None
    return {"measured": {"median_ttft_ms": run.median_ttft_ms, "median_tpot_ms": run.median_tpot_ms,
                         "output_throughput": run.output_throughput},
            "predicted": {k: sim[k] for k in ("median_ttft_ms", "median_tpot_ms", "output_throughput")},
            "error": {"ttft": err(sim["median_ttft_ms"], run.median_ttft_ms),
                      "tpot": err(sim["median_tpot_ms"], run.median_tpot_ms),
                      "throughput": err(sim["output_throughput"], run.output_throughput)}}


__all__ = ["calibrate", "fit_bench_terms", "fit_replay_terms", "fit_step_terms", "replay", "replay_scenario", "step_residuals",
           "with_terms"]
