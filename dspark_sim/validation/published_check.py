"""Published runs of the serving engines replayed: calibrate, check and diagnose.

* :func:`calibrate`: each engine's host terms fitted on the 'calibrate' cases (and the engines'
  MoE roofline on the cases that fit it) -> ``dspark_sim/engines/terms.json``;
* :func:`check`: every case replayed with the shipped terms -> docs/external.md, .json
  (:mod:`dspark_sim.validation.published_page` writes the pages);
* :func:`diagnose`: every case replayed again with one kind of host term left out at a time,
  and where its GPU time goes -> docs/external_diagnose.md, .json.

``diagnose`` backs the gap texts: a case whose error moves within the target when a term is
left out is bound by that term; a case whose replay spends most of the engine's time in
prefill steps is bound by the GPU's prefill rate.

The cases, their sources and the approximations of each replay are in
``profiles/external/cases.yaml`` (:mod:`dspark_sim.validation.published`). One set of host
terms per engine serves every case; the 'check' cases are never fitted on. GPU work comes from
what the simulator has for each GPU and model (a shipped profile, measured or projected, else
the roofline); the table names it per case. ``python benchmarks/external.py`` drives it.
"""
from __future__ import annotations

import re
import sys
import time
import warnings
from pathlib import Path

import numpy as np

from dspark_sim.validation.published import METRICS, case_scenario, load_cases, metric_key

ROOT = Path(__file__).resolve().parents[2]
TERMS = ROOT / "dspark_sim" / "engines" / "terms.json"
TARGETS = {"tpot": (0.10, 0.20), "throughput": (0.10, 0.20), "ttft": (0.20, 0.35)}  # median, p90 of |error|
SEEDS = (0, 1, 2)


def calibrate(cases: list[dict]) -> dict:
    """Each engine's host terms fitted on its 'calibrate' cases (none: no terms)."""
    from dspark_sim.engines.model import ENGINES, EngineTerms
    from dspark_sim.engines.fit import fit_replay_terms

    out = {}
    for engine in ENGINES[1:]:
        chosen = [c for c in cases if c["engine"] == engine and c["role"] == "calibrate" and not fits_gpu_work(c)]
        if not chosen:
            continue
        print(f"calibrating {engine} on {', '.join(c['id'] for c in chosen)}", file=sys.stderr)
        scenarios = [case_scenario(c) for c in chosen]
        def progress(done: int, most: int) -> None:
            print(f"\r  replayed {done} times (at most {most})", end="", file=sys.stderr, flush=True)

        fitted = [{k: v for k, v in c["measured"].items() if k in c.get("fit", c["measured"])} for c in chosen]
        terms = fit_replay_terms(scenarios, fitted, EngineTerms(), fit_step=True,
                                 progress=progress)
        print(file=sys.stderr)
        terms = terms.__class__(**{**terms.to_json_dict(), "source": (
            f"fitted by benchmarks/external.py calibrate on {', '.join(c['id'] for c in chosen)} "
            f"(profiles/external/cases.yaml)")})
        out[engine] = {"terms": terms.to_json_dict(), "fitted_from": [c["id"] for c in chosen]}
    doc = {"generated_by": "python benchmarks/external.py calibrate", "engines": out}
    work = calibrate_gpu_work(cases, out)
    if work is not None:
        doc["gpu_work"] = work.to_json_dict()
    return doc


def fits_gpu_work(case: dict) -> bool:
    """Whether ``case``'s source calibrates the engines' MoE roofline (``fits: gpu_work``)."""
    return load_cases()[0][case["source"]].get("fits") == "gpu_work"


def calibrate_only(cases: list[dict], names: tuple[str, ...], shipped: dict) -> dict:
    """``shipped`` (terms.json as it stands) with only the engines' MoE roofline terms ``names``
    fitted again on the same 'calibrate' cases, the host terms and every other term held; its
    ``generated_by`` keeps the notes of earlier such refits of other terms."""
    from dspark_sim.engines.model import GpuWork

    start = GpuWork.from_json_dict(shipped["gpu_work"])
    work = calibrate_gpu_work(cases, shipped["engines"], start, names)
    return {**shipped, "generated_by": refit_note(shipped["generated_by"], names), "gpu_work": work.to_json_dict()}


def refit_note(generated_by: str, names: tuple[str, ...]) -> str:
    """terms.json's ``generated_by`` after the terms ``names`` are fitted again: the note of an
    earlier refit goes once every term it names is fitted now or is no longer a term."""
    from dspark_sim.profiling.gpu_work_fit import BOUNDS

    by, *again = generated_by.split("; ")
    notes = [(set(part.split(" again by ")[0].split(", ")), part) for part in again]
    gone = set(names) | ({n for terms, _ in notes for n in terms} - set(BOUNDS))
    kept = [part for terms, part in notes if not terms <= gone]
    return "; ".join([by, *kept, f"{', '.join(names)} again by {by} --only {' '.join(names)}"])


def calibrate_gpu_work(cases: list[dict], engines: dict, start=None, only: tuple[str, ...] = ()):
    """The engines' MoE roofline fitted on the 'calibrate' cases whose source calibrates it, each
    replayed under its engine's host terms just fitted (``engines``), from ``start`` (None: the
    fit's own start), ``only`` these terms when given; None without such cases."""
    from dspark_sim.engines.model import EngineTerms, GpuWork
    from dspark_sim.engines.fit import with_terms
    from dspark_sim.profiling.gpu_work_fit import KINDS, fit_gpu_work

    chosen = [c for c in cases if c["role"] == "calibrate" and fits_gpu_work(c)]
    if not chosen:
        return None
    print(f"fitting the engines' MoE roofline on {len(chosen)} cases", file=sys.stderr)
    scenarios = []
    for c in chosen:
        scenario = case_scenario(c)
        terms = engines.get(c["engine"], {}).get("terms")
        scenarios.append(with_terms(scenario, EngineTerms.from_json_dict(terms) if terms else EngineTerms()))
    start = start or GpuWork(tuple((k, 1e-4) for k in KINDS), tuple((k, 1e-3) for k in KINDS), 0.8)
    calls = [0]

    def progress(_work) -> None:
        calls[0] += 1
        print(f"\r  replayed the cases {calls[0]} times", end="", file=sys.stderr, flush=True)

    work = fit_gpu_work(scenarios, [c["measured"] for c in chosen], start, progress, only)
    print(file=sys.stderr)
    return work


def check_case(case: dict, seeds=SEEDS, gpu_work=None) -> dict:
    """One case replayed under the shipped terms: measured, predicted (median over seeds), errors;
    ``gpu_work``: the engines' MoE roofline in place of the shipped one (:func:`what_if`)."""
    from dspark_sim.cost import scenario_cost
    from dspark_sim.engines.fit import replay
    from dspark_sim.profiling.gpu_work_fit import with_gpu_work

    def scenario_of(seed: int = 0):
        scenario = case_scenario(case, seed)
        return with_gpu_work(scenario, gpu_work) if gpu_work is not None else scenario

    warnings.simplefilter("ignore", UserWarning)
    started = time.perf_counter()
    preds = [replay(scenario_of(seed)) for seed in seeds]
    scenario = scenario_of()
    engine = scenario.engine
    flags = ["overlap" if engine.overlapped else "no overlap"] + \
        ([f"{engine.multi_step} steps a schedule"] if engine.multi_step > 1 else [])
    row = {"id": case["id"], "source": case["source"], "engine": f"{engine.label} ({', '.join(flags)})",
           "role": case["role"],
           "model": case["model"], "gpu": case["gpu"], "tp": case["tp"],
           "cost": gpu_work_label(scenario_cost(scenario, warn=False).source, case["tp"]),
           "rejected": max(p["num_rejected"] for p in preds), "gap": case.get("gap", ""),
           "measured": {}, "predicted": {}, "error": {}, "seed_spread": {}}
    for name in METRICS:
        key = metric_key(case, name)
        values = np.array([p[key] for p in preds], dtype=float)
        row["predicted"][name] = float(np.median(values))
        row["seed_spread"][name] = float(np.ptp(values) / np.median(values)) if np.median(values) else None
        row.setdefault("stat", {})[name] = key.split("_")[0] if name != "throughput" else "total"
        measured = case["measured"].get(key)
        if measured is not None:
            row["measured"][name] = measured
            row["error"][name] = row["predicted"][name] / measured - 1.0
    print(f"{case['id']}: " + ", ".join(f"{k} {v * 100:+.1f} %" for k, v in row["error"].items())
          + f" ({time.perf_counter() - started:.1f} s)", file=sys.stderr, flush=True)
    return row


def gpu_work_label(source: str, tp: int) -> str:
    """The table's "GPU work from": where a cost model's kernel time comes from and, at tp > 1, how
    one GPU's share was had (measured per rank or scaled) and that the all-reduces are the link
    model's with an assumed latency."""
    parts = source.split("; ")
    label = parts[0]
    if tp > 1:
        label += "".join(f"; {p}" for p in parts[1:] if p.startswith(("measured per rank", "scaled from")))
        latency = re.search(r"all-reduce latency [\d.]+ us \(assumed\)", source)
        if latency:
            label += f"; all-reduces by the NVLink link model, {latency.group(0)}"
    return label


def over_cases(fn, cases: list[dict], seeds=SEEDS, jobs: int = 1) -> list[dict]:
    """``fn(case, seeds)`` of every case (``jobs`` processes; each case is its own, so the rows do
    not depend on it)."""
    if jobs <= 1:
        return [fn(case, seeds) for case in cases]
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(fn, cases, [seeds] * len(cases)))


def check(cases: list[dict], seeds=SEEDS, jobs: int = 1) -> list[dict]:
    """Every case replayed with the shipped terms."""
    return over_cases(check_case, cases, seeds, jobs)


def what_if(cases: list[dict], changes: dict, seeds=SEEDS, jobs: int = 1) -> list[dict]:
    """``cases`` replayed with the engines' MoE roofline's terms ``changes`` in place of the
    shipped ones (``{"flops_eff": {"fp4-experts-w4a16": 0.5}, "moe_bw_eff": 0.4}``): a question put
    to the published runs, never a fit; nothing is written."""
    from functools import partial

    from dspark_sim.engines.model import GpuWork, shipped_gpu_work

    raw = shipped_gpu_work().to_json_dict()
    for name, value in changes.items():
        raw[name] = {**raw.get(name, {}), **value} if isinstance(value, dict) else value
    return over_cases(partial(check_case, gpu_work=GpuWork.from_json_dict(raw)), cases, seeds, jobs)


def summary(rows: list[dict], role: str | None, source_fits: str | None = None) -> dict:
    """Median, p90 and max |error| and the mean signed error per metric over the cases of ``role``
    (None: all); ``source_fits``: only the cases of sources that calibrate it (``gpu_work``)."""
    out = {}
    sources = load_cases()[0]
    for name in METRICS:
        signed = np.array([r["error"][name] for r in rows if name in r["error"] and role in (None, r["role"])
                           and (source_fits is None or sources[r["source"]].get("fits") == source_fits)])
        if signed.size:
            errs = np.abs(signed)
            med, p90 = float(np.median(errs)), float(np.percentile(errs, 90))
            want = TARGETS[name]
            out[name] = {"cases": int(errs.size), "median": med, "p90": p90, "max": float(errs.max()),
                         "signed_mean": float(signed.mean()),
                         "target_median": want[0], "target_p90": want[1],
                         "met": bool(med <= want[0] and p90 <= want[1])}
    return out


SUMMARY_GROUPS = (("calibrate", "calibrate", None), ("check", "check", None),
                  ("calibrate, large MoE", "calibrate", "gpu_work"), ("check, large MoE", "check", "gpu_work"),
                  ("all", None, None))


VARIANTS = ("shipped", "no step host time", "no front end", "no host terms")
ENGINE_BOUND = 0.9  # a replay whose engine is busy this share of it is bound by the engine's steps


def variant_terms(terms, variant: str):
    """``terms`` with the host time ``variant`` names left out (:data:`VARIANTS`)."""
    from dataclasses import replace

    from dspark_sim.engines.model import EngineTerms

    if variant == "shipped":
        return terms
    if variant == "no step host time":
        return replace(terms, step_host_s=0.0, step_host_s_per_req=0.0, eager_step_s=0.0,
                       source=terms.source + "; step host time left out")
    if variant == "no front end":
        return replace(terms, frontend_s=0.0, stream_s=0.0, source=terms.source + "; front end left out")
    if variant == "no host terms":
        return EngineTerms(source="no host terms (diagnostic)")
    raise ValueError(variant)


def variant_scenario(scenario, variant: str):
    """``scenario`` with the host time ``variant`` names left out: its engine's terms
    (:func:`variant_terms`) and, with the per-step host time, the engines' eager layer time of
    SGLang's prompt steps under DP attention (``GpuWork.eager_layer_s``)."""
    from dataclasses import replace

    from dspark_sim.engines.fit import with_terms

    out = with_terms(scenario, variant_terms(scenario.engine.terms, variant))
    work = out.engine.gpu_work
    if variant in ("no step host time", "no host terms") and work is not None and work.eager_layer_s:
        out = replace(out, engine=replace(out.engine, gpu_work=replace(work, eager_layer_s=())))
    return out


def time_split(result) -> dict:
    """Where one replay's engine time goes: the share of its steps' time (GPU work and host time
    together) spent in steps that prefill a chunk of some prompt, and the engine's busy share of
    the run (its steps' time over the last finish)."""
    steps = result.collector.steps
    step_s = steps.step_s.astype(float)
    total = float(step_s.sum())
    if total <= 0:
        return {"prefill_step_share": None, "busy_share": None}
    prefill = steps.prefill_tokens > 0
    finish = result.collector.requests.finish_s
    end = float(np.nanmax(finish)) if finish.size else 0.0
    return {"prefill_step_share": float(step_s[prefill].sum() / total),
            "busy_share": float(total / end) if end > 0 else None}


def diagnose_case(case: dict, seeds=SEEDS) -> dict:
    """``case`` replayed under each of :data:`VARIANTS` (median over ``seeds``), with the
    errors of each, and the time split of the shipped replay at the first seed."""
    from dspark_sim.serving.simulator import simulate
    from dspark_sim.metrics.summary import summarize

    warnings.simplefilter("ignore", UserWarning)
    started = time.perf_counter()
    row = {"id": case["id"], "role": case["role"], "measured": {}, "variants": {}, "split": None}
    keys = {name: metric_key(case, name) for name in METRICS}
    for name, key in keys.items():
        if case["measured"].get(key) is not None:
            row["measured"][name] = case["measured"][key]
    for variant in VARIANTS:
        preds = []
        for seed in seeds:
            scenario = case_scenario(case, seed)
            result = simulate(variant_scenario(scenario, variant))
            s = summarize(result)
            preds.append({name: getattr(s, key) for name, key in keys.items()})
            if variant == "shipped" and seed == seeds[0]:
                row["split"] = time_split(result)
        predicted = {name: float(np.median([p[name] for p in preds])) for name in METRICS}
        row["variants"][variant] = {
            "predicted": predicted,
            "error": {name: predicted[name] / m - 1.0 for name, m in row["measured"].items()}}
    print(f"{case['id']}: diagnosed ({time.perf_counter() - started:.1f} s)", file=sys.stderr, flush=True)
    return row


def diagnose(cases: list[dict], seeds=SEEDS, jobs: int = 1) -> list[dict]:
    """Every case replayed under each of :data:`VARIANTS`."""
    return over_cases(diagnose_case, cases, seeds, jobs)
