"""Tuner speed and DSpark against its baselines: `dspark-tune` on the shipped default scenario.

Runs the CLI once per SLO in a fresh SQLite study (every method's study ``--repeats`` times,
sampler seeds 0, 1, ...) and reports wall time and, from the run's ``report.json``, each
method's confirmed winners over the repeats: mean, spread and DSpark's difference, called a
gain only above the combined spread. Usage:

    python benchmarks/bench_tune.py                       # 200 trials, 2 workers, 100 tok/s/user, 3 repeats
    python benchmarks/bench_tune.py --slo 100 250 --trials 200 --workers 2 --repeats 3
    python benchmarks/bench_tune.py --markdown docs/tuning.md bench-default   # and docs/bench/tune_bench-default.json
    python benchmarks/bench_tune.py --scenario benchmarks/scenarios/chat_hour_h200.yaml --gpu h200 --slo scenario \
        --baselines '' --slices 5,15 --storage runs/bench-tune-chat     # pruned against unpruned

With ``--slices M1,M2`` the DSpark study runs twice, without pruning and with it
(``dspark-tune --slices``), each ``--repeats`` times, and the table sets the pruned study's
confirmed winners beside the unpruned study's: the difference of their means is called a
change only above the combined spread over the repeats (the rule of the report's comparison).
``--storage DIR`` keeps the studies in ``DIR/bench.db``: a run cut short resumes there, and a
study already done is only confirmed again; the trial-seconds column is read from the studies
(every trial's wall time, summed), so it counts the trials of every run that made them.
``--pruned-trials N`` gives the pruned study another trial budget (for example the one at which
it spends the unpruned study's trial-seconds).

With ``--markdown FILE TAG`` the figures go to ``docs/bench/tune_TAG.json`` (command, machine,
load, commit and date with them) and the block is made from that file, which
``benchmarks/doc_blocks.py`` re-derives it from (:func:`dspark_sim.reports.tuning.block_text`).
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import optuna
from outputs import code_commit, machine, write_block, write_result

from dspark_sim.reports.tuning import LIMIT_S, block_text, json_path, pruning_lines

REPO = Path(__file__).resolve().parents[1]


def bench(slo: float | None, trials: int, workers: int, root: Path, scenario: str | None = None,
          baseline_trials: int | None = None, gpu: str = "b300", repeats: int = 3, baselines: str | None = None,
          slices: str | None = None, study: str | None = None) -> dict:
    """One `dspark-tune` run; figures from its ``report.json`` and its studies. ``slo``: a tok/s/user
    SLO, or None for the scenario's own."""
    from dspark_sim.tuner.storage import open_storage

    url = f"sqlite:///{root / 'bench.db'}"
    study = study or (f"bench-slo{slo:g}" if slo is not None else "bench")
    cmd = [sys.executable, "-m", "dspark_sim.tuner.cli", "--gpu", gpu, "--trials", str(trials),
           "--workers", str(workers)]
    if slo is not None:
        cmd += ["--slo-tok-per-s-user", f"{slo:g}"]
    cmd += ["--storage", url, "--study", study, "--out", str(root / study), "--repeats", str(repeats), "--quiet"]
    if scenario:
        cmd += ["--scenario", str(Path(scenario).resolve())]
    if baseline_trials is not None:
        cmd += ["--baseline-trials", str(baseline_trials)]
    if baselines is not None:
        cmd += ["--baselines", baselines]
    if slices:
        cmd += ["--slices", slices]
    started, cpu = time.monotonic(), os.times()
    subprocess.run(cmd, check=True, cwd=REPO, stdout=subprocess.DEVNULL)
    wall_s = time.monotonic() - started
    cpu_s = sum(os.times()[2:4]) - sum(cpu[2:4])  # children's user + system
    storage = open_storage(url)
    trials_done = {s.study_name: s.n_trials for s in optuna.get_all_study_summaries(storage)
                   if s.study_name == study or s.study_name.startswith(study + ".")}
    report = json.loads((root / study / "report.json").read_text())
    return {"study": study, "slo_tok_per_s_user": slo, "wall_s": round(wall_s, 1), "cpu_s": round(cpu_s, 1),
            "within_limit": wall_s <= LIMIT_S * repeats, "repeats": repeats,
            "command": shlex.join(["dspark-tune", *cmd[3:]]), "trials_by_study": trials_done,
            "states": {name: _states(storage, name) for name in trials_done},
            "unit": report["unit"], "winners": report["winners"], "comparison": report["comparison"],
            "slices": report.get("slices", [])}


def _states(storage, study: str) -> dict:
    """A study's trials by state, and the wall seconds its trials took, summed."""
    trials = optuna.load_study(study_name=study, storage=storage).get_trials(deepcopy=False)
    out = {state: sum(t.state.name == state for t in trials) for state in ("COMPLETE", "PRUNED", "FAIL")}
    out["trial_s"] = round(sum((t.datetime_complete - t.datetime_start).total_seconds() for t in trials
                               if t.datetime_complete and t.datetime_start), 1)
    return out


def bench_pruning(args, root: Path) -> dict:
    """The DSpark study without pruning and with ``args.slices``, and how their confirmed winners
    over the repeats compare (:func:`dspark_sim.tuner.repeats.compare`, pruned against unpruned)."""
    from dspark_sim.tuner.repeats import Spread, compare

    runs, spreads = {}, {}
    for variant, slices in (("unpruned", None), ("pruned", args.slices)):
        trials = args.pruned_trials if variant == "pruned" and args.pruned_trials else args.trials
        r = bench(args.slo[0], trials, args.workers, root, args.scenario, args.baseline_trials, args.gpu,
                  args.repeats, args.baselines, slices, f"bench-{variant}")
        ours = r["comparison"]["methods"]["dspark"]
        spreads[variant] = Spread(variant, tuple(ours["values"]), ours["repeats"], ours["budget"],
                                  tuple(ours["completed"]))
        runs[variant] = r
        print(f"{variant}: {r['wall_s']:.0f} s, {r['cpu_s']:.0f} CPU-s; winners {ours['values']}")
    vs = compare(spreads["pruned"], spreads["unpruned"])
    return {"variants": runs, "vs_unpruned": vs, "spreads": {k: v.to_json() for k, v in spreads.items()}}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--slo", nargs="+", default=["100"],
                   help="tok/s/user SLOs to run, or 'scenario' for the scenario's own SLO")
    p.add_argument("--trials", type=int, default=200)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3, help="studies per method (sampler seeds 0, 1, ...)")
    p.add_argument("--gpu", default="b300")
    p.add_argument("--scenario", help="scenario YAML (default: the shipped examples/tune_default.yaml)")
    p.add_argument("--baseline-trials", type=int, help="trials per baseline study (default: the CLI's)")
    p.add_argument("--baselines", help="dspark-tune --baselines (default: the CLI's; '' for DSpark alone)")
    p.add_argument("--slices", help="compare the DSpark study pruned at these minutes (dspark-tune --slices) "
                                    "with the unpruned one")
    p.add_argument("--pruned-trials", type=int, help="the pruned study's trials (default: --trials)")
    p.add_argument("--storage", help="keep the studies in DIR/bench.db (default: a temporary directory)")
    p.add_argument("--json", help="also write the figures here")
    p.add_argument("--markdown", nargs=2, metavar=("FILE", "TAG"),
                   help="write the figures to docs/bench/tune_TAG.json and the block made from them between "
                        "<!-- TAG:begin/end --> markers in FILE")
    args = p.parse_args()
    args.slo = [None if s == "scenario" else float(s) for s in args.slo]
    results, pruning = [], None
    with tempfile.TemporaryDirectory(prefix="bench-tune-") as tmp:
        root = Path(args.storage).resolve() if args.storage else Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        if args.slices:
            pruning = bench_pruning(args, root)
            print("\n".join(pruning_lines(pruning)))
        for slo in [] if args.slices else args.slo:
            r = bench(slo, args.trials, args.workers, root, args.scenario, args.baseline_trials, args.gpu,
                      args.repeats, args.baselines)
            results.append(r)
            shown = "the scenario's SLO" if slo is None else f"SLO {slo:g} tok/s/user"
            print(f"{shown}, {args.repeats} repeat(s): {r['wall_s']:.0f} s "
                  f"({'within' if r['within_limit'] else 'OVER'} {LIMIT_S} s per repeat), {r['cpu_s']:.0f} CPU-s")
            from dspark_sim.tuner.repeats import table
            print("\n".join(table(r["comparison"], r["unit"], {})))
    file = json_path(args.markdown[1]) if args.markdown else None
    data = {"command": shlex.join(["python", "benchmarks/bench_tune.py", *sys.argv[1:]]), "machine": machine(),
            "load_end": os.getloadavg()[0], "date": time.strftime("%Y-%m-%d"),
            "commit": code_commit("dspark_sim", "tuner", "profiles", "examples"),
            "file": str(file.relative_to(REPO)) if file else None, "results": results}
    if pruning is not None:
        data["pruning"] = pruning
    print(f"machine: {machine()}")
    if args.json:
        write_result(args.json, data)
    if args.markdown:
        write_result(file, data)
        write_block(Path(args.markdown[0]), args.markdown[1], block_text(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
