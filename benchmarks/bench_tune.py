"""Tuner speed and DSpark against its baselines: `dspark-tune` on the shipped default scenario.

Runs the CLI once per SLO in a fresh SQLite study (every method's study ``--repeats`` times,
sampler seeds 0, 1, ...) and reports wall time and, from the run's ``report.json``, each
method's confirmed winners over the repeats: mean, spread and DSpark's difference, called a
gain only above the combined spread. Usage:

    python benchmarks/bench_tune.py                       # 200 trials, 2 workers, 100 tok/s/user, 3 repeats
    python benchmarks/bench_tune.py --slo 100 250 --trials 200 --workers 2 --repeats 3
    python benchmarks/bench_tune.py --markdown docs/tuning.md bench-default   # and docs/bench/tune_bench-default.json

With ``--markdown FILE TAG`` the figures go to ``docs/bench/tune_TAG.json`` (command, machine,
load, commit and date with them) and the block is made from that file, which
``benchmarks/doc_blocks.py`` re-derives it from (:func:`block_text`).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import optuna
from outputs import code_commit, machine, write_block, write_result

REPO = Path(__file__).resolve().parents[1]
LIMIT_S = 600  # the brief: 200 trials on the shipped trace in 10 minutes on 2 cores (per repeat)


def json_path(tag: str) -> Path:
    """Where the figures of the block ``tag`` are committed."""
    return REPO / "docs" / "bench" / f"tune_{tag}.json"


def bench(slo: float, trials: int, workers: int, root: Path, scenario: str | None = None,
          baseline_trials: int | None = None, gpu: str = "b300", repeats: int = 3) -> dict:
    """One `dspark-tune` run; figures from its ``report.json`` and its studies."""
    from dspark_sim.tuner.storage import open_storage

    url = f"sqlite:///{root / 'bench.db'}"
    study = f"bench-slo{slo:g}"
    cmd = [sys.executable, "-m", "dspark_sim.tuner.cli", "--gpu", gpu, "--trials", str(trials),
           "--workers", str(workers), "--slo-tok-per-s-user", f"{slo:g}", "--storage", url,
           "--study", study, "--out", str(root / study), "--repeats", str(repeats), "--quiet"]
    if scenario:
        cmd += ["--scenario", str(Path(scenario).resolve())]
    if baseline_trials is not None:
        cmd += ["--baseline-trials", str(baseline_trials)]
    started, cpu = time.monotonic(), os.times()
    subprocess.run(cmd, check=True, cwd=REPO, stdout=subprocess.DEVNULL)
    wall_s = time.monotonic() - started
    cpu_s = sum(os.times()[2:4]) - sum(cpu[2:4])  # children's user + system
    storage = open_storage(url)
    trials_done = {s.study_name: s.n_trials for s in optuna.get_all_study_summaries(storage)}
    report = json.loads((root / study / "report.json").read_text())
    return {"slo_tok_per_s_user": slo, "wall_s": round(wall_s, 1), "cpu_s": round(cpu_s, 1),
            "within_limit": wall_s <= LIMIT_S * repeats, "repeats": repeats,
            "command": " ".join(["dspark-tune", *cmd[3:]]), "trials_by_study": trials_done,
            "unit": report["unit"], "winners": report["winners"], "comparison": report["comparison"]}


def block_text(data: dict) -> str:
    """The results as a Markdown block: command, machine, load, commit and date, then per SLO the
    tuner's command, its wall time and the comparison over repeats."""
    from dspark_sim.tuner.repeats import table

    lines = [f"Made by `{data['command']}` at commit {data['commit']} on {data['machine']}, 1-minute load "
             f"average {data['load_end']:.1f} at the end, {data['date']} (`{data['file']}`)."]
    for key in ("converted", "note"):  # how the figures were obtained, where it matters
        if data.get(key):
            lines[0] += f" {data[key]}"
    for r in data["results"]:
        n = r["repeats"]
        lines += ["", f"`{r['command']}`: {r['wall_s']:.0f} s wall ({'within' if r['within_limit'] else 'over'} "
                  f"{LIMIT_S} s per repeat), {r['cpu_s']:.0f} CPU-s.", "",
                  *table(r["comparison"], f"{r['unit']} (confirmed)", {}), "",
                  "One repeat: the spread over sampler seeds is not measured, so no difference is called a gain."
                  if n == 1 else f"Over {n} repeats a difference is a gain only above the combined spread "
                                 "(standard deviations over repeats in quadrature)."]
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--slo", type=float, nargs="+", default=[100.0], help="tok/s/user SLOs to run")
    p.add_argument("--trials", type=int, default=200)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3, help="studies per method (sampler seeds 0, 1, ...)")
    p.add_argument("--gpu", default="b300")
    p.add_argument("--scenario", help="scenario YAML (default: the shipped examples/tune_default.yaml)")
    p.add_argument("--baseline-trials", type=int, help="trials per baseline study (default: the CLI's)")
    p.add_argument("--json", help="also write the figures here")
    p.add_argument("--markdown", nargs=2, metavar=("FILE", "TAG"),
                   help="write the figures to docs/bench/tune_TAG.json and the block made from them between "
                        "<!-- TAG:begin/end --> markers in FILE")
    args = p.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-tune-") as tmp:
        for slo in args.slo:
            r = bench(slo, args.trials, args.workers, Path(tmp), args.scenario, args.baseline_trials, args.gpu,
                      args.repeats)
            results.append(r)
            print(f"SLO {slo:g} tok/s/user, {args.repeats} repeat(s): {r['wall_s']:.0f} s "
                  f"({'within' if r['within_limit'] else 'OVER'} {LIMIT_S} s per repeat), {r['cpu_s']:.0f} CPU-s")
            from dspark_sim.tuner.repeats import table
            print("\n".join(table(r["comparison"], r["unit"], {})))
    file = json_path(args.markdown[1]) if args.markdown else None
    data = {"command": "python benchmarks/bench_tune.py " + " ".join(sys.argv[1:]), "machine": machine(),
            "load_end": os.getloadavg()[0], "date": time.strftime("%Y-%m-%d"),
            "commit": code_commit("dspark_sim", "tuner", "profiles", "examples"),
            "file": str(file.relative_to(REPO)) if file else None, "results": results}
    print(f"machine: {machine()}")
    if args.json:
        write_result(args.json, data)
    if args.markdown:
        write_result(file, data)
        write_block(Path(args.markdown[0]), args.markdown[1], block_text(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
