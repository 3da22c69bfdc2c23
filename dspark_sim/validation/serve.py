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

import dataclasses
import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dspark_sim.validation.cases import MAX_MODEL_LEN, max_model_len

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


@dataclass(frozen=True, slots=True)
class Rig:
    """What serves the cases: the case's model on the GPU (``kv_tokens`` of KV, 0: the free
    memory), or, ``dry``, a tiny fp32 model on the CPU serving each case's first
    :data:`DRY_REQUESTS` requests through the same loop and record (a check of the run's
    plumbing before a device call)."""

    kv_tokens: int = 0
    dry: bool = False
    model_len: int = MAX_MODEL_LEN  # the decoder's context: long enough for the longest case served

    def launch(self, path: Path):
        from dspark_sim.kernels.decoder.launch import load_launch

        device = dict(device="cpu", dtype="float32", kernels="torch", attention="torch", cuda_graphs=False) \
            if self.dry else dict(device="cuda", dtype="bfloat16")
        return load_launch(path, synthetic=True, max_model_len=self.model_len,
                           kv_tokens=self.kv_tokens or (DRY_KV_TOKENS if self.dry else 0), **device)

    def spec(self, model: str):
        from dspark_sim.catalog import get_model
        from dspark_sim.kernels.decoder.tiny import tiny_spec

        return tiny_spec(vocab=64) if self.dry else get_model(model)

    @property
    def max_requests(self) -> int | None:
        return DRY_REQUESTS if self.dry else None


DRY_REQUESTS, DRY_KV_TOKENS = 3, 65536


def run_cases(cases_dir: Path, out: Path, budget, wanted=None, archive_to: Path | None = None, passes: int = 1,
              warm_requests: int = WARM_REQUESTS, rig: Rig = Rig(), crosscheck: bool = True) -> None:
    """Serve the cases of ``cases_dir`` that ``budget`` (a :class:`~.budget.Budget`: units in
    order, methods in order, the time limit) lets run, whole units at a time, into ``out``;
    ``wanted(trace, method)``, if given, skips the other cases of a unit. After a method's
    cases, ``crosscheck`` times the profiler's whole decode steps and prefill steps on the same
    decoder (``crosscheck.json``). ``archive_to`` keeps a .tgz of ``out``, updated after every
    unit (what a call cut short still returns)."""
    from dspark_sim.kernels.profiler.provenance import provenance, sm_clocks

    t_start = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    shutil.copy(cases_dir / "sps_dspark.json", out / "sps_dspark.json")  # what DSpark scheduled from
    prov = {**provenance(), "sm_clocks_before": sm_clocks()}
    checks, units = {}, budget.units
    # one decoder serves a method's cases: a context long enough for the longest of them
    rig = dataclasses.replace(rig, model_len=max_model_len([t for u in units for t in u.traces]))
    print(f"{len(units)} units x {len(budget.methods)} methods, expected {budget.estimate():.0f} s "
          f"within {budget.limit_s:.0f} s", flush=True)
    for method in budget.methods:
        eligible = budget.eligible(method)
        if not eligible:
            print(f"{method}: skipped (no unit left that every earlier method served)", flush=True)
            continue
        t0 = time.perf_counter()
        decoder, shapes = warm_decoder(cases_dir / f"{units[0].traces[0]}__{method}.yaml", rig, warm_requests)
        print(f"{method}: built and warmed in {time.perf_counter() - t0:.1f} s ({shapes}), "
              f"{len(decoder.graphs.entries)} graphs", flush=True)
        for unit in eligible:
            if not budget.allows(method, unit, time.perf_counter() - t_start):
                print(f"{method}: {unit.name} and after skipped (--max-seconds: the rest would not be whole)",
                      flush=True)
                break
            for trace in unit.traces:
                if wanted is not None and not wanted(trace, method):
                    continue
                path = cases_dir / f"{trace}__{method}.yaml"
                meta = _serve_case(decoder, path, out, rig, passes)
                budget.served(trace, method, meta["wall_s"])
                meta.update(warm_requests=warm_requests, warmup=shapes)
                meta["provenance"] = {**prov, **meta["provenance"], "sm_clocks_after": sm_clocks()}
                (out / path.stem / "meta.json").write_text(json.dumps(_ordered(meta), indent=1))
            budget.finished(method, unit)
            if archive_to is not None:
                archive(out, archive_to)
        if crosscheck and time.perf_counter() - t_start < budget.limit_s:
            checks[method] = crosscheck_steps(decoder)
            (out / "crosscheck.json").write_text(json.dumps(checks, indent=1))
            print(f"{method} crosscheck: " + json.dumps({k: {p: round(v * 1e3, 2) for p, v in d.items()}
                                                         for k, d in checks[method]["median_s"].items()}),
                  flush=True)
            if archive_to is not None:
                archive(out, archive_to)
        del decoder
        release_device()
    print(f"served in {time.perf_counter() - t_start:.0f} s; whole units: "
          + ", ".join(u.name for u in units if all(u.name in budget.done.get(m, []) for m in budget.methods)),
          flush=True)


def release_device() -> None:
    """Hand a dropped decoder's memory back to the device: its cycles collected, then the caching
    allocator's free blocks released. Call after the last reference is gone: the next decoder
    sizes its KV to the device's free memory, which those blocks would otherwise still hold."""
    import gc

    import torch

    gc.collect()
    torch.cuda.empty_cache()  # a no-op where CUDA never started


def warm_decoder(path: Path, rig: Rig, warm_requests: int):
    """The decoder of a case's method, every step shape compiled and captured; (decoder, shapes)."""
    from dspark_sim.kernels.decoder.compiles import StallLog
    from dspark_sim.kernels.decoder.engine import serve
    from dspark_sim.kernels.decoder.launch import build_decoder
    from dspark_sim.kernels.decoder.sequence import Sequence

    launch = rig.launch(path)
    decoder = build_decoder(rig.spec(launch.scenario.model), launch)
    decoder.randomize_cache()
    with StallLog(decoder.device) as stalls:
        shapes = {} if rig.dry else decoder.warmup()  # every step shape compiled and captured before timing
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


def _serve_case(decoder, path: Path, out: Path, rig: Rig, passes: int) -> dict:
    """Serve one case ``passes`` times (the earlier passes compile and capture, untimed), write its
    record; returns its ``meta.json`` but for the warm-up and the provenance of the machine."""
    from dspark_sim.kernels.decoder.compiles import StallLog
    from dspark_sim.kernels.decoder.engine import serve, write_csvs
    from dspark_sim.kernels.decoder.launch import trace_sequences

    case, launch = path.stem, rig.launch(path)
    decoder.conf = decoder.conf.replaced(batching=launch.conf.batching)  # the case's batching
    for _ in range(passes):
        decoder.pages.drop_cached()  # every pass starts with a cold prefix cache, as the simulator
        hits0, evicted0 = getattr(decoder.pages, "hit_tokens", 0), getattr(decoder.pages, "evicted_pages", 0)
        seqs = trace_sequences(launch, decoder.spec.vocab_size, max_requests=rig.max_requests)
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
