"""Fidelity: the real decoder and the simulator on the same traces (H200 error table).

    python benchmarks/fidelity.py cases                  # CPU: trace slices, scenarios, SPS table
    python benchmarks/fidelity.py run --out DIR          # GPU: the decoder serves every case
    python benchmarks/fidelity.py compare --real DIR     # CPU: simulate every case, error table

``cases`` writes ``profiles/h200/validation/cases/``: one Azure-format trace per
load (slices of the shipped Azure code trace, and synthetic Poisson traces from
about one running request to a saturated 256) and one scenario per (trace,
method) for no speculation, MTP-3 and DSpark's production scheduler, Qwen3-8B
on the H200. The DSpark scenarios name one SPS table (``sps_dspark.json``, the
table the simulator derives from the shipped profile, drafter included), so the
decoder and the simulator schedule from the same numbers. Each scenario is read
unchanged by ``dspark-decode`` and by ``dspark-sim run``.

``run`` (on the GPU) builds the decoder once per method (random bf16 weights,
synthetic acceptance from the same acceptance model), compiles and captures every
step shape (``Decoder.warmup``) before timing, then serves every case as fast as
possible (idle gaps skipped, busy periods real) and writes ``DIR/<case>/``
``requests.csv``, ``steps.csv`` and ``meta.json`` (provenance, graphs captured
during the case).

``compare`` simulates every case with the shipped profile, copies both runs to
``profiles/h200/validation/runs/<case>/{real,sim}/``, and writes the error table
(``profiles/h200/validation/errors.json`` and ``docs/validation.md``).
"""
from __future__ import annotations

import argparse
import csv
import dataclasses
import datetime as dt
import json
import math
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import yaml

REPO = Path(__file__).resolve().parents[1]
VALIDATION = REPO / "profiles" / "h200" / "validation"
CASES_DIR = VALIDATION / "cases"
AZURE = REPO / "examples" / "traces" / "azure_llm_2023_code.csv"
MODEL, GPU = "qwen3-8b", "h200"
METHODS = {  # run in this order (DSpark first: its kernels take longest to warm up)
    "dspark": {"method": "dspark", "drafter": "dspark", "block_size": 7, "scheduler": "production",
               "lag_steps": 2, "sps_table": "sps_dspark.json"},
    "mtp3": {"method": "static", "drafter": "mtp", "block_size": 3},
    "none": {"method": "none"},
}
# name: (source, requests, load[, batching]); azure: (first row, time_scale); synthetic:
# (rate/s, seed[, mean prompt tokens]). Batching prefill_first unless named: the "-mixed"
# cases serve their base case's trace with prompt chunks beside the decode windows.
TRACES = {
    "azure-1x": ("azure", 40, (4000, 1.0)),
    "azure-8x": ("azure", 100, (4000, 8.0)),
    "syn-light": ("synthetic", 12, (0.4, 1)),
    "syn-mid": ("synthetic", 120, (12.0, 2)),
    "syn-high": ("synthetic", 300, (40.0, 3)),
    "syn-sat": ("synthetic", 400, (1000.0, 4)),
    "long-light": ("synthetic", 16, (0.25, 5, 4000)),
    "long-mid": ("synthetic", 60, (1.5, 6, 4000)),
    "syn-mid-mixed": ("synthetic", 120, (12.0, 2), "mixed"),
    "long-mid-mixed": ("synthetic", 60, (1.5, 6, 4000), "mixed"),
}
DOMAIN = {"azure": "code", "synthetic": "math"}
DEPLOYMENT = {"max_running_requests": 256, "max_batched_tokens": 8192, "batching": "prefill_first"}
MAX_MODEL_LEN = 10240
WARM_REQUESTS = 0  # a served warm-up trace on top of Decoder.warmup (300: every tier as they drain)
EPOCH = dt.datetime(2026, 1, 1)


# -- cases (CPU) --------------------------------------------------------------------------
def write_trace(path: Path, arrival_s: np.ndarray, prompt: np.ndarray, output: np.ndarray) -> None:
    """An Azure-format CSV (TIMESTAMP, ContextTokens, GeneratedTokens)."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["TIMESTAMP", "ContextTokens", "GeneratedTokens"])
        for a, p, o in zip(arrival_s, prompt, output):
            w.writerow([f"{EPOCH + dt.timedelta(microseconds=round(float(a) * 1e6)):%Y-%m-%d %H:%M:%S.%f}",
                        int(p), int(o)])


def azure_slice(first: int, count: int, scale: float):
    """Rows ``first..first+count`` of the Azure code trace, time from 0, sped up ``scale``x."""
    from dspark_sim.workload import read_trace

    chunks = list(read_trace(AZURE, fmt="azure", max_requests=first + count))
    a = np.concatenate([c.arrival_s for c in chunks])[first:]
    p = np.concatenate([c.prompt_tokens for c in chunks])[first:]
    o = np.concatenate([c.output_tokens for c in chunks])[first:]
    return (a - a[0]) / scale, p, o


def synthetic(count: int, rate: float, seed: int, prompt_mean: int = 768):
    """Poisson arrivals; prompts lognormal (mean ``prompt_mean``, 32..8192), outputs uniform 64..320."""
    rng = np.random.default_rng(seed)
    a = np.cumsum(rng.exponential(1.0 / rate, count))
    a -= a[0]
    cap = 6000 if prompt_mean <= 768 else 8192  # the first cases' cap, kept so their traces do not move
    p = np.clip(np.round(rng.lognormal(np.log(prompt_mean) - 0.18, 0.6, count)), 32, cap)
    o = rng.integers(64, 321, count)
    return a, p, o


def make_cases() -> list[Path]:
    """Write traces, scenarios and the SPS table; returns the scenario paths."""
    from dspark_sim.catalog import get_gpu
    from dspark_sim.cost import get_cost_model
    from dspark_sim.engine.simulator import scheduler_table
    from dspark_sim.scenario import load_scenario

    CASES_DIR.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, (source, count, load, *batching) in TRACES.items():
        a, p, o = azure_slice(load[0], count, load[1]) if source == "azure" else synthetic(count, *load)
        deployment = {**DEPLOYMENT, "batching": batching[0] if batching else DEPLOYMENT["batching"]}
        if int((p + o).max()) > MAX_MODEL_LEN - 16:
            raise SystemExit(f"{name}: a request exceeds max_model_len {MAX_MODEL_LEN}")
        write_trace(CASES_DIR / f"{name}.csv", a, p, o)
        for method, spec in METHODS.items():
            scenario = {"name": f"{name}__{method}", "model": MODEL, "gpu": GPU,
                        "workload": {"trace": f"{name}.csv", "format": "azure", "domain": DOMAIN[source]},
                        "deployment": deployment, "speculation": spec, "seed": 0}
            path = CASES_DIR / f"{name}__{method}.yaml"
            path.write_text(yaml.safe_dump(scenario, sort_keys=False))
            paths.append(path)
    # the DSpark scenarios' table: derived from the shipped profile with the drafter's cost
    probe = CASES_DIR / "_probe.yaml"
    probe.write_text(yaml.safe_dump({"model": MODEL, "gpu": GPU, "workload": {"trace": "syn-sat.csv"},
                                     "deployment": DEPLOYMENT,
                                     "speculation": {k: v for k, v in METHODS["dspark"].items()
                                                     if k != "sps_table"}}))
    scenario = load_scenario(probe)
    probe.unlink()
    table = scheduler_table(scenario, get_cost_model(get_gpu(GPU).name, MODEL, warn=False))
    table.save(CASES_DIR / "sps_dspark.json")
    return paths


# -- run (GPU) ------------------------------------------------------------------------------
def archive(out: Path, path: Path) -> None:
    """``out`` as a gzipped tar at ``path``, replaced atomically (a cut-off run keeps its cases)."""
    import tarfile

    tmp = path.with_name(path.name + ".tmp")
    with tarfile.open(tmp, "w:gz") as tar:
        tar.add(out, arcname=out.name)
    tmp.replace(path)


def run_cases(out: Path, max_seconds: float, only: list[str] | None, archive_to: Path | None = None,
              methods: list[str] | None = None, passes: int = 1, warm_requests: int = WARM_REQUESTS,
              kv_tokens: int = 0, crosscheck: bool = True) -> None:
    """Serve every selected case; ``only`` names traces (every method) or cases
    (``trace__method``). After a method's cases, ``crosscheck`` times the profiler's
    whole decode steps and prefill steps on the same decoder (``crosscheck.json``)."""
    import torch

    from dspark_sim.catalog import get_model
    from dspark_sim.kernels.decoder.cli import _build, _requests
    from dspark_sim.kernels.decoder.compiles import StallLog
    from dspark_sim.kernels.decoder.engine import serve, write_csvs
    from dspark_sim.kernels.decoder.sequence import Sequence
    from dspark_sim.kernels.decoder.settings import load_settings
    from dspark_sim.kernels.profiler.provenance import provenance, sm_clocks

    t_start = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    shutil.copy(CASES_DIR / "sps_dspark.json", out / "sps_dspark.json")  # what DSpark scheduled from
    prov = {**provenance(), "sm_clocks_before": sm_clocks()}
    checks = {}
    for method in methods or METHODS:
        scenarios = [CASES_DIR / f"{t}__{method}.yaml" for t in TRACES
                     if only is None or t in only or f"{t}__{method}" in only]
        st = load_settings(CASES_DIR / f"{next(iter(TRACES))}__{method}.yaml", synthetic=True, device="cuda",
                           dtype="bfloat16", max_model_len=MAX_MODEL_LEN, kv_tokens=kv_tokens)
        spec = get_model(st.model)
        args = argparse.Namespace(checkpoint=None, draft_checkpoint=None, prompts=None, trace=None,
                                  max_requests=None, temperature=1.0)
        t0 = time.perf_counter()
        decoder = _build(spec, st, args)
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
        print(f"{method}: built and warmed in {time.perf_counter() - t0:.1f} s ({shapes}), "
              f"{len(decoder.graphs.entries)} graphs", flush=True)
        for path in scenarios:
            case = path.stem
            if time.perf_counter() - t_start > max_seconds:
                print(f"{case}: skipped (--max-seconds)", flush=True)
                continue
            st = load_settings(path, synthetic=True, device="cuda", dtype="bfloat16",
                               max_model_len=MAX_MODEL_LEN, kv_tokens=kv_tokens)
            decoder.conf = dataclasses.replace(decoder.conf, batching=st.decoder.batching)  # per case
            for _ in range(passes):  # the passes before the last compile and capture (untimed)
                seqs = _requests(args, st, spec, decoder)
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
            meta = {"case": case, "wall_s": round(wall, 2), "requests": len(result.requests),
                    "passes": passes, "warm_requests": warm_requests, "warmup": shapes,
                    "kv_capacity_tokens": int(decoder.cache.k.shape[1]),
                    "output_tokens": tokens, "steps": len(result.steps),
                    "graphs_captured_during_case": sum(e["graphs_captured"] for e in events),
                    "triton_compiles_during_case": sum(len(e["compiles"]) for e in events)
                    if stalls.available else None,
                    "allocator_during_case": alloc, "stalled_steps": events,
                    "provenance": {**prov, "model": st.model, "weights": "random bf16",
                                   "acceptance": "synthetic (simulator acceptance model)",
                                   "temperature": 1.0, "sm_clocks_after": sm_clocks()}}
            (out / case / "meta.json").write_text(json.dumps(meta, indent=1))
            print(f"{case}: {len(result.requests)} requests, {tokens} tokens, {len(result.steps)} steps "
                  f"in {wall:.1f} s; {meta['graphs_captured_during_case']} graphs captured, "
                  f"{meta['triton_compiles_during_case']} compiles, allocator {alloc}", flush=True)
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


CROSS_REQS = (1, 4, 16, 64, 256)
CROSS_CHUNKS = (64, 512, 2048, 8192)


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


# -- compare (CPU) ----------------------------------------------------------------------------
KEYS = ("output_throughput", "p50_tpot_ms", "mean_tpot_ms", "p99_tpot_ms", "mean_ttft_ms", "p50_ttft_ms",
        "p99_ttft_ms",
        "mean_e2el_ms", "mean_itl_ms", "mean_accept_length", "mean_verify_tokens_per_step")
GOALS = {"output_throughput": 0.05, "p50_tpot_ms": 0.05, "p99_tpot_ms": 0.10, "mean_ttft_ms": 0.10,
         "p50_ttft_ms": 0.10, "p99_ttft_ms": 0.10}


def trace_of_run(run_dir: Path, path: Path) -> int:
    """The trace a decoder run served, rebuilt from its ``requests.csv`` (arrival, prompt and
    output tokens of every request, in id order); returns the number of requests."""
    with open(run_dir / "requests.csv", newline="") as f:
        rows = sorted(csv.DictReader(f), key=lambda r: int(r["request_id"]))
    arrival = np.array([float(r["arrival_s"]) for r in rows])
    write_trace(path, arrival, np.array([int(r["prompt_tokens"]) for r in rows]),
                np.array([int(r["output_tokens"]) for r in rows]))
    return len(rows)


def compare(real_roots: list[Path], out_root: Path, quiet: bool = False) -> list[dict]:
    """Simulate every case that has a decoder run (the first of ``real_roots`` holding it),
    on the exact requests that run served; both runs, plots and scenario under ``runs/<case>``."""
    from dspark_sim.metrics.outdir import atomic_dir
    from dspark_sim.run import run_scenario
    from dspark_sim.scenario import load_scenario
    from dspark_sim.validate import compare_metrics, plot, run_metrics

    rows = []
    for path in sorted(CASES_DIR.glob("*__*.yaml")):
        case = path.stem
        real_dir = next((r / case for r in real_roots if (r / case / "requests.csv").is_file()), None)
        if real_dir is None:
            if not quiet:
                print(f"{case}: no real run", flush=True)
            continue
        with atomic_dir(out_root / "runs" / case) as tmp:
            shutil.copytree(real_dir, tmp / "real")
            trace_of_run(real_dir, tmp / "trace.csv")
            scenario = yaml.safe_load(path.read_text())
            scenario["workload"]["trace"] = "trace.csv"
            (tmp / "scenario.yaml").write_text(yaml.safe_dump(scenario, sort_keys=False))
            # the table the decoder scheduled from (kept with its runs), else the case's
            table = real_dir.parent / "sps_dspark.json"
            shutil.copy(table if table.is_file() else CASES_DIR / "sps_dspark.json", tmp / "sps_dspark.json")
            run_scenario(load_scenario(tmp / "scenario.yaml"), tmp / "sim", plots=False,
                         show_progress=False)
            for name in list((tmp / "sim").iterdir()):
                if name.name not in ("requests.csv", "steps.csv", "summary.json"):
                    shutil.rmtree(name) if name.is_dir() else name.unlink()
            plot(tmp / "sim", tmp / "real", tmp)
            metrics = compare_metrics(run_metrics(tmp / "sim"), run_metrics(tmp / "real"))
        meta = json.loads((real_dir / "meta.json").read_text()) if (real_dir / "meta.json").is_file() else {}
        notes_path = real_dir.parent / "notes.json"
        notes = json.loads(notes_path.read_text()) if notes_path.is_file() else {}
        trace, method = case.split("__")
        row = {"case": case, "trace": trace, "method": method, "real_run": str(real_dir.parent.name),
               "current_decoder": bool(notes.get("current_decoder", True)),
               "requests": meta.get("requests"), "passes": meta.get("passes", 1),
               "graphs_captured": meta.get("graphs_captured_during_case"),
               "compiles": meta.get("triton_compiles_during_case"),
               "metrics": {m["metric"]: m for m in metrics if m["metric"] in KEYS},
               "step_replay": step_replay(real_dir, method)}
        rows.append(row)
        print(f"{case:<22}" + "".join(f"{k.replace('_ms', '')[:14]:>16}{row['metrics'][k]['rel_error']:>+7.1%}"
                                     for k in ("output_throughput", "p50_tpot_ms", "mean_ttft_ms")
                                     if k in row["metrics"]), flush=True)
    return rows


def step_replay(real_dir: Path, method: str, cost=None) -> dict | None:
    """The cost model on every step the decoder served (its work from ``steps.csv``): median
    relative error of decode steps and prefill steps without the gap before them, and of that
    gap (``sched_s``, the serving loop's host time), by running requests; None for runs that
    do not record their steps' work."""
    from dspark_sim.catalog import get_gpu
    from dspark_sim.cost import get_cost_model
    from dspark_sim.cost.base import DraftWork, StepWork
    from dspark_sim.scenario import Speculation

    with open(real_dir / "steps.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows or "decode_context_tokens" not in rows[0]:
        return None
    cost = cost or get_cost_model(get_gpu(GPU).name, MODEL, warn=False)
    spec = Speculation(**{k: v for k, v in METHODS[method].items() if k in ("method", "drafter", "block_size")})
    out = {"decode": [], "prefill": [], "sched": []}
    for r in rows:
        dec, running = int(r["decode_reqs"]), int(r["running_reqs"])
        ctx = int(r["decode_context_tokens"])
        draft = DraftWork(spec.draft_kind, dec, spec.block_size, ctx) if dec and spec.draft_kind else None
        work = StepWork(dec, int(r["verify_tokens"]), ctx, int(r["prefill_tokens"]), int(r["prefill_reqs"]),
                        float(r["prefill_attn_tokens2"]), draft, int(r["decode_max_context"]), running)
        parts = cost.breakdown(work)
        sched, real_sched = parts.pop("sched_s", 0.0), float(r["sched_s"])
        real = float(r["step_s"]) - real_sched
        out["decode" if dec else "prefill"].append((running, sum(parts.values()) / real - 1.0))
        out["sched"].append((running, sched / real_sched - 1.0 if real_sched > 0 else math.nan))
    bins = ((1, 4), (5, 16), (17, 64), (65, 128), (129, 256))
    res = {}
    for kind, errs in out.items():
        run = np.array([x for x, _ in errs], dtype=np.float64)
        err = np.array([e for _, e in errs])
        ok = ~np.isnan(err)
        res[kind] = {"steps": int(ok.sum()),
                     "median_error": float(np.median(err[ok])) if ok.any() else math.nan,
                     "by_running": {f"{lo}-{hi}": float(np.median(err[m])) for lo, hi in bins
                                    if (m := ok & (run >= lo) & (run <= hi)).any()}}
    return res


def summarise(rows: list[dict]) -> dict:
    """Median and p90 absolute relative error of every metric over the cases."""
    out = {}
    for key in KEYS:
        errs = [abs(r["metrics"][key]["rel_error"]) for r in rows
                if key in r["metrics"] and not math.isnan(r["metrics"][key]["rel_error"])]
        if errs:
            out[key] = {"median": float(np.median(errs)), "p90": float(np.percentile(errs, 90)),
                        "max": float(np.max(errs)), "cases": len(errs), "goal": GOALS.get(key)}
    return out


def plot_errors(rows: list[dict], path: Path) -> None:
    """Relative error of the headline metrics, one group of bars per case (a cross marks a
    run of an earlier decoder)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = ("output_throughput", "p50_tpot_ms", "p99_tpot_ms", "mean_ttft_ms", "p99_ttft_ms")
    fig, ax = plt.subplots(figsize=(max(6, 1.3 * len(rows)), 4.5))
    width = 0.8 / len(keys)
    for j, key in enumerate(keys):
        err = [100 * r["metrics"][key]["rel_error"] if key in r["metrics"] else np.nan for r in rows]
        ax.bar(np.arange(len(rows)) + (j - len(keys) / 2 + 0.5) * width, np.clip(err, -100, 200), width,
               label=key)
    for i, r in enumerate(rows):
        if not r["current_decoder"]:
            ax.plot(i, -95, "kx")
    for y in (-10, -5, 5, 10):
        ax.axhline(y, color="grey", lw=0.6, ls="--")
    ax.set_xticks(np.arange(len(rows)), [r["case"] for r in rows], rotation=30, ha="right", fontsize=8)
    ax.set(ylabel="(sim - real) / real, % (clipped to -100..200)",
           title="simulator against the real decoder on the H200 (x: an earlier decoder)")
    ax.legend(fontsize=7, ncol=3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def summary_lines(summary: dict) -> list[str]:
    lines = ["| metric | median abs err | p90 | max | points | goal |", "|---|---|---|---|---|---|"]
    for key, s in summary.items():
        goal = f"<= {s['goal']:.0%}" if s["goal"] else "-"
        ok = "" if not s["goal"] else (" (met)" if s["median"] <= s["goal"] else " (**missed**)")
        lines.append(f"| {key} | {s['median']:.1%}{ok} | {s['p90']:.1%} | {s['max']:.1%} | {s['cases']} | {goal} |")
    return lines


def markdown(rows: list[dict], summary: dict, prov: dict, real: str = "DIR",
             replicate: tuple[str, list[dict]] | None = None) -> str:
    head = ("# Simulator against the real decoder on traces (H200)\n\n"
            f"Made by `python benchmarks/fidelity.py compare --real {real}` from the decoder runs of "
            "`python benchmarks/fidelity.py run` (`bash benchmarks/h200_call.sh fidelity` through the "
            f"device tool). Real: {prov.get('gpu')}, driver {prov.get('driver')}, CUDA "
            f"{prov.get('cuda')}, torch {prov.get('torch')}, triton {prov.get('triton')}, "
            f"{str(prov.get('date'))[:10]}; Qwen3-8B shape, random bf16 weights, synthetic acceptance, "
            "temperature 1. Simulated: the same scenario files (`profiles/h200/validation/cases/`), "
            "shipped profile `profiles/h200/qwen3-8b.json`, replaying exactly the requests the decoder "
            "served (rebuilt from its `requests.csv`). err = (sim - real) / real; both runs, the "
            "scenario and per-case plots are in `profiles/h200/validation/runs/<case>/`.\n\n"
            "How to read it:\n\n"
            "- **The decoder overlaps its steps** (as SGLang's overlap scheduler): step n+1 is "
            "planned and launched while step n runs, the verify metadata is built on the GPU, "
            "DSpark's budget is sized on the host from lagged confidences, and prompt steps up "
            "to 512 tokens replay CUDA graphs. The gap column (`sched_s`) is the GPU's idle time "
            "before a step, the host time the overlap did not hide; the profile's host terms are "
            "fitted to whole overlapped steps (`docs/profiles.md`).\n"
            "- **Only runs of the current decoder are compared.** Cases whose runs predate it "
            "(the decoder runs listed at the end say which) need serving again; earlier runs "
            "stay under `profiles/h200/validation/real/` with their notes.\n"
            "- **Seen or unseen host.** Each run's notes name the GPU (its uuid) and whether the "
            "profile's whole-step, gap and prefill parts were timed on it; the goals of an "
            "unseen host apply to a replicate on another machine (`--replicate`).\n"
            "- **Step rows.** A row ends when the GPU ends the step; requests' times are when "
            "the host reads their tokens, as a client sees them. Runs whose notes say their rows "
            "end when the host read the step attribute a long launch (an eager prefill) to the "
            "step before it: their per-step replay of prompt steps is not a measure of the "
            "profile, their request metrics are.\n\n")
    current = [r for r in rows if r["current_decoder"]]
    lines = ["## The current decoder", "", f"{len(current)} points: " + ", ".join(r["case"] for r in current)
             + ".", ""] + summary_lines(summarise(current))
    if len(current) != len(rows):
        lines += ["", "## Every point, earlier decoder runs included", ""] + summary_lines(summary)
    if replicate:
        name, rep_rows = replicate
        lines += ["", f"## Replicate on another machine (`{name}`)", "",
                  f"{len(rep_rows)} points: " + ", ".join(r["case"] for r in rep_rows) + ".", ""] \
            + summary_lines(summarise(rep_rows)) + ["", _table(rep_rows)]
    replay = _replay_table(rows)
    return head + "![errors by case](img/validation_errors.png)\n\n" + "\n".join(lines) \
        + "\n\n## Each point\n\n" + _table(rows) + replay \
        + "\n\nDecoder runs (`profiles/h200/validation/real/`):\n\n" + "\n".join(_notes(rows, replicate)) + "\n"


TABLE_COLS = ("output_throughput", "p50_tpot_ms", "mean_tpot_ms", "p99_tpot_ms", "mean_ttft_ms", "p99_ttft_ms",
              "mean_accept_length")


def _table(rows: list[dict]) -> str:
    table = ["| case | decoder run | " + " | ".join(f"{c} real / sim / err" for c in TABLE_COLS) + " |",
             "|---|---|" + "---|" * len(TABLE_COLS)]
    for r in rows:
        cells = []
        for c in TABLE_COLS:
            m = r["metrics"].get(c)
            cells.append("-" if m is None else f"{m['real']:.1f} / {m['sim']:.1f} / {m['rel_error']:+.1%}")
        run = f"{r['real_run']}{'' if r['current_decoder'] else ' (earlier decoder)'}, {r['passes']} pass"
        if r.get("graphs_captured") is not None:
            run += f", {r['graphs_captured']} graphs captured"
        if r.get("compiles") is not None:
            run += f", {r['compiles']} compiles"
        table.append(f"| {r['case']} | {run} | " + " | ".join(cells) + " |")
    return "\n".join(table)


def _replay_table(rows: list[dict]) -> str:
    """The cost model on each served step (``step_replay``), for runs that record their work."""
    rows = [r for r in rows if r.get("step_replay")]
    if not rows:
        return ""
    fmt = lambda d: "-" if not d or not d["steps"] else (  # noqa: E731
        f"{d['median_error']:+.1%} ({d['steps']}; " + ", ".join(f"{k}: {v:+.0%}" for k, v in d["by_running"].items())
        + ")")
    lines = ["", "", "## Each served step priced by the profile", "",
             "The cost model on the work of every step the decoder served (`steps.csv`: requests, "
             "verify tokens, KV tokens and the longest request, prefill chunks): median of "
             "(model - real) / real over the steps (how many; by running requests). The gap before "
             "each step (`sched_s`: retire, admit, schedule) is priced by the profile's `schedule` "
             "term and compared apart.", "",
             "| case | decode steps | prefill steps | gap before the step |", "|---|---|---|---|"]
    for r in rows:
        d = r["step_replay"]
        lines.append(f"| {r['case']} | {fmt(d['decode'])} | {fmt(d['prefill'])} | {fmt(d['sched'])} |")
    return "\n".join(lines)


def _notes(rows: list[dict], replicate) -> list[str]:
    names = {r["real_run"] for r in rows} | ({r["real_run"] for r in replicate[1]} if replicate else set())
    notes = []
    for root in sorted(names):
        path = VALIDATION / "real" / root / "notes.json"
        if path.is_file():
            n = json.loads(path.read_text())
            notes.append(f"- `{root}`: {n.get('decoder', '')}. {n.get('end', '')}".rstrip())
    return notes


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("cases")
    r = sub.add_parser("run")
    r.add_argument("--out", required=True)
    r.add_argument("--max-seconds", type=float, default=420.0)
    r.add_argument("--only", nargs="*", help="traces (every method) or cases trace__method to run (default all)")
    r.add_argument("--archive", help="also keep a .tgz of --out here, updated after every case")
    r.add_argument("--methods", nargs="*", choices=list(METHODS), help="methods to run (default all)")
    r.add_argument("--passes", type=int, default=1, help="serve each case this often, keep the last")
    r.add_argument("--warm-requests", type=int, default=WARM_REQUESTS)
    r.add_argument("--kv-tokens", type=int, default=0, help="decoder KV capacity (0: free memory)")
    r.add_argument("--no-crosscheck", action="store_true", help="skip the profiler's steps after each method")
    c = sub.add_parser("compare")
    c.add_argument("--real", required=True, nargs="+",
                   help="directories of decoder runs (one folder per case), first wins")
    c.add_argument("--replicate", help="a decoder run on another machine: its cases' errors, "
                   "reported beside the main table")
    c.add_argument("--doc", default=str(REPO / "docs" / "validation.md"))
    args = p.parse_args(argv)
    if args.cmd == "cases":
        for path in make_cases():
            print(path.relative_to(REPO))
    elif args.cmd == "run":
        run_cases(Path(args.out), args.max_seconds, args.only,
                  Path(args.archive) if args.archive else None, args.methods, args.passes,
                  args.warm_requests, args.kv_tokens, not args.no_crosscheck)
    else:
        rows = compare([Path(r) for r in args.real], VALIDATION)
        summary = summarise(rows)
        replicate = None
        if args.replicate:
            import tempfile
            with tempfile.TemporaryDirectory() as tmp:
                replicate = (Path(args.replicate).name, compare([Path(args.replicate)], Path(tmp), quiet=True))
        metas = sorted(Path(args.real[0]).glob("*/meta.json"))
        prov = json.loads(metas[0].read_text())["provenance"] if metas else {}
        out = {"provenance": prov, "summary": summary, "cases": rows}
        if replicate:
            out["replicate"] = {"run": replicate[0], "summary": summarise(replicate[1]), "cases": replicate[1]}
        (VALIDATION / "errors.json").write_text(json.dumps(out, indent=1) + "\n")
        plot_errors(rows, REPO / "docs" / "img" / "validation_errors.png")
        rel = lambda r: str(Path(r).resolve().relative_to(REPO)) \
            if Path(r).resolve().is_relative_to(REPO) else r  # noqa: E731
        text = markdown(rows, summary, prov, " ".join(rel(r) for r in args.real)
                        + (f" --replicate {rel(args.replicate)}" if args.replicate else ""), replicate)
        Path(args.doc).write_text(text)
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
