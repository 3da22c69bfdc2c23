"""Benchmark the DSpark kernels on one GPU (issue 4) against torch and torch.compile.

    python benchmarks/bench_kernels.py --tune        # on a GPU: pre-warm, tune, benchmark, GPU tests
    TRITON_INTERPRET=1 python benchmarks/bench_kernels.py --dry-run   # CPU smoke test of this script

Writes kernel_bench.json (and kernels.json with --tune) under $OUT (default ./bench_out)
and prints a table last. Times are triton.testing.do_bench medians (it flushes L2 before
every call) over rotating input sets; bytes are those the kernels actually move; the
bandwidth is compared with a device-to-device copy measured in the same run.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import importlib
import itertools
import json
import math
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

from dspark_sim.kernels import accept, accept_greedy, schedule_verify, schedule_verify_ref
from dspark_sim.kernels.baseline import accept_greedy_torch, accept_torch, schedule_verify_torch
from dspark_sim.kernels.cases import accept_case, schedule_case
from dspark_sim.reports.kernel_bench import fmt

autotune = importlib.import_module("dspark_sim.kernels.autotune")
tuning = importlib.import_module("dspark_sim.kernels.tuning")
accept_mod = importlib.import_module("dspark_sim.kernels.accept")
sched_mod = importlib.import_module("dspark_sim.kernels.schedule_verify")

VOCABS, BLOCK_SIZES, REQUESTS = (151936, 129280), (5, 7), (1, 8, 32, 64, 128, 256)
ROTATE_BYTES = 512 * 2**20
METHOD = (
    "median of triton.testing.do_bench (L2 flushed before every call) over >= 2 rotating input sets "
    "(>= 512 MiB in all when 16 sets allow); bytes = what the kernels read and write; copy = "
    "device-to-device copy of 1 GiB in the same run (bytes read + written); graph = CUDA-graph replay median"
)


class Budget:
    """Seconds left of the run; sections shrink or skip when it runs low."""

    def __init__(self, seconds: float):
        self.end = time.time() + seconds

    def left(self) -> float:
        return self.end - time.time()


def time_ms(fn, rep_ms: float, dry: bool) -> float:
    if dry:
        fn()
        t = time.perf_counter()
        fn()
        return (time.perf_counter() - t) * 1e3
    import triton.testing

    return float(triton.testing.do_bench(fn, warmup=max(2.0, rep_ms / 5), rep=rep_ms, return_mode="median"))


def graph_ms(fn, dry: bool) -> float | None:
    """Median of CUDA-graph replays: the launch overhead removed."""
    if dry:
        return None
    import triton.testing

    try:
        return float(triton.testing.do_bench_cudagraph(fn, rep=20, return_mode="median"))
    except Exception:  # capture can fail for code that syncs; report nothing rather than abort
        return None


def rotating(sets: list):
    it = itertools.cycle(sets)
    return lambda: next(it)


def copy_bandwidth(dev, dry: bool) -> dict:
    n = 2**20 if dry else 2**30  # bytes of each buffer
    src = torch.randint(0, 2**15, (n // 2,), dtype=torch.int16, device=dev)
    dst = torch.empty_like(src)
    ms = time_ms(lambda: dst.copy_(src), 50, dry)
    return {"bytes_per_copy": 2 * n, "ms": ms, "gbps": 2 * n / ms / 1e6}


def gpu_state() -> str:
    try:
        q = "name,clocks.sm,clocks.mem,clocks.max.sm,power.draw,temperature.gpu,utilization.gpu"
        return subprocess.run(["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader"], capture_output=True,
                              text=True, timeout=20).stdout.strip()
    except Exception:
        return "unknown"


# ----------------------------------------------------------------------------- accept


def accept_bytes(args: dict, W: int, cfgs: dict, accepted: torch.Tensor) -> int:
    """Bytes the accept passes move: every logit once; then, per request, its sample
    row's logits (and draft probabilities after a rejection) once more plus one block."""
    logits, q = args["target_logits"], args["draft_probs"]
    N, V = logits.shape
    R = args["indptr"].numel() - 1
    e_l = logits.element_size()
    splits = accept_mod._chunk(V, cfgs["row_stats"]["SPLITS"], cfgs["row_stats"]["BLOCK_V"])[1]
    total = N * V * e_l + N * args["draft_tokens"].element_size() + 2 * N * splits * 12 + R * (W + 1) * 4
    if q is None:
        return total
    e_q = q.element_size()
    lengths = (args["indptr"][1:] - args["indptr"][:-1]).long()
    rejected = int((accepted.long() < lengths - 1).sum())
    block = cfgs["residual"]["BLOCK_V"]
    n_blocks = math.ceil(V / block)
    total += R * V * e_l + rejected * V * e_q  # pass 2: one row per request
    total += R * block * e_l + rejected * block * e_q + 2 * R * n_blocks * 4  # pass 3 + block sums
    total += N * (e_l + e_q + 4)  # the accept test's gathers
    return total


def mismatches(a, b) -> int:
    """Requests whose accepted count or tokens differ."""
    return int(((a[0].cpu() != b[0].cpu()) | (a[1].cpu() != b[1].cpu()).any(1)).sum())


def bench_accept(V, block_size, R, compiled: dict, copy_gbps: float, dev, rep_ms: float, dry: bool) -> list[dict]:
    probe, W = accept_case(R, block_size, V, dev, seed=0)
    set_bytes = sum(t.numel() * t.element_size() for t in probe.values())
    n_sets = max(2, min(16, math.ceil(ROTATE_BYTES / set_bytes)))
    sets = [probe] + [accept_case(R, block_size, V, dev, seed=i)[0] for i in range(1, n_sets)]
    rows = []
    for variant in ("sampling", "greedy"):
        nxt = rotating(sets)
        if variant == "sampling":
            ref_fn, ref_args = accept_torch, dict(probe, max_window=W)

            def kernel():
                return accept(**nxt(), max_window=W)
        else:
            ref_fn, ref_args = accept_greedy_torch, dict(_swap(probe, variant), max_window=W)

            def kernel():
                a = nxt()
                return accept_greedy(a["target_logits"], a["indptr"], a["draft_tokens"], max_window=W)
        args = probe if variant == "sampling" else dict(probe, draft_probs=None)
        cfgs = accept_mod.configs_for(args)
        row = {"kernel": "accept", "variant": variant, "V": V, "block_size": block_size, "R": R, "rows": R * (block_size + 1),
               "logits_dtype": str(probe["target_logits"].dtype), "draft_probs_dtype": str(probe["draft_probs"].dtype),
               "input_sets": n_sets, "configs": cfgs}
        try:
            out = accept_mod.run_accept(args, W)
            row["mismatched_requests_vs_torch"] = mismatches(out, ref_fn(**ref_args))
            row["bytes"] = accept_bytes(args, W, cfgs, out[0])
            row["kernel_us"] = 1e3 * time_ms(kernel, rep_ms, dry)
            row["kernel_graph_us"] = _us(graph_ms(kernel, dry))
            best_us = min(row["kernel_us"], row["kernel_graph_us"] or math.inf)  # graph: host launch cost removed
            row["gbps"] = row["bytes"] / best_us / 1e3
            row["pct_of_copy"] = 100 * row["gbps"] / copy_gbps
            row["torch_us"] = 1e3 * time_ms(lambda: ref_fn(**dict(ref_args, **_swap(nxt(), variant))), rep_ms, dry)
            row["speedup_vs_torch"] = row["torch_us"] / row["kernel_us"]
            if variant in compiled:
                fn = compiled[variant]
                fn(**ref_args)
                row["compiled_us"] = 1e3 * time_ms(lambda: fn(**dict(ref_args, **_swap(nxt(), variant))), rep_ms, dry)
                row["speedup_vs_compiled"] = row["compiled_us"] / row["kernel_us"]
        except Exception as e:  # keep the sweep going; the error lands in the JSON
            row["error"] = f"{type(e).__name__}: {str(e)[:400]}"
        rows.append(row)
    return rows


def _swap(a: dict, variant: str) -> dict:
    """The rotated set's tensors under the baseline's argument names."""
    if variant == "sampling":
        return a
    return {k: a[k] for k in ("target_logits", "indptr", "draft_tokens")}


# ----------------------------------------------------------------------------- schedule


def bench_schedule(R, block_size, mode, lag, compiled: dict, dev, rep_ms: float, dry: bool, with_torch_graph: bool) -> dict:
    case = schedule_case(R, block_size, dev, seed=R + block_size, lag=lag)
    row = {"kernel": "schedule_verify", "mode": mode, "lag": lag, "R": R, "block_size": block_size,
           "config": autotune.lookup("schedule_verify", dict(zip("RG", sched_mod.block_shape(R, block_size))), dev)}
    try:
        out = schedule_verify(**case, mode=mode)
        cpu_case = dict(case, conf=case["conf"].cpu(), temperatures=case["temperatures"].cpu(), sps=case["sps"].to("cpu"),
                        lag_conf=None if case["lag_conf"] is None else case["lag_conf"].cpu())
        ref = schedule_verify_ref(**cpu_case, mode=mode)
        row["matches_reference"] = bool(torch.equal(out[0].cpu(), ref[0]) and torch.equal(out[1].cpu(), ref[1]))
        row["budget_k"], row["theta"], row["theta_ref"] = int(out[1]), float(out[2]), float(ref[2])
        run = lambda: schedule_verify(**case, mode=mode)  # noqa: E731
        base = lambda: schedule_verify_torch(**case, mode=mode)  # noqa: E731
        row["kernel_us"] = 1e3 * time_ms(run, rep_ms, dry)
        row["kernel_graph_us"] = _us(graph_ms(run, dry))
        row["torch_us"] = 1e3 * time_ms(base, rep_ms, dry)
        row["torch_graph_us"] = _us(graph_ms(base, dry)) if with_torch_graph else None
        row["speedup_vs_torch"] = row["torch_us"] / row["kernel_us"]
        if "schedule" in compiled:
            fn = compiled["schedule"]
            fn(**case, mode=mode)
            row["compiled_us"] = 1e3 * time_ms(lambda: fn(**case, mode=mode), rep_ms, dry)
            row["speedup_vs_compiled"] = row["compiled_us"] / row["kernel_us"]
    except Exception as e:
        row["error"] = f"{type(e).__name__}: {str(e)[:400]}"
    return row


def _us(ms):
    return None if ms is None else 1e3 * ms


# ----------------------------------------------------------------------------- orchestration


def compile_baselines(dev, dry: bool, sections: set, log) -> dict:
    """torch.compile'd baselines, warmed on the shapes that trigger their compiles."""
    if dry:
        return {}
    fns = {}
    torch._dynamo.config.recompile_limit = 32  # one graph per distinct 0/1 specialisation is expected
    try:
        for R in (8, 1):
            if "accept" in sections:
                fns.setdefault("sampling", torch.compile(accept_torch, dynamic=True))
                fns.setdefault("greedy", torch.compile(accept_greedy_torch, dynamic=True))
                args, W = accept_case(R, 7, VOCABS[0], dev, seed=0)
                fns["sampling"](**args, max_window=W)
                fns["greedy"](args["target_logits"], args["indptr"], args["draft_tokens"], max_window=W)
            if "schedule" in sections:
                fns.setdefault("schedule", torch.compile(schedule_verify_torch, dynamic=True))
                for mode in ("production", "algorithm1"):
                    fns["schedule"](**schedule_case(R * 4, 7, dev, seed=0), mode=mode)
    except Exception as e:
        log(f"torch.compile baselines unavailable: {type(e).__name__}: {str(e)[:300]}")
        return {}
    return fns


def prewarm_and_compile(dev, workers: int, dry: bool, sections: set, log) -> tuple[dict, list]:
    """Triton binaries in a process pool while this process builds the torch.compile baselines."""
    if dry:
        return compile_baselines(dev, dry, sections, log), []
    n_sm = torch.cuda.get_device_properties(dev).multi_processor_count
    jobs = [j for j in tuning.compile_jobs(n_sm) if (j[0] == "schedule") == ("accept" not in sections)
            or {"accept", "schedule"} <= sections]
    ctx = multiprocessing.get_context("spawn")
    t = time.time()
    with concurrent.futures.ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        futures = [pool.submit(tuning.run_compile_job, j) for j in jobs]
        compiled = compile_baselines(dev, dry, sections, log)
        log(f"torch.compile baselines ready after {time.time() - t:.0f} s")
        errors = [f.result() for f in futures if f.result()]
    log(f"prewarm: {len(jobs)} Triton binaries in {time.time() - t:.0f} s, {len(errors)} failed")
    for e in errors[:8]:
        log("  " + e)
    return compiled, errors


def run_gpu_tests(seconds: float, out_dir: Path, log) -> dict:
    """accept's CPU tests, run natively on the GPU against the loop references (the
    scheduler is checked against its reference inside the benchmark itself)."""
    if seconds < 30:
        return {"skipped": "no time left"}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_kernels_accept.py"]
    env = dict(os.environ, TRITON_INTERPRET="0")  # conftest.py defaults it to 1
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds, env=env)
        tail = (res.stdout + res.stderr)[-3000:]
        (out_dir / "pytest_gpu.txt").write_text(res.stdout + res.stderr)
        return {"returncode": res.returncode, "summary": tail.strip().splitlines()[-1] if tail.strip() else ""}
    except subprocess.TimeoutExpired:
        return {"timed_out_after_s": seconds}


def write_json(out_dir: Path, result: dict) -> None:
    """Written after every section, so a run cut short still leaves its numbers."""
    (out_dir / "kernel_bench.json").write_text(json.dumps(result, indent=1) + "\n")


def print_table(result: dict) -> None:
    print(f"\n{result['provenance']['device_name']}  copy {result['copy']['gbps']:.0f} GB/s  "
          f"torch {result['provenance']['torch']}  triton {result['provenance']['triton']}")
    print(f"{'accept':9}{'V':>7}{'bs':>3}{'R':>5}{'rows':>6}{'us':>8}{'graph':>7}{'GB/s':>6}{'%copy':>6}{'xtorch':>7}{'xcomp':>6}{'mis':>4}")
    for r in result["accept"]:
        if "error" in r:
            print(f"{r['variant']:9}{r['V']:>7}{r['block_size']:>3}{r['R']:>5} ERROR {r['error'][:60]}")
            continue
        print(f"{r['variant']:9}{r['V']:>7}{r['block_size']:>3}{r['R']:>5}{r['rows']:>6}{r['kernel_us']:>8.1f}"
              f"{fmt(r['kernel_graph_us'], '>7.1f')}{r['gbps']:>6.0f}{r['pct_of_copy']:>6.0f}"
              f"{fmt(r.get('speedup_vs_torch'), '>7.1f')}"
              f"{fmt(r.get('speedup_vs_compiled'), '>6.1f')}{r['mismatched_requests_vs_torch']:>4}")
    print(f"{'schedule':12}{'bs':>3}{'R':>5}{'us':>8}{'graph':>7}{'torch':>8}{'xtorch':>7}{'xcomp':>6}{'ok':>4}")
    for r in result["schedule"]:
        name = {"production": "prod", "algorithm1": "alg1"}[r["mode"]] + ("+lag" if r["lag"] else "")
        if "error" in r:
            print(f"{name:12}{r['block_size']:>3}{r['R']:>5} ERROR {r['error'][:60]}")
            continue
        print(f"{name:12}{r['block_size']:>3}{r['R']:>5}{r['kernel_us']:>8.1f}{fmt(r['kernel_graph_us'], '>7.1f')}"
              f"{r['torch_us']:>8.1f}{r['speedup_vs_torch']:>7.1f}{fmt(r.get('speedup_vs_compiled'), '>6.1f')}"
              f"{'y' if r['matches_reference'] else 'N':>4}")
    if "gpu_tests" in result:
        print("gpu tests:", result["gpu_tests"])


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tune", action="store_true", help="tune first and benchmark with the new profile")
    p.add_argument("--tune-kernels", default=",".join(autotune.KERNELS), help="which kernels --tune re-tunes")
    p.add_argument("--base-profile", type=Path, help="kernels.json whose entries the untuned kernels keep")
    p.add_argument("--budget-s", type=float, default=280.0, help="whole-run time budget")
    p.add_argument("--tune-s", type=float, default=70.0, help="time budget of the tuning pass")
    p.add_argument("--rep-ms", type=float, default=40.0, help="do_bench window per measurement")
    p.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 2), help="parallel compiles")
    p.add_argument("--gpu-tests", action="store_true", help="run the kernel tests on the GPU at the end")
    p.add_argument("--sections", default="accept,schedule", help="which kernels to benchmark")
    p.add_argument("--dry-run", action="store_true", help="CPU smoke test (TRITON_INTERPRET=1, tiny shapes)")
    args = p.parse_args(argv)
    budget = Budget(args.budget_s)
    out_dir = Path(os.environ.get("OUT", "bench_out"))
    out_dir.mkdir(parents=True, exist_ok=True)
    dry = args.dry_run
    dev = torch.device("cpu" if dry else "cuda")
    vocabs, block_sizes, requests = ((300,), (2,), (1, 4)) if dry else (VOCABS, BLOCK_SIZES, REQUESTS)
    log = lambda msg: print(f"[{args.budget_s - budget.left():6.1f}s] {msg}", flush=True)  # noqa: E731

    result = {"provenance": tuning.provenance() if not dry else {"device_name": "cpu (dry run)", "torch": torch.__version__,
                                                                    "triton": "interpreter"},
              "gpu_state_start": gpu_state(), "method": METHOD}
    sections = set(args.sections.split(","))
    compiled, prewarm_errors = prewarm_and_compile(dev, args.workers, dry, sections, log)
    result["prewarm_errors"] = prewarm_errors
    result["copy"] = copy_bandwidth(dev, dry)
    log(f"copy bandwidth {result['copy']['gbps']:.0f} GB/s")

    if args.tune and not dry:
        shapes = tuning.sweep_shapes(vocabs, requests, block_sizes)
        base = json.loads(args.base_profile.read_text())["kernels"] if args.base_profile else None
        found = tuning.tune(shapes, rep_ms=5.0, budget_s=min(args.tune_s, max(0.0, budget.left() - 45)),
                              kernels=args.tune_kernels.split(","), base=base, log=log)
        profile = out_dir / "kernels.json"
        tuning.write_profile(profile, found)
        os.environ[autotune.PROFILE_ENV] = str(profile)
        autotune.clear_caches()
        log(f"tuned profile written to {profile}")

    result["accept"], result["schedule"] = [], []
    rep = args.rep_ms
    for V, block_size, R in itertools.product(vocabs, block_sizes, requests) if "accept" in sections else ():
        if budget.left() < 12:
            log("budget low: accept sweep cut short")
            break
        result["accept"] += bench_accept(V, block_size, R, compiled, result["copy"]["gbps"], dev, rep, dry)
        torch.cuda.empty_cache() if not dry else None
    log("accept sweep done")
    write_json(out_dir, result)
    sched_cases = [(R, g, "production", False) for g in block_sizes for R in requests]
    sched_cases += [(requests[-1], block_sizes[-1], "algorithm1", False), (requests[-1], block_sizes[-1], "production", True)]
    for R, block_size, mode, lag in sched_cases if "schedule" in sections else ():
        if budget.left() < 8:
            log("budget low: schedule sweep cut short")
            break
        result["schedule"].append(bench_schedule(R, block_size, mode, lag, compiled, dev, rep, dry, budget.left() > 40))
    log("schedule sweep done")
    result["gpu_state_end"] = gpu_state()
    write_json(out_dir, result)
    if args.gpu_tests and not dry:
        result["gpu_tests"] = run_gpu_tests(budget.left() - 10, out_dir, log)
        write_json(out_dir, result)
    print_table(result)


if __name__ == "__main__":
    main()
