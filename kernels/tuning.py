"""Tuning the DSpark kernels on the current GPU: time each config of the search spaces in
:mod:`dspark_sim.kernels.autotune` per shape bucket, after pre-compiling every candidate
binary in parallel processes, and write the profile file that ``autotune.lookup`` reads.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import time
from pathlib import Path

from .autotune import (
    KERNELS,
    clear_caches,
    default_config,
    lookup,
    refinements,
    residual_space,
    row_stats_space,
    schedule_space,
    shape_key,
)

def sweep_shapes(vocabs=(151936, 129280), requests=(1, 8, 32, 64, 128, 256), block_sizes=(5, 7)) -> list[dict]:
    """The (V, R, block_size) grid of benchmarks/bench_kernels.py; the tuner keys on N = R (block_size + 1) and R."""
    return [{"V": v, "R": r, "block_size": g} for v in vocabs for r in requests for g in block_sizes]


def _time_ms(fn, rep_ms: float, graph: bool = False) -> float:
    """Median time of fn; graph=True replays a CUDA graph, for launches too short for
    do_bench to see past the host's launch overhead."""
    import triton.testing

    if graph:
        return float(triton.testing.do_bench_cudagraph(fn, rep=rep_ms, return_mode="median"))
    return float(triton.testing.do_bench(fn, warmup=max(1.0, rep_ms / 4), rep=rep_ms, return_mode="median"))


def _time_space(make_fn, space: list[dict], rep_ms: float, graph: bool) -> list[tuple[dict, float]]:
    timed = []
    for cfg in space:
        try:
            timed.append((cfg, _time_ms(make_fn(cfg), rep_ms, graph)))
        except Exception:  # a config the compiler rejects (say, out of resources) is skipped
            continue
    return timed


def _tune_one(make_fn, space: list[dict], rep_ms: float, graph: bool = False) -> tuple[dict | None, float]:
    """Best config of a space, then of the winner's refinements."""
    timed = _time_space(make_fn, space, rep_ms, graph)
    if not timed:
        return None, math.inf
    best = min(timed, key=lambda t: t[1])
    timed += _time_space(make_fn, refinements(best[0]), rep_ms, graph)
    return min(timed, key=lambda t: t[1])


# Compiling is CPU work: pre-warm Triton's on-disk cache from a process pool so that
# timing never waits on the compiler. A job is (kind, config, flag).


def compile_jobs(n_sm: int, vocab: int = 151936) -> list[tuple]:
    """Every binary the tuner and the benchmark can launch, slowest to build first."""
    jobs = []
    for block_r in (256, 128, 64, 32, 16):
        for cfg in schedule_space(block_r, 8):
            flags = ("lag", "algorithm1", "production") if block_r == 256 else ("production",)
            jobs += [("schedule", dict(cfg, R=block_r), flag) for flag in flags]
    for cfg in _dedupe(row_stats_space(8, vocab, n_sm)):
        for prefetch in (0, 1):
            jobs += [("row_stats", dict(cfg, PREFETCH=prefetch), greedy) for greedy in (False, True)]
    residual = [dict(cfg, num_stages=s) for cfg in _dedupe(residual_space(8, vocab, n_sm)) for s in (1, 2, 3)]
    jobs += [("residual", cfg, None) for cfg in residual]
    jobs += [("finalize", cfg, None) for cfg in residual if cfg["num_stages"] == 1]  # depends on BLOCK_V only
    jobs.append(("finalize_greedy", {"BLOCK_V": 16, "SPLITS": 1, "num_warps": 4, "num_stages": 1}, None))
    return jobs


def _dedupe(space: list[dict]) -> list[dict]:
    """One config per compiled binary: SPLITS is a launch argument, not a constant."""
    seen = {}
    for cfg in space:
        seen.setdefault((cfg["BLOCK_V"], cfg["num_warps"]), dict(cfg, SPLITS=1))
    return list(seen.values())


def run_compile_job(job: tuple, device: str = "cuda", vocab: int = 151936) -> str | None:
    """Compile (by launching once on small inputs) one job; return an error or None."""
    import torch

    from .cases import accept_case, schedule_case

    kind, cfg, flag = job
    try:
        dev = torch.device(device)
        if kind == "schedule":
            sched = importlib.import_module(__package__ + ".schedule_verify")
            case = schedule_case(cfg["R"], 7, dev, seed=0, lag=flag == "lag")
            sched.run_schedule(**{k: case[k] for k in ("conf", "temperatures", "sps")}, cfg=cfg,
                               mode="algorithm1" if flag == "algorithm1" else "production", lag_conf=case["lag_conf"],
                               path="single")
        else:
            acc = importlib.import_module(__package__ + ".accept")
            args, W = accept_case(8, 7, vocab, dev, seed=0)
            greedy = kind == "finalize_greedy" or (kind == "row_stats" and flag)
            if greedy:
                args["draft_probs"] = None
            default = default_config("accept_row_stats", {"V": vocab, "N": 64}, 132, False)
            stats = acc.launch_row_stats(args["target_logits"], args["indptr"], args["temperature"], greedy,
                                         cfg if kind == "row_stats" else default)
            if kind in ("residual", "finalize"):
                sums = acc.launch_residual_sums(args, stats, cfg)
                if kind == "finalize":
                    acc.launch_finalize(args, stats, sums, cfg, W)
            elif kind == "finalize_greedy":
                acc.launch_finalize(args, stats, None, cfg, W)
        if dev.type == "cuda":
            torch.cuda.synchronize()
        return None
    except Exception as e:  # reported, not fatal: the tuner skips what does not build
        return f"{kind} {cfg} {flag}: {type(e).__name__}: {str(e)[:300]}"


def prewarm(jobs: list[tuple], workers: int, log=print) -> list[str]:
    """Compile jobs in parallel processes (they fill the shared on-disk cache)."""
    import concurrent.futures
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        errors = [e for e in pool.map(run_compile_job, jobs) if e]
    log(f"prewarm: {len(jobs)} binaries, {len(errors)} failed")
    for e in errors[:10]:
        log("  " + e)
    return errors


def _accept_stage(kernel: str, args: dict, W: int):
    """make_fn for the tuner: cfg -> a closure timing one accept pass alone."""
    acc = importlib.import_module(__package__ + ".accept")
    greedy = kernel == "accept_row_stats_greedy"
    if kernel != "accept_residual":
        return lambda cfg: lambda: acc.launch_row_stats(args["target_logits"], args["indptr"], args["temperature"], greedy, cfg)
    N, V = args["target_logits"].shape
    stats = acc.launch_row_stats(args["target_logits"], args["indptr"], args["temperature"], False,
                                 lookup("accept_row_stats", {"V": V, "N": N}, args["target_logits"].device))
    return lambda cfg: lambda: acc.launch_residual_sums(args, stats, cfg)


def tune(shapes: list[dict], *, rep_ms: float = 10.0, budget_s: float = 600.0, kernels=KERNELS, base=None,
         log=print) -> dict:
    """Tune the named kernels on the current GPU for the given (V, R, block_size) shapes,
    keeping the entries of ``base`` (a profile's "kernels" dict) for the others."""
    import torch

    from .cases import accept_case, schedule_case

    sched = importlib.import_module(__package__ + ".schedule_verify")
    dev = torch.device("cuda")
    n_sm = torch.cuda.get_device_properties(dev).multi_processor_count
    t_end = time.time() + budget_s
    found: dict = {k: dict((base or {}).get(k, {})) if k not in kernels else {} for k in KERNELS}
    for shape in shapes:
        if time.time() > t_end:
            log("tune: time budget spent; untuned shapes fall back to the nearest entry")
            break
        args, W = accept_case(shape["R"], shape["block_size"], shape["V"], dev, seed=0)
        n_rows = args["target_logits"].shape[0]
        for kernel, space, key in (
            ("accept_row_stats", row_stats_space(n_rows, shape["V"], n_sm), {"V": shape["V"], "N": n_rows}),
            ("accept_row_stats_greedy", row_stats_space(n_rows, shape["V"], n_sm), {"V": shape["V"], "N": n_rows}),
            ("accept_residual", residual_space(shape["R"], shape["V"], n_sm), {"V": shape["V"], "R": shape["R"]}),
        ):
            k = shape_key(key)
            if kernel in kernels and k not in found[kernel]:
                cfg, ms = _tune_one(_accept_stage(kernel, args, W), space, rep_ms)
                if cfg is not None:
                    found[kernel][k] = cfg
                    log(f"tune {kernel} {k}: {cfg} {ms * 1e3:.1f} us")
        del args
        block_r, block_g = sched.block_shape(shape["R"], shape["block_size"])
        k = shape_key({"R": block_r, "G": block_g})
        if "schedule_verify" in kernels and k not in found["schedule_verify"]:
            case = schedule_case(shape["R"], shape["block_size"], dev, seed=0)
            space = schedule_space(block_r, block_g)
            cfg, ms = _tune_one(lambda c: lambda: sched.run_schedule(**case, cfg=c, path="single"), space, rep_ms, graph=True)
            if cfg is not None:
                found["schedule_verify"][k] = cfg
                log(f"tune schedule_verify {k}: {cfg} {ms * 1e3:.1f} us")
    return found


def provenance() -> dict:
    """GPU, driver, CUDA, torch and triton versions, and the date."""
    import datetime
    import subprocess

    import torch
    import triton

    try:
        driver = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True, timeout=20
        ).stdout.strip().splitlines()[0]
    except Exception:  # no nvidia-smi: leave it unknown rather than fail the run
        driver = "unknown"
    return {
        "device_name": torch.cuda.get_device_name(),
        "driver": driver,
        "cuda": torch.version.cuda,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def write_profile(path: Path, found: dict) -> dict:
    import torch

    doc = {"device_name": torch.cuda.get_device_name(), "provenance": provenance(), "kernels": found}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    clear_caches()
    return doc


def main(argv=None) -> None:
    """``python -m dspark_sim.kernels.tuning --out profiles/<gpu>/kernels.json``"""
    import torch

    p = argparse.ArgumentParser(description="Tune the DSpark kernels on this GPU and write its kernels.json.")
    p.add_argument("--out", type=Path, required=True, help="e.g. profiles/h200/kernels.json")
    p.add_argument("--rep-ms", type=float, default=10.0, help="timing window per config (ms)")
    p.add_argument("--budget-s", type=float, default=600.0, help="stop tuning new shapes after this long")
    p.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 2), help="parallel compiles")
    args = p.parse_args(argv)
    prewarm(compile_jobs(torch.cuda.get_device_properties(0).multi_processor_count), args.workers)
    found = tune(sweep_shapes(), rep_ms=args.rep_ms, budget_s=args.budget_s)
    write_profile(args.out, found)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
