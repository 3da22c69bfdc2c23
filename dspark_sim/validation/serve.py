"""The fidelity suite on the GPU: the decoder serves every case and leaves its run record.

:func:`run_cases` builds the decoder once per method (random bf16 weights, synthetic
acceptance from the same acceptance model), compiles and captures every step shape
(``Decoder.warmup``) before timing, then serves every case as fast as possible (idle gaps
skipped, busy periods real) and writes ``out/<case>/`` ``requests.csv``, ``steps.csv`` and
``meta.json`` (provenance, graphs captured and kernels compiled during the case). One
decoder serves a method's cases under each case's batching (``prefill_first`` or
``mixed``). Needs torch and a CUDA GPU.
"""
from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import numpy as np

from dspark_sim.validation.cases import CASE_METHODS, case_traces, max_model_len

WARM_REQUESTS = 0  # a served warm-up trace on top of Decoder.warmup (300: every tier as they drain)
CROSS_REQS = (1, 4, 16, 64, 256)
CROSS_CHUNKS = (64, 512, 2048, 8192)


def archive(out: Path, path: Path) -> None:
    """``out`` as a gzipped tar at ``path``, replaced atomically (a cut-off run keeps its cases)."""
    import tarfile

    tmp = path.with_name(path.name + ".tmp")
    with tarfile.open(tmp, "w:gz") as tar:
        tar.add(out, arcname=out.name)
    tmp.replace(path)


def run_cases(cases_dir: Path, out: Path, max_seconds: float, only: list[str] | None,
              archive_to: Path | None = None, methods: list[str] | None = None, passes: int = 1,
              warm_requests: int = WARM_REQUESTS, kv_tokens: int = 0, crosscheck: bool = True) -> None:
    """Serve every selected case of ``cases_dir`` into ``out``; ``only`` names traces (every
    method) or cases (``trace__method``). After a method's cases, ``crosscheck`` times the
    profiler's whole decode steps and prefill steps on the same decoder (``crosscheck.json``)."""
    import torch

    from dspark_sim.kernels.profiler.provenance import provenance, sm_clocks

    t_start = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    shutil.copy(cases_dir / "sps_dspark.json", out / "sps_dspark.json")  # what DSpark scheduled from
    prov = {**provenance(), "sm_clocks_before": sm_clocks()}
    checks = {}
    for method in methods or CASE_METHODS:
        picked = picked_traces(method, only)
        if not picked:
            continue
        scenarios = [cases_dir / f"{t}__{method}.yaml" for t in picked]
        t0 = time.perf_counter()
        # one decoder serves the method's cases: a context long enough for the longest of them
        decoder, shapes = _warm_decoder(scenarios[0], kv_tokens, warm_requests, max_model_len(picked))
        print(f"{method}: built and warmed in {time.perf_counter() - t0:.1f} s ({shapes}), "
              f"{len(decoder.graphs.entries)} graphs", flush=True)
        for path in scenarios:
            if time.perf_counter() - t_start > max_seconds:
                print(f"{path.stem}: skipped (--max-seconds)", flush=True)
                continue
            meta = _serve_case(decoder, path, out, kv_tokens, passes)
            meta.update(warm_requests=warm_requests, warmup=shapes)
            meta["provenance"] = {**prov, **meta["provenance"], "sm_clocks_after": sm_clocks()}
            (out / path.stem / "meta.json").write_text(json.dumps(_ordered(meta), indent=1))
            if archive_to is not None:
                archive(out, archive_to)
        if crosscheck and time.perf_counter() - t_start < max_seconds:
            checks[method] = crosscheck_steps(decoder)
            (out / "crosscheck.json").write_text(json.dumps(checks, indent=1))
            print(f"{method} crosscheck: " + json.dumps({k: {p: round(v * 1e3, 2) for p, v in d.items()}
                                                         for k, d in checks[method]["median_s"].items()}),
                  flush=True)
            if archive_to is not None:
                archive(out, archive_to)
        del decoder
        torch.cuda.empty_cache()


def picked_traces(method: str, only: list[str] | None) -> list[str]:
    """The traces whose case of ``method`` ``only`` selects (traces, or cases ``trace__method``)."""
    return [t for t in case_traces() if only is None or t in only or f"{t}__{method}" in only]


def dry_run(cases_dir: Path, only: list[str] | None, methods: list[str] | None = None) -> list[str]:
    """What :func:`run_cases` would serve, without a GPU: every selected case's scenario, launch
    and requests read as the run reads them; one line per case."""
    from dspark_sim.catalog import get_model
    from dspark_sim.kernels.decoder.launch import trace_sequences

    lines = []
    for method in methods or CASE_METHODS:
        picked = picked_traces(method, only)
        model_len = max_model_len(picked)
        for trace in picked:
            path = cases_dir / f"{trace}__{method}.yaml"
            launch = _launch(path, 1024, model_len, device="cpu")
            seqs = trace_sequences(launch, get_model(launch.scenario.model).vocab_size)
            prompts = [s.prompt_len for s in seqs]
            longer = sum(s.prompt_len + s.max_tokens > model_len for s in seqs)
            lines.append(f"{path.stem}: {len(seqs)} requests, prompts {min(prompts)}-{max(prompts)} tokens, "
                         f"{sum(s.max_tokens for s in seqs)} output tokens, max_model_len {model_len}, "
                         f"batching {launch.conf.batching}, prefix cache {launch.conf.prefix_cache}, "
                         f"{longer} past the context")
    return lines


def _launch(path: Path, kv_tokens: int, model_len: int, device: str = "cuda"):
    from dspark_sim.kernels.decoder.launch import load_launch

    return load_launch(path, synthetic=True, device=device, dtype="bfloat16", max_model_len=model_len,
                       kv_tokens=kv_tokens)


def _warm_decoder(path: Path, kv_tokens: int, warm_requests: int, model_len: int):
    """The decoder of a case's method, every step shape compiled and captured; (decoder, shapes)."""
    from dspark_sim.catalog import get_model
    from dspark_sim.kernels.decoder.compiles import StallLog
    from dspark_sim.kernels.decoder.engine import serve
    from dspark_sim.kernels.decoder.launch import build_decoder
    from dspark_sim.kernels.decoder.sequence import Sequence

    launch = _launch(path, kv_tokens, model_len)
    decoder = build_decoder(get_model(launch.scenario.model), launch)
    decoder.randomize_cache()
    with StallLog(decoder.device) as stalls:
        shapes = decoder.warmup()  # every step shape compiled and captured before timing
    shapes["triton_compiles"] = len(stalls.compiles)
    # optionally also a served warm-up trace (every request tier as it drains)
    rng = np.random.default_rng(0)
    vocab = decoder.spec.vocab_size
    warm = [Sequence(i, rng.integers(0, vocab, 64).tolist(), 16 + (i % 32) * 2, 1.0, 0)
            for i in range(warm_requests)]
    if warm:
        serve(decoder, warm)
    return decoder, shapes


META_KEYS = ("case", "wall_s", "requests", "passes", "warm_requests", "warmup", "kv_capacity_tokens", "prefix_cache",
             "output_tokens", "steps", "graphs_captured_during_case", "triton_compiles_during_case",
             "allocator_during_case", "stalled_steps", "provenance")


def _ordered(meta: dict) -> dict:
    return {k: meta[k] for k in META_KEYS}


def _serve_case(decoder, path: Path, out: Path, kv_tokens: int, passes: int) -> dict:
    """Serve one case ``passes`` times (the earlier passes compile and capture, untimed), write its
    record; returns its ``meta.json`` but for the warm-up and the provenance of the machine."""
    from dspark_sim.kernels.decoder.compiles import StallLog
    from dspark_sim.kernels.decoder.engine import serve, write_csvs
    from dspark_sim.kernels.decoder.launch import trace_sequences

    case, launch = path.stem, _launch(path, kv_tokens, decoder.conf.max_model_len)
    decoder.conf = decoder.conf.replaced(batching=launch.conf.batching)  # the case's batching
    for _ in range(passes):
        decoder.pages.drop_cached()  # every pass starts with a cold prefix cache, as the simulator
        hits0, evicted0 = getattr(decoder.pages, "hit_tokens", 0), getattr(decoder.pages, "evicted_pages", 0)
        seqs = trace_sequences(launch, decoder.spec.vocab_size)
        with StallLog(decoder.device) as stalls:
            events, seen = [], {"compiles": 0, "captures": decoder.graphs.captures}
            alloc0 = stalls.alloc()

            def on_step(row, stalls=stalls, events=events, seen=seen, graphs=decoder.graphs):
                new = stalls.compiles[seen["compiles"]:]
                captured = graphs.captures - seen["captures"]
                if new or captured:
                    events.append({"step": row["step"], "step_s": round(row["step_s"], 4),
                                   "graphs_captured": captured,
                                   "compiles": [{"kernel": k, "spec": r} for _, k, r in new]})
                seen.update(compiles=len(stalls.compiles), captures=graphs.captures)
            t0 = time.perf_counter()
            result = serve(decoder, seqs, on_step=on_step)
            wall = time.perf_counter() - t0
            alloc = {k: v - alloc0.get(k, 0) for k, v in stalls.alloc().items()}
    write_csvs(result, out / case)
    tokens = sum(r["output_tokens"] for r in result.requests)
    meta = {"case": case, "wall_s": round(wall, 2), "requests": len(result.requests), "passes": passes,
            "kv_capacity_tokens": int(decoder.cache.k.shape[1]),
            "prefix_cache": {"enabled": launch.conf.prefix_cache,
                             "hit_tokens": getattr(decoder.pages, "hit_tokens", 0) - hits0,
                             "evicted_pages": getattr(decoder.pages, "evicted_pages", 0) - evicted0},
            "output_tokens": tokens, "steps": len(result.steps),
            "graphs_captured_during_case": sum(e["graphs_captured"] for e in events),
            "triton_compiles_during_case": sum(len(e["compiles"]) for e in events)
            if stalls.available else None,
            "allocator_during_case": alloc, "stalled_steps": events,
            "provenance": {"model": launch.scenario.model, "weights": "random bf16",
                           "acceptance": "synthetic (simulator acceptance model)", "temperature": 1.0}}
    print(f"{case}: {len(result.requests)} requests, {tokens} tokens, {len(result.steps)} steps "
          f"in {wall:.1f} s; {meta['graphs_captured_during_case']} graphs captured, "
          f"{meta['triton_compiles_during_case']} compiles, allocator {alloc}", flush=True)
    return meta


def crosscheck_steps(decoder) -> dict:
    """The profiler's timing methods on a decoder that has just served: whole decode steps
    (``time_steps``) at ``CROSS_REQS`` requests of 1024 tokens, and prefill steps of
    ``CROSS_CHUNKS`` tokens, without and with the first token's sampling. Comparing them
    with the served steps shows whether the profile measures what serving does."""
    from dspark_sim.kernels.profiler.steps import Stepper, time_steps

    rng = np.random.default_rng(7)
    steps = {r: time_steps(decoder, r, 1024, rng) for r in CROSS_REQS}
    stepper = Stepper(decoder)
    prefill = {c: stepper.prefill(c, 0) for c in CROSS_CHUNKS}
    sampled = {c: stepper.prefill(c, 0, sample=True) for c in CROSS_CHUNKS}
    return {"decode_steps": {r: v for r, v in steps.items() if v is not None},
            "median_s": {"decode": {r: v["step_s"] for r, v in steps.items() if v is not None},
                         "prefill": {c: v for c, v in prefill.items() if v is not None},
                         "prefill_sampled": {c: v for c, v in sampled.items() if v is not None}}}
