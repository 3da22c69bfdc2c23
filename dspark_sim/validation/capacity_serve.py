"""The decoder's own capacity on the GPU: bisection on the arrival rate, probes served for real.

For every method (one decoder, warmed up once) and every trace of :mod:`.capacity_check`, the
search starts from the simulator's answer in the plan: a probe at ``START_BELOW`` times it and
one at ``START_ABOVE`` times it; while both agree the bracket moves out by ``STEP``; then
geometric bisection, until the bracket is within ``precision`` or the search's share of the
time is spent. A probe is the scenario's requests at a multiple of its rate (the simulator's
probe, :func:`~dspark_sim.capacity.search.probe_scenario`), served as fast as possible (idle
gaps skipped) and judged by the capacity command's rule. The answer is the highest passing
rate; the lowest failing one above it bounds it (the resolution). Results go to ``out`` as JSON
after every probe (provenance: GPU, driver, torch, triton, date, decoder commit), the probes'
run records to ``runs/`` beside it.
"""
from __future__ import annotations

import json
import math
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

from dspark_sim.validation.capacity_check import PLAN, TRACES, slo_of
from dspark_sim.validation.cases import CASE_METHODS, write_trace

START_BELOW, START_ABOVE, STEP = 0.92, 1.08, 1.15
MIN_PROBES, MAX_PROBES = 2, 7
PRECISION = 0.03


def probe_requests(base, multiplier: float):
    """``(arrival_s, prompt, output)`` of the simulator's probe of ``base`` at ``multiplier``."""
    from dspark_sim.capacity.search import probe_scenario

    point = probe_scenario(base, multiplier)
    chunks = list(point.workload.requests(point.seed))
    return tuple(np.concatenate([getattr(c, k) for c in chunks]) for k in ("arrival_s", "prompt_tokens",
                                                                            "output_tokens"))


def serve_probe(decoder, launch, base, multiplier: float, slo, run_dir: Path | None, max_requests=None) -> dict:
    """Serve one probe on ``decoder`` (its first ``max_requests`` requests, when given: a dry run)
    and judge it; its record into ``run_dir`` when given."""
    from dspark_sim.capacity.search import judge_requests
    from dspark_sim.metrics.record import RequestColumns
    from dspark_sim.kernels.decoder.engine import serve, write_csvs
    from dspark_sim.kernels.decoder.launch import trace_sequences

    arrival, prompt, output = probe_requests(base, multiplier)
    with tempfile.TemporaryDirectory() as tmp:
        write_trace(Path(tmp) / "probe.csv", arrival, prompt, output)
        seqs = trace_sequences(launch, decoder.spec.vocab_size, trace=Path(tmp) / "probe.csv",
                               max_requests=max_requests or len(arrival))
    decoder.pages.drop_cached()
    t0 = time.perf_counter()
    result = serve(decoder, seqs)
    wall = time.perf_counter() - t0
    if run_dir is not None:
        write_csvs(result, run_dir)
    req = RequestColumns(**{k: np.array([r[k] for r in result.requests], dtype=float)
                            for k in ("ttft_ms", "tpot_ms", "queue_delay_ms")})
    verdict = judge_requests(slo, req, len(seqs), len(seqs) - len(result.requests))
    tokens = sum(r["output_tokens"] for r in result.requests)
    end = max((r["finish_s"] for r in result.requests), default=0.0)
    return {"multiplier": multiplier, **asdict(verdict), "wall_s": round(wall, 2), "requests": len(seqs),
            "output_tok_per_s": tokens / end if end > 0 else 0.0}


def search(serve_at, start: float, deadline_s: float, precision: float = PRECISION) -> dict:
    """Bisection on the multiplier from ``start`` (the simulator's answer): ``serve_at(x)`` serves a
    probe and returns its record; stops at ``precision``, :data:`MAX_PROBES` or ``deadline_s``
    (perf_counter seconds; never before :data:`MIN_PROBES` probes)."""
    probes, lo, hi = [], None, None

    def run(x):
        nonlocal lo, hi
        probes.append(serve_at(x))
        if probes[-1]["passed"]:
            lo = x if lo is None else max(lo, x)
        else:
            hi = x if hi is None else min(hi, x)

    def more() -> bool:
        return len(probes) < MIN_PROBES or (len(probes) < MAX_PROBES and time.perf_counter() < deadline_s)

    run(start * START_BELOW)
    run(start * START_ABOVE if lo is not None else start * START_BELOW / STEP)
    while more() and (lo is None or hi is None):  # move the bracket out until the verdict flips
        run(hi / STEP if lo is None else lo * STEP)
    while more() and lo is not None and hi is not None and hi > lo * (1 + precision):
        run(math.sqrt(lo * hi))
    return {"passed_multiplier": lo, "failed_multiplier": hi, "probes": probes}


def measure(cases_dir: Path, out: Path, budget_s: float, rig, records: Path | None = None, methods=None,
            traces=None) -> dict:
    """The decoder's capacity for every (method, trace) within ``budget_s`` seconds in all: each
    search gets an even share of what is left. Written to ``out`` (JSON) after every probe; each
    probe's run record under ``records`` when given."""
    from dspark_sim.kernels.profiler.provenance import provenance
    from dspark_sim.scenario import load_scenario
    from dspark_sim.validation.serve import release_device, warm_decoder

    t_start = time.perf_counter()
    plan = json.loads((cases_dir / PLAN).read_text())
    methods = list(methods or CASE_METHODS)
    chosen = [t for t in TRACES if not traces or t.name in traces]
    report = {"what": "the decoder's capacity: the highest Poisson rate whose probe meets the SLO "
                      "(benchmarks/decoder_capacity.py run)", "provenance": provenance(),
              "budget_s": budget_s, "precision": PRECISION, "results": {}}
    left = len(methods) * len(chosen)
    for method in methods:
        t0 = time.perf_counter()
        decoder, _ = warm_decoder(cases_dir / f"{chosen[0].name}__{method}.yaml", rig, 0)
        print(f"{method}: built and warmed in {time.perf_counter() - t0:.1f} s", flush=True)
        for trace in chosen:
            path = cases_dir / f"{trace.name}__{method}.yaml"
            base, launch, slo = load_scenario(path), rig.launch(path), slo_of(trace)
            decoder.conf = decoder.conf.replaced(batching=launch.conf.batching)
            x1 = plan["traces"][trace.name]["rate_per_s_at_x1"]
            entry = {"rate_per_s_at_x1": x1, "probes": []}
            report["results"].setdefault(trace.name, {})[method] = entry

            def serve_at(x, case=f"{trace.name}__{method}", base=base, launch=launch, slo=slo, entry=entry):
                rec = serve_probe(decoder, launch, base, x, slo, records / f"{case}__x{x:.4f}" if records else None,
                                  rig.max_requests)
                rec["rate_rps"] = x * entry["rate_per_s_at_x1"]
                entry["probes"].append(rec)
                _write(out, report)
                print(f"{case}: {rec['rate_rps']:.2f} req/s {'met' if rec['passed'] else 'missed'} (p99 TPOT "
                      f"{rec['p99_tpot_ms']:.1f} ms, p99 TTFT {rec['p99_ttft_ms']:.0f} ms; {rec['wall_s']} s)",
                      flush=True)
                return rec
            deadline = time.perf_counter() + (budget_s - (time.perf_counter() - t_start)) / left
            found = search(serve_at, plan["traces"][trace.name]["sim"][method]["rate_rps"] / x1, deadline)
            entry.update(_answer(found, x1))
            left -= 1
            _write(out, report)
        del decoder  # the next method's decoder sizes its KV to the memory this one leaves
        release_device()
    report["wall_s"] = round(time.perf_counter() - t_start, 1)
    _write(out, report)
    return report


def _fields(conf) -> dict:
    from dataclasses import fields

    return {f.name: getattr(conf, f.name) for f in fields(conf)}


def _answer(found: dict, x1: float) -> dict:
    """The highest passing rate, the lowest failing one above it and the bracket's width."""
    lo, hi = found["passed_multiplier"], found["failed_multiplier"]
    return {"rate_rps": lo * x1 if lo else 0.0, "failed_rate_rps": hi * x1 if hi else None,
            "resolution": hi / lo - 1 if lo and hi else None}


def _write(out: Path, report: dict) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(report, indent=1, default=float) + "\n")
    tmp.replace(out)
