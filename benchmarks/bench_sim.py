"""Simulator speed against its targets: wall and CPU seconds per case, peak memory, pass or fail.

Each simulation runs in its own process (so peak RSS is that case's) pinned to one core
where the OS allows, writing its run record as ``dspark-sim run`` does; the tuner case runs
``dspark-tune`` with two workers. Usage:

    python benchmarks/bench_sim.py                          # chat hour, code trace, 100k synthetic
    python benchmarks/bench_sim.py --cases million          # 1,000,000 requests
    python benchmarks/bench_sim.py --cases tune             # a 200-trial dspark-tune on the chat hour
    python benchmarks/bench_sim.py --against exact          # and the speed-up over step-by-step mode
    python benchmarks/bench_sim.py --cases chat-none chat-dspark --against 42f3ae8 --repeat 3

``--against exact`` runs every case in step-by-step mode too (one event per engine step,
the same outputs bit for bit), interleaved with skip-ahead (exact, skip-ahead, exact, ...),
and reports the speed-up in CPU seconds in the same conditions: on a shared machine the
absolute times move with the load, their ratio much less. ``--against REV`` does the same
with the code of git revision REV. ``--exact`` times step-by-step mode alone. The tuner case
tunes DSpark alone, pruned on the chat hour's first 5 and 15 minutes (``dspark-tune --slices``),
stops searching at its target (``--timeout``) and counts the trials done by then, complete or
pruned. The load average is printed before and after every case.

``--markdown docs/bench/NAME.md`` writes the rows, with the command, machine, commit and date,
to ``docs/bench/NAME.json`` and the page from that file (:func:`dspark_sim.reports.sim_speed.markdown`);
``benchmarks/doc_blocks.py`` re-derives the page from the committed JSON. Where a case's
time goes, phase by phase against its target's per-request budget: ``benchmarks/sim_breakdown.py``.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from outputs import code_commit, write_result

from dspark_sim.reports.sim_speed import header_lines, markdown, row_line
from dspark_sim.speed.cases import (CASES, DSPARK, GROUPS, TUNE_SLICES, TUNE_TRIALS, Case, chat_hour, cpu_name, sliced,
                                    verdict)

REPO = Path(__file__).resolve().parents[1]


def child(path: str, exact: bool) -> None:
    """Run one scenario with its run record, print a JSON line of figures (in a process of its own)."""
    try:
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    except (AttributeError, OSError):
        pass
    from dspark_sim.run import run_scenario
    from dspark_sim.scenario import load_scenario

    scenario = load_scenario(path)
    if exact:
        from dataclasses import replace

        scenario = replace(scenario, exact=True)
    with tempfile.TemporaryDirectory() as tmp:
        wall, cpu = time.perf_counter(), time.process_time()
        summary, _ = run_scenario(scenario, Path(tmp) / "out", plots=False, show_progress=False)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"wall_s": wall, "cpu_s": cpu, "completed": summary.completed,
                      "output_tokens": summary.total_output_tokens, "steps": summary.num_steps,
                      "peak_mib": peak_mib}))


def run_case(case: Case, tmp: Path, env: dict, exact: bool) -> dict:
    """Time ``case`` in a fresh process with ``env`` (PYTHONPATH picks the code)."""
    if case.scenario is None:
        return run_tune(case, tmp, env)
    path = tmp / f"{case.name}.yaml"
    path.write_text(yaml.safe_dump(case.scenario))
    cmd = [sys.executable, __file__, "--child", str(path)] + (["--exact"] if exact else [])
    done = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env)
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_tune(case: Case, tmp: Path, env: dict) -> dict:
    """A 200-trial ``dspark-tune`` of DSpark alone on the chat hour, two workers, fresh SQLite, pruned
    on the hour's first 5 and 15 minutes (``--slices``); it stops searching at the case's target, and
    ``completed`` counts the trials done by then (complete, or pruned: the budget counts both)."""
    import optuna

    scenario = tmp / "chat-dspark.yaml"
    scenario.write_text(yaml.safe_dump(chat_hour(DSPARK)))
    url = f"sqlite:///{tmp / f'tune-{time.monotonic_ns()}.db'}"
    cmd = [sys.executable, "-m", "dspark_sim.tuner.cli", "--scenario", str(scenario), "--trials", str(TUNE_TRIALS),
           "--workers", "2", "--storage", url, "--study", "bench", "--out", str(tmp / "tune"),
           "--timeout", f"{case.target_s:g}", "--baselines", "", "--slices", TUNE_SLICES, "--quiet"]
    started, before = time.perf_counter(), os.times()
    subprocess.run(cmd, check=True, cwd=REPO, env=env, stdout=subprocess.DEVNULL)
    after = os.times()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.load_study(study_name="bench", storage=url)
    trials, phases = study.get_trials(deepcopy=False), study.user_attrs.get("phases", {})
    complete = sum(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    pruned = sum(t.state == optuna.trial.TrialState.PRUNED for t in trials)
    return {"wall_s": time.perf_counter() - started, "cpu_s": (after[2] + after[3]) - (before[2] + before[3]),
            "completed": complete + pruned, "complete": complete, "pruned": pruned, **phases, "output_tokens": None,
            "steps": None, "peak_mib": None}


def code_of(rev: str, tmp: Path) -> Path:
    """The package as it was at git revision ``rev``, importable from the returned folder (with the
    scenario files and traces its timed cases read, dspark_sim/speed/cases.py)."""
    root = tmp / f"rev-{rev}"
    root.mkdir()
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev, "dspark_sim", "profiles", "tuner",
                              "benchmarks/scenarios", "examples"], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(root)], input=archive, check=True)
    for name in ("profiles", "tuner"):  # the installed layout: both live inside the package
        (root / name).rename(root / "dspark_sim" / name)
    return root


def load() -> float:
    return os.getloadavg()[0]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", nargs="+", default=["default"],
                   help=f"groups ({', '.join(GROUPS)}) or cases ({', '.join(CASES)})")
    p.add_argument("--against", metavar="REV",
                   help="also time step-by-step mode ('exact') or the code of this git revision, interleaved")
    p.add_argument("--exact", action="store_true", help="time step-by-step mode (no skip-ahead)")
    p.add_argument("--requests", type=int, metavar="N",
                   help="only the first N requests of each synthetic case (a slice: no pass or fail, for the "
                        "speed-up on a loaded machine)")
    p.add_argument("--repeat", type=int, default=1, help="runs per case (and per revision); the fastest counts")
    p.add_argument("--json", help="also write the rows here")
    p.add_argument("--markdown", help="also write the table, machine, load and command into this Markdown file")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        return child(args.child, args.exact)
    names = [n for c in args.cases for n in GROUPS.get(c, [c])]
    unknown = [n for n in names if n not in CASES]
    if unknown:
        p.error(f"unknown case {unknown[0]!r}; expected one of {', '.join(GROUPS)}, {', '.join(CASES)}")
    cases = [CASES[n] if args.requests is None else sliced(CASES[n], args.requests) for n in names]
    if None in cases:
        p.error(f"--requests slices synthetic cases only, not {names[cases.index(None)]!r}")
    meta = {"cpu": cpu_name(), "cores": os.cpu_count(), "python": platform.python_version(),
            "mode": "step-by-step (--exact)" if args.exact else "skip-ahead", "repeat": args.repeat,
            "against": args.against, "requests": args.requests}
    lines = header_lines(meta)
    print("\n".join(lines), flush=True)
    rows = []
    base_env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    with tempfile.TemporaryDirectory(prefix="bench-sim-") as tmp:
        tmp = Path(tmp)
        old_env = None
        if args.against == "exact":
            old_env = base_env
        elif args.against:
            old_env = base_env | {"PYTHONPATH": str(code_of(args.against, tmp))}
        for name, case in zip(names, cases):
            before = load()
            new, old = [], []
            for _ in range(args.repeat):
                if old_env is not None and case.scenario is not None:
                    old.append(run_case(case, tmp, old_env, args.against == "exact"))
                new.append(run_case(case, tmp, base_env, args.exact))
            r = min(new, key=lambda x: x["wall_s"]) | {"case": name, "label": case.label,
                                                       "target_s": None if math.isinf(case.target_s) else case.target_s,
                                                       "target_mib": case.target_mib,
                                                       "load_before": before, "load_after": load()}
            r["out_tok_per_s"] = r["output_tokens"] / r["wall_s"] if r["output_tokens"] else 0.0
            if old:
                o = min(old, key=lambda x: x["wall_s"])
                r |= {"rev": args.against, "rev_wall_s": o["wall_s"], "rev_cpu_s": o["cpu_s"],
                      "speedup_cpu": o["cpu_s"] / r["cpu_s"]}
                if args.against == "exact" and any(o[k] != r[k] for k in ("completed", "output_tokens", "steps")):
                    r["result"] = "DIFFERS"  # the two modes must give the same run
            r["result"] = r.get("result") or verdict(case, r)
            rows.append(r)
            lines.append(row_line(r))
            print(lines[-1], flush=True)
    command = "python benchmarks/bench_sim.py " + " ".join(sys.argv[1:])
    if args.markdown:  # the figures beside the page, and the page made from them
        command = command.replace(f"--markdown {args.markdown}", "").strip()
        out = Path(args.markdown)
        data = meta | {"command": command, "commit": code_commit("dspark_sim"),
                       "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                       "file": out.with_suffix(".json").name, "rows": rows}
        write_result(out.with_suffix(".json"), data)
        part = out.with_name(out.name + ".part")
        part.write_text(markdown(data))
        part.replace(out)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
