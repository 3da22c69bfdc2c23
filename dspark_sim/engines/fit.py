"""Fit an engine's host terms on top of the GPU's kernel profile, from the engine's own files.

Timed steps (``dspark_sps_profiler`` output, a step CSV) give the per-step host time
directly: what a step took beyond the GPU work the profile predicts for it, fitted as
``step_host_s + step_host_s_per_req x R`` (least squares, terms >= 0); for an engine that
overlaps host and GPU, a step that took longer than its GPU work is the host's, and the
others (host time hidden behind the GPU's) are left out. Serving benchmarks
(``sglang.bench_serving``, ``vllm bench serve``) are replayed in the simulator: the
requests of each run (their lengths when the file kept them, else the run's mean
lengths) arrive at the run's rate, and the per-step host time and the front end's times
(intake, streaming) are moved together until the runs' medians (TTFT, TPOT, output throughput) match as well as one
set of terms can (least squares on log errors, every candidate replayed in full). The result is written as a calibration file that
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
from dspark_sim.engines.files import BenchRun, StepRows, read_engine_file
from dspark_sim.engines.model import CALIBRATION_FORMAT, EngineTerms
from dspark_sim.errors import InputError
from dspark_sim.scenario import Scenario, Workload
from dspark_sim.workload import SyntheticConfig
from dspark_sim.workload.synthetic import LengthDist

ALL_AT_ONCE_RATE = 1e9  # requests a second standing for "all at once" (request_rate inf)
MAX_HOST_S = 0.05
# the terms a replay fit moves, the unit its search steps in, the most each may take
FITTED_TERMS = ("step_host_s", "step_host_s_per_req", "stream_s", "frontend_s")
TERM_UNIT_S = {"step_host_s": 1e-3, "step_host_s_per_req": 1e-5, "stream_s": 1e-5, "frontend_s": 1e-3}
MAX_TERM_S = {"step_host_s": MAX_HOST_S, "step_host_s_per_req": MAX_HOST_S, "stream_s": MAX_HOST_S,
              "frontend_s": 10.0}
FITTED_METRICS = ("median_ttft_ms", "median_tpot_ms", "mean_ttft_ms", "mean_tpot_ms", "output_throughput")
MAX_FIT_STEPS = 25  # trust-region steps, at most (each replays the runs, and len(terms) more for the Jacobian)
# the terms whose start is also tried at these multiples of their unit (see _best_start)
START_TERMS, START_UNITS = ("step_host_s_per_req", "stream_s", "frontend_s"), (10, 30)
MAX_FIT_EVALS = (1 + len(START_UNITS)) ** len(START_TERMS) + MAX_FIT_STEPS * (1 + len(FITTED_TERMS))  # starts first

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
    from dspark_sim.serving.simulator import simulate
    from dspark_sim.metrics.summary import summarize

    result = simulate(scenario)
    s = summarize(result)
    dec = result.collector.steps.decode_reqs.astype(float)
    return {"token_batch": float((dec * dec).sum() / dec.sum()) if dec.sum() else 0.0,  # an output token's batch
            "median_ttft_ms": s.median_ttft_ms, "median_tpot_ms": s.median_tpot_ms,
            "mean_ttft_ms": s.mean_ttft_ms, "mean_tpot_ms": s.mean_tpot_ms,
            "mean_accept_length": s.mean_accept_length,
            "output_throughput": s.output_throughput, "num_rejected": s.rejected,
            "mean_decode_batch_size": s.mean_decode_batch_size}


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
                     progress=None) -> EngineTerms:
    """``terms`` with the front end's times (a request's intake, a streamed message) and, when
    ``fit_step``, the per-step host time (bias and per request of a step) moved so the replayed
    ``scenarios`` match ``measured``.

    One objective over every run: the sum of squared log errors of each median the run measured
    (``median_ttft_ms``, ``median_tpot_ms``, ``output_throughput``), each run replayed in full for
    every candidate (a burst's batch, and so its TPOT, moves with the terms: the fit never
    extrapolates from one replay). Bounded least squares (trust region, the Jacobian by finite
    differences of 20 % a term, wide enough to see past a replay's step-to-step graininess) in
    ms, 10 us a request, 10 us a message and ms, every term >= 0, from the best of a few starts
    (:func:`_best_start`; 1 unit where the terms given are 0); deterministic. A poor fit raises
    nothing: the caller reports how well each run replays."""
    from scipy.optimize import least_squares

    names = FITTED_TERMS if fit_step else FITTED_TERMS[-2:]  # the front end's terms: streaming, intake
    wanted = [[(k, v) for k, v in m.items() if k in FITTED_METRICS and v] for m in measured]
    if not any(wanted):
        return terms
    evals = [0]

    def at(x) -> EngineTerms:
        return replace(terms, **{n: min(max(float(xi), 0.0) * TERM_UNIT_S[n], MAX_TERM_S[n])
                                 for n, xi in zip(names, x)})

    def residuals(x) -> np.ndarray:
        t, out = at(x), []
        for scenario, want in zip(scenarios, wanted):
            if want:
                sim = replay(with_terms(scenario, t))
                out += [math.log(max(sim[k], 1e-9) / v) for k, v in want]
        evals[0] += 1
        if progress is not None:
            progress(evals[0], MAX_FIT_EVALS)
        return np.array(out)

    x0 = _best_start(residuals, names, np.array([getattr(terms, n) / TERM_UNIT_S[n] or 1.0 for n in names]))
    upper = np.array([MAX_TERM_S[n] / TERM_UNIT_S[n] for n in names])
    fit = least_squares(residuals, x0, bounds=(np.zeros(len(names)), upper), method="trf", diff_step=0.2,
                        x_scale=np.ones(len(names)), ftol=1e-6, xtol=1e-4, max_nfev=MAX_FIT_STEPS)
    return at(fit.x)


def _best_start(residuals, names, x0: np.ndarray) -> np.ndarray:
    """Of ``x0`` and ``x0`` with any of its ``START_TERMS`` at each of ``START_UNITS`` units (10 and
    30 (100 and 300 us; 10 and 30 ms), the start that replays best: host time an overlapped
    step hides behind the GPU's moves nothing, so a fit started there would stay."""
    starts = [x0]
    for name in START_TERMS:
        if name in names:
            starts += [np.where(np.array(names) == name, scale, start) for start in list(starts)
                       for scale in START_UNITS]
    costs = [float(np.sum(residuals(x) ** 2)) for x in starts]
    return starts[int(np.argmin(costs))]


def fit_bench_terms(base: Scenario, runs: list[BenchRun], terms: EngineTerms, *, fit_step: bool,
                    folder: Path, progress=None) -> EngineTerms:
    """:func:`fit_replay_terms` on ``base`` replaying each of ``runs``."""
    scenarios = [replay_scenario(base, run, folder) for run in runs]
    measured = [{"median_tpot_ms": r.median_tpot_ms, "median_ttft_ms": r.median_ttft_ms,
                 "output_throughput": r.output_throughput} for r in runs]
    return fit_replay_terms(scenarios, measured, terms, fit_step=fit_step, progress=progress)


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
        if base.engine.overlapped:  # a step shows host time only beyond its GPU work; there it is the host's
            shows = residual > 0
            reqs, residual = reqs[shows], np.concatenate([s.step_s for s in steps])[shows]
        bias, per_req = fit_step_terms(reqs, residual) if reqs.size else (0.0, 0.0)
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
