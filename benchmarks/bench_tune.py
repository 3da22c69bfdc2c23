"""Tuner speed and DSpark's measured gain: `dspark-tune` on the shipped default scenario.

Runs the CLI once per SLO in a fresh SQLite study and reports wall time,
trials completed and, from the confirmed winners, the tuned DSpark
throughput per GPU against every baseline at the same tok/s/user SLO.
Usage:

    python benchmarks/bench_tune.py                       # 200 trials, 2 workers, 100 tok/s/user
    python benchmarks/bench_tune.py --slo 100 250 --trials 200 --workers 2
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import optuna
from outputs import write_block

REPO = Path(__file__).resolve().parents[1]
LIMIT_S = 600  # the brief: 200 trials on the shipped trace in 10 minutes on 2 cores


def bench(slo: float, trials: int, workers: int, root: Path, scenario: str | None = None,
          baseline_trials: int | None = None, gpu: str = "b300") -> dict:
    """One `dspark-tune` run; figures from its study."""
    from dspark_sim.tuner.storage import open_storage

    url = f"sqlite:///{root / 'bench.db'}"
    study = f"bench-slo{slo:g}"
    cmd = [sys.executable, "-m", "dspark_sim.tuner.cli", "--gpu", gpu, "--trials", str(trials),
           "--workers", str(workers), "--slo-tok-per-s-user", f"{slo:g}", "--storage", url,
           "--study", study, "--out", str(root / study), "--quiet"]
    if scenario:
        cmd += ["--scenario", str(Path(scenario).resolve())]
    if baseline_trials is not None:
        cmd += ["--baseline-trials", str(baseline_trials)]
    started, cpu = time.monotonic(), os.times()
    subprocess.run(cmd, check=True, cwd=REPO, stdout=subprocess.DEVNULL)
    wall_s = time.monotonic() - started
    cpu_s = sum(os.times()[2:4]) - sum(cpu[2:4])  # children's user + system
    storage = open_storage(url)
    rows = {}
    for summary in optuna.get_all_study_summaries(storage):
        s = optuna.load_study(study_name=summary.study_name, storage=storage)
        done = [t for t in s.trials if t.state == optuna.trial.TrialState.COMPLETE]
        winner = s.user_attrs.get("winner") or {}
        method = summary.study_name.removeprefix(study).lstrip(".") or "dspark"
        rows[method] = {"trials": len(done), "feasible": winner.get("feasible"),
                        "tok_s_gpu": winner.get("values", [None])[0],
                        "tok_s_user": (winner.get("mean") or {}).get("mean_tok_per_s_per_user")}
    baselines = {m: r for m, r in rows.items() if m != "dspark" and r["feasible"]}
    best = max(baselines, key=lambda m: baselines[m]["tok_s_gpu"]) if baselines else None
    ours = rows["dspark"]["tok_s_gpu"]
    return {"slo_tok_per_s_user": slo, "wall_s": round(wall_s, 1), "cpu_s": round(cpu_s, 1),
            "within_limit": wall_s <= LIMIT_S,
            "command": " ".join(["dspark-tune", *cmd[3:]]), "studies": rows, "best_baseline": best,
            "gain_vs_best_baseline": None if best is None else ours / baselines[best]["tok_s_gpu"] - 1,
            "gain_vs_static_mtp": (ours / rows["static"]["tok_s_gpu"] - 1) if rows.get("static", {}).get("feasible")
            else None}


def markdown(results: list[dict], args) -> str:
    """The results as a Markdown block: command, machine and load, one table per SLO."""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    lines = [f"Made by `python benchmarks/bench_tune.py {' '.join(sys.argv[1:])}` on {machine()}, "
             f"1-minute load average {load:.1f} at the end, {time.strftime('%Y-%m-%d')}."]
    for r in results:
        lines += ["", f"`{r['command']}`: {r['wall_s']:.0f} s wall ({'within' if r['within_limit'] else 'over'} "
                  f"{LIMIT_S} s), {r['cpu_s']:.0f} CPU-s.", "",
                  "| method | trials | tok/s/GPU (confirmed) | tok/s/user | SLO met | DSpark's gain |",
                  "|---|---|---|---|---|---|"]
        ours = r["studies"]["dspark"]["tok_s_gpu"]
        for method, row in r["studies"].items():
            gain = "" if method == "dspark" or not row["feasible"] or not row["tok_s_gpu"] or not ours \
                else f"{ours / row['tok_s_gpu'] - 1:+.1%}"
            lines.append(f"| {method} | {row['trials']} | {row['tok_s_gpu'] or 0:.1f} | {row['tok_s_user'] or 0:.1f} "
                         f"| {'yes' if row['feasible'] else 'no'} | {gain} |")
    return "\n".join(lines)


def machine() -> str:
    return f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, {platform.system()}"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--slo", type=float, nargs="+", default=[100.0], help="tok/s/user SLOs to run")
    p.add_argument("--trials", type=int, default=200)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--gpu", default="b300")
    p.add_argument("--scenario", help="scenario YAML (default: the shipped examples/tune_default.yaml)")
    p.add_argument("--baseline-trials", type=int, help="trials per baseline study (default: the CLI's)")
    p.add_argument("--json", help="also write the figures here")
    p.add_argument("--markdown", nargs=2, metavar=("FILE", "TAG"),
                   help="write the results between <!-- TAG:begin/end --> markers in FILE")
    args = p.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-tune-") as tmp:
        for slo in args.slo:
            r = bench(slo, args.trials, args.workers, Path(tmp), args.scenario, args.baseline_trials, args.gpu)
            results.append(r)
            d = r["studies"]["dspark"]
            print(f"SLO {slo:g} tok/s/user: {d['trials']} DSpark trials + baselines in {r['wall_s']:.0f} s "
                  f"({'within' if r['within_limit'] else 'OVER'} {LIMIT_S} s), {r['cpu_s']:.0f} CPU-s")
            for method, row in r["studies"].items():
                print(f"  {method:10s} {row['trials']:4d} trials  {row['tok_s_gpu'] or 0:8.1f} tok/s/GPU  "
                      f"{row['tok_s_user'] or 0:6.1f} tok/s/user  SLO met: {row['feasible']}")
            for label, key in (("best baseline (" + str(r["best_baseline"]) + ")", "gain_vs_best_baseline"),
                               ("static chain k (EAGLE-3 or MTP)", "gain_vs_static_mtp")):
                if r[key] is not None:
                    print(f"  DSpark vs {label}: {r[key]:+.1%}")
    print(f"machine: {machine()}")
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": machine(), "results": results}, indent=2) + "\n")
    if args.markdown:
        write_block(Path(args.markdown[0]), args.markdown[1], markdown(results, args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
