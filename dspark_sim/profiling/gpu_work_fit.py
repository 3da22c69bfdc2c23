"""Fit the engines' MoE roofline (:class:`~dspark_sim.engines.GpuWork`) on published engine runs.

The roofline prices an MoE step by what it reads and computes; an engine's step of a few
requests takes longer, bound by its kernels' floors (a layer's dozen kernels each take a few
microseconds however little they do), and a request's first token comes later than its
prefill's work: a latency its neighbours share rather than queue behind (a run of 16 requests at
once sees about the TTFT a lone request does). Three kinds of term carry that, each fitted on the
runs it shows in:

* ``layer_s`` by :func:`~dspark_sim.cost.roofline.floor_kind` (the attention kind, ``gqa``, ``mla``,
  ``v4``, and where a GPU serves the checkpoint through other kernels the format besides:
  ``v4/fp4-experts-w4a16``, Marlin's on Hopper): the least time a layer of a forward takes,
  fitted on the TPOT of the runs of that kind at a concurrency of at most ``SMALL``; a substituted
  format's on its runs of one request only (its 16-request runs' prompts are priced by that
  format's FLOP/s share, fitted at the engine's cap, and come out 2-4x the published TTFT: their
  TPOT speaks to that share, not to the floor);
* ``first_token_layer_s`` by attention kind: a layer's share of the first token's latency beyond
  its steps (a model's layers times it), fitted on the TTFT of the runs of that kind at a
  concurrency of at most ``SMALL`` (where it is most of it);
* ``moe_bw_eff``: the share of HBM bandwidth the expert GEMMs reach, fitted on the TPOT of the
  runs without speculation from ``SMALL`` up to ``LARGE`` (beyond it a run's batch is the
  engine's cap and its queue sets its TTFT; with speculation the accept length, not published
  for DeepSeek-V4's MTP, confounds the step's time: those runs are checked, not fitted on). The
  runs at ``SMALL`` count for both this share and the floors: 16 requests' tokens already pick
  80-100 of a model's 128-384 experts (a quarter to two thirds of those a batch of a hundred
  reads), so their step is mostly expert reads, and a share fitted on the runs above ``SMALL``
  alone priced it 10-35 % over the engines' (DeepSeek-R1 and Qwen3-235B at 16 requests,
  calibration and check alike);
* ``flops_eff`` by the weight format a run's GPU serves its model in (the MoE kernels it runs:
  DeepSeek-V4's FP4 experts on Blackwell's FP4 path, or through Marlin's W4A16 on Hopper): the
  share of the tensor cores' FLOP/s the GEMMs reach at a large batch, fitted on the TPOT and
  output throughput of the runs without speculation at ``HUGE`` (the engine's batch at its cap,
  its prompts' prefill beside it; a run at a higher concurrency of the same source is the same
  steady state and is checked, not fitted on);
* ``eager_layer_s`` by attention kind: the host's time to run one layer of a forward eagerly,
  which SGLang does in a step with prompt tokens in which a DP-attention rank is idle
  (:class:`~dspark_sim.engines.step_cost.EagerPrefill`), fitted on the TPOT and output throughput
  of the runs with DP attention and speculative decoding up to ``LARGE`` (where every prompt step
  keeps the other ranks idle).

So each regime of batch has its term: a few requests the layer floors, from 16 to hundreds the
expert bandwidth, the engine's cap the compute efficiency, DP attention's prompt steps the eager launches.

Each term in turn (coordinate descent, ``ROUNDS`` rounds) minimises the squared log errors of
its runs, every candidate replayed in full by the simulator (bounded Brent search on the
term); deterministic. The runs are the caller's (``benchmarks/external.py calibrate`` passes its
'calibrate' cases); nothing here reads a check case.
"""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from dspark_sim.catalog import get_gpu, get_model, served_format
from dspark_sim.cost.roofline import RooflineParams, attention_kind, floor_kind
from dspark_sim.engines.model import GpuWork
from dspark_sim.engines.fit import replay
from dspark_sim.scenario import Scenario

SMALL = 16  # concurrency at which a run's steps are few requests' (floors, not bandwidth)
LARGE = 256  # above it a run's steps are as wide as the engine's cap and its queue sets TTFT
HUGE = 1024  # the concurrency whose runs fit the compute efficiency (the engine's cap, a queue beyond)
ROUNDS = 2
DEFAULT_FLOPS_EFF = RooflineParams().flops_eff  # a format's GEMMs before the fit (the plain roofline's)
KINDS = ("gqa", "mla", "v4")
BOUNDS = {"layer_s": (0.0, 400e-6), "first_token_layer_s": (0.0, 20e-3), "moe_bw_eff": (0.15, 1.0),
          "flops_eff": (0.05, 1.0), "eager_layer_s": (0.0, 20e-3)}
XATOL = {"layer_s": 1e-6, "first_token_layer_s": 3e-5, "moe_bw_eff": 0.01, "flops_eff": 0.01, "eager_layer_s": 1e-4}


def with_gpu_work(scenario: Scenario, work: GpuWork) -> Scenario:
    """``scenario`` under the same engine with another engines' MoE roofline."""
    return replace(scenario, engine=replace(scenario.engine, gpu_work=work))


def _set(work: GpuWork, term: str, value: float) -> GpuWork:
    name, _, kind = term.partition(":")
    if kind:  # a term by attention kind
        by_kind = dict(getattr(work, name))
        by_kind[kind] = value
        return replace(work, **{name: tuple(sorted(by_kind.items()))})
    return replace(work, **{term: value})


def _get(work: GpuWork, term: str) -> float:
    name, _, kind = term.partition(":")
    if kind:
        return dict(getattr(work, name)).get(kind, DEFAULT_FLOPS_EFF if name == "flops_eff" else 0.0)
    return getattr(work, term) or 1.0


def groups(scenarios: list[Scenario], measured: list[dict]) -> dict[str, list[tuple[int, str]]]:
    """Which run's which metric each term is fitted on (see the module docstring)."""
    out: dict[str, list[tuple[int, str]]] = {}
    for i, (scenario, m) in enumerate(zip(scenarios, measured)):
        concurrency = scenario.workload.max_concurrency or math.inf
        small = concurrency <= SMALL
        model = get_model(scenario.model)
        kind = attention_kind(model)
        tpot = next((k for k in ("median_tpot_ms", "mean_tpot_ms") if m.get(k)), None)
        ttft = next((k for k in ("median_ttft_ms", "mean_ttft_ms") if m.get(k)), None)
        served = served_format(model.weight_format, get_gpu(scenario.gpu).fp4).name
        if concurrency == HUGE and scenario.speculation.method == "none":
            out.setdefault(f"flops_eff:{served}", []).extend(
                [(i, k) for k in (tpot, "output_throughput") if k and m.get(k)])
        if concurrency > LARGE:
            continue
        if scenario.deployment.dp_attention and scenario.speculation.method != "none":
            out.setdefault(f"eager_layer_s:{kind}", []).extend(
                [(i, k) for k in (tpot, "output_throughput") if k and m.get(k)])
        floor = floor_kind(model, served)  # a substituted format's: its lone requests alone
        if (concurrency == 1 or small and floor == kind) and tpot:
            out.setdefault(f"layer_s:{floor}", []).append((i, tpot))
        if small:
            out.setdefault(f"first_token_layer_s:{kind}", []).extend([(i, ttft)] if ttft else [])
        if concurrency >= SMALL and scenario.speculation.method == "none" and tpot:  # no acceptance to confound
            out.setdefault("moe_bw_eff", []).append((i, tpot))
    return {term: pairs for term, pairs in out.items() if pairs}


def fit_gpu_work(scenarios: list[Scenario], measured: list[dict], start: GpuWork, progress=None,
                 only: tuple[str, ...] = ()) -> GpuWork:
    """``start`` with each term fitted on its runs (see the module docstring); ``only``: fit just
    the terms of these names (``eager_layer_s``), the others held at ``start``'s; ``fitted_from``
    names the scenarios."""
    from scipy.optimize import minimize_scalar

    work = replace(start, fitted_from=tuple(s.name for s in scenarios))
    plan = {term: pairs for term, pairs in groups(scenarios, measured).items()
            if not only or term.split(":")[0] in only}

    def cost(candidate: GpuWork, pairs) -> float:
        total, sims = 0.0, {}
        for i, key in pairs:
            if i not in sims:
                sims[i] = replay(with_gpu_work(scenarios[i], candidate))
            total += math.log(max(sims[i][key], 1e-12) / measured[i][key]) ** 2
        if progress is not None:
            progress(candidate)
        return total

    for _ in range(ROUNDS):
        for term, pairs in plan.items():
            lo, hi = BOUNDS[term.split(":")[0]]
            fit = minimize_scalar(lambda v: cost(_set(work, term, float(v)), pairs), bounds=(lo, hi),
                                  method="bounded", options={"xatol": XATOL[term.split(":")[0]], "maxiter": 25})
            best = float(fit.x) if fit.fun <= cost(work, pairs) else _get(work, term)
            work = _set(work, term, best)
    return work


def errors(scenarios: list[Scenario], measured: list[dict], work: GpuWork) -> list[dict]:
    """Each run's log error of each metric it measured, replayed with ``work``."""
    out = []
    for scenario, m in zip(scenarios, measured):
        sim = replay(with_gpu_work(scenario, work))
        out.append({k: float(np.log(max(sim[k], 1e-12) / v)) for k, v in m.items() if k in sim and v})
    return out


__all__ = ["BOUNDS", "HUGE", "KINDS", "LARGE", "SMALL", "errors", "fit_gpu_work", "groups", "with_gpu_work"]
