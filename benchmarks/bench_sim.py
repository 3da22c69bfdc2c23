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
to ``docs/bench/NAME.json`` and the page from that file (:func:`markdown`);
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
from dataclasses import dataclass
from pathlib import Path

import yaml
from outputs import code_commit, write_result

REPO = Path(__file__).resolve().parents[1]
CODE_TRACE = REPO / "examples" / "traces" / "azure_llm_2023_code.csv"
CHAT_HOUR = REPO / "benchmarks" / "scenarios" / "chat_hour_h200.yaml"
DSPARK = {"method": "dspark", "block_size": 7, "scheduler": "production"}
TUNE_TRIALS = 200
TUNE_SLICES = "5,15"  # the tuner case's pruning: minutes of the chat hour a trial is first scored on


def chat_hour(speculation: dict) -> dict:
    """The committed chat hour (19,000 requests, ~4 million output tokens) with ``speculation``."""
    data = yaml.safe_load(CHAT_HOUR.read_text())
    return data | {"speculation": speculation}


def code_trace(speculation: dict) -> dict:
    """The shipped Azure 2023 code trace (8,819 requests) on one H200."""
    return {"name": "azure-code", "model": "qwen3-8b", "gpu": "h200",
            "workload": {"trace": str(CODE_TRACE), "domain": "code"},
            "deployment": {"max_running_requests": 256, "max_batched_tokens": 8192},
            "speculation": speculation, "slo": {"ttft_ms": 2000, "tpot_ms": 50}, "seed": 0}


def synthetic(n: int, speculation: dict) -> dict:
    """``n`` synthetic requests at 30 a second (a saturated replica), mixed domains."""
    return {"name": f"synthetic-{n}", "model": "qwen3-8b", "gpu": "h200",
            "workload": {"synthetic": {"num_requests": n, "rate_per_s": 30.0, "arrival": "poisson",
                                       "prompt_tokens": {"dist": "lognormal", "mean": 1000, "sigma": 1.0},
                                       "output_tokens": {"dist": "lognormal", "mean": 250, "sigma": 0.8}},
                         "domain": {"math": 0.4, "code": 0.4, "chat": 0.2}},
            "deployment": {"replicas": 1, "max_running_requests": 256, "max_batched_tokens": 8192},
            "speculation": speculation, "slo": {"ttft_ms": 2000, "tpot_ms": 50}, "seed": 0}


@dataclass(frozen=True)
class Case:
    """One timed run and its targets (seconds on one core, peak MiB)."""

    name: str
    label: str
    scenario: dict | None  # None: the tuner case
    target_s: float
    target_mib: float | None = None


CASES = {c.name: c for c in (
    Case("chat-none", "chat hour (19k req), none", chat_hour({"method": "none"}), 4.0),
    Case("chat-dspark", "chat hour (19k req), dspark production", chat_hour(DSPARK), 6.0),
    Case("code-none", "code trace (8,819 req), none", code_trace({"method": "none"}), 2.0),
    Case("code-dspark", "code trace (8,819 req), dspark production", code_trace(DSPARK), 2.0),
    Case("100k-none", "synthetic 100k req, none", synthetic(100_000, {"method": "none"}), 10.0),
    Case("100k-dspark", "synthetic 100k req, dspark production", synthetic(100_000, DSPARK), 10.0),
    Case("1m-dspark", "synthetic 1M req, dspark production", synthetic(1_000_000, DSPARK), 60.0, 1024.0),
    Case("tune-chat", "dspark-tune, 200 trials, chat hour, 2 workers", None, 900.0),
)}
GROUPS = {"default": ["chat-none", "chat-dspark", "code-none", "code-dspark", "100k-none", "100k-dspark"],
          "million": ["1m-dspark"], "tune": ["tune-chat"]}


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
    print(json.dumps({"wall_s": wall, "cpu_s": cpu, "completed": summary["completed"],
                      "output_tokens": summary["total_output_tokens"], "steps": summary["num_steps"],
                      "peak_mib": peak_mib}))


def sliced(case: Case, requests: int) -> Case | None:
    """``case`` cut to its first ``requests`` requests (None where it is not synthetic)."""
    synthetic = (case.scenario or {}).get("workload", {}).get("synthetic")
    if synthetic is None:
        return None
    workload = case.scenario["workload"] | {"synthetic": synthetic | {"num_requests": requests}}
    what, method = case.label.rsplit(", ", 1)
    return Case(case.name, f"{what.split(' (')[0].removesuffix(' 100k req')}, first {requests:,} req, {method}",
                case.scenario | {"workload": workload}, math.inf)


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
    trials = optuna.load_study(study_name="bench", storage=url).get_trials(deepcopy=False)
    complete = sum(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    pruned = sum(t.state == optuna.trial.TrialState.PRUNED for t in trials)
    return {"wall_s": time.perf_counter() - started, "cpu_s": (after[2] + after[3]) - (before[2] + before[3]),
            "completed": complete + pruned, "complete": complete, "pruned": pruned, "output_tokens": None,
            "steps": None, "peak_mib": None}


def code_of(rev: str, tmp: Path) -> Path:
    """The package as it was at git revision ``rev``, importable from the returned folder."""
    root = tmp / f"rev-{rev}"
    root.mkdir()
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev, "dspark_sim", "profiles", "tuner"],
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(root)], input=archive, check=True)
    for name in ("profiles", "tuner"):  # the installed layout: both live inside the package
        (root / name).rename(root / "dspark_sim" / name)
    return root


def load() -> float:
    return os.getloadavg()[0]


def verdict(case: Case, r: dict) -> str:
    if math.isinf(case.target_s):
        return "slice"
    memory_ok = case.target_mib is None or r["peak_mib"] <= case.target_mib
    ok = r["wall_s"] <= case.target_s and memory_ok
    if case.scenario is None:  # the tuner: every trial within the target (it stops searching there)
        return "pass" if r["completed"] >= TUNE_TRIALS and r["wall_s"] <= case.target_s * 1.02 else "FAIL"
    if ok:
        return "pass"
    # on a loaded machine the CPU seconds say what one free core would take
    return "FAIL (cpu s within)" if r["cpu_s"] <= case.target_s and memory_ok else "FAIL"


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine()


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
    meta = {"cpu": _cpu_name(), "cores": os.cpu_count(), "python": platform.python_version(),
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


def header_lines(meta: dict) -> list[str]:
    """The machine line and the column heads of the table."""
    other = "exact" if meta["against"] == "exact" else "REV"
    return [f"machine: {meta['cpu']}, {meta['cores']} cores, python {meta['python']}; "
            f"one core per simulation (the tuner: two workers); {meta['mode']}; fastest of {meta['repeat']}",
            f"{'case':<46}{'target':>9}{'wall s':>9}{'cpu s':>8}{'steps':>9}{'out tok/s':>11}{'MiB':>7}"
            + (f"{other + ' wall':>13}{other + ' cpu':>12}{'speed-up':>9}" if meta["against"] else "")
            + f"{'load':>11}  result"]


def row_line(r: dict) -> str:
    """One case's row of the table."""
    target = "-" if r["target_s"] is None else f"{r['target_s']:g}s" + (
        f"/{r['target_mib']:g}M" if r.get("target_mib") else "")
    cpu = "-" if r["cpu_s"] is None else f"{r['cpu_s']:.2f}"  # not recorded in converted older runs
    load_after = "" if r["load_after"] is None else f"{r['load_after']:.1f}"
    line = (f"{r['label']:<46}{target:>9}{r['wall_s']:>9.2f}{cpu:>8}"
            f"{r['steps'] if r['steps'] is not None else str(r['completed']) + ' tr':>9}"
            f"{r['out_tok_per_s']:>11,.0f}{r['peak_mib'] or 0:>7.0f}")
    if "speedup_cpu" in r:
        line += f"{r['rev_wall_s']:>13.2f}{r['rev_cpu_s']:>12.2f}{r['speedup_cpu']:>8.1f}x"
    return line + f"{r['load_before']:>5.1f}-{load_after:<5}  {r['result']}"


def markdown(data: dict) -> str:
    """A ``docs/bench`` page from its JSON: command, commit, date, what the figures mean, the table."""
    against = "" if not data["against"] else (
        " The speed-up is step-by-step mode's CPU seconds over skip-ahead's, both run interleaved in the "
        "same conditions (the two give the same run: steps, requests and tokens are checked equal)."
        if data["against"] == "exact" else f" The speed-up is the CPU seconds of revision {data['against']} over "
        "this code's, both run interleaved in the same conditions.")
    if data["requests"] is not None:
        against += (f" Each case is cut to its first {data['requests']:,} requests: a slice, timed for the "
                    "speed-up; the targets are for whole cases.")
    made = f"Made by `{data['command']}` at commit {data['commit']} on {data['date']}"
    source = f" The figures are in `{data['file']}`; this page is made from it (`python benchmarks/doc_blocks.py write`)."
    if data.get("converted"):
        source += f" {data['converted']}"
    pruned = [r for r in data["rows"] if "pruned" in r]  # runs of the pruned tuner case
    tuner = (f"two workers, DSpark alone, pruned on the hour's first {TUNE_SLICES.replace(',', ' and ')} minutes, and "
             f"every one of its {TUNE_TRIALS} trials done, complete or pruned" if pruned
             else f"two workers, and every one of its {TUNE_TRIALS} trials done")
    tuner += "".join(f"). The tuner: {r['completed']} trials done, {r['complete']} complete and {r['pruned']} "
                     "pruned" for r in pruned)
    return (f"{made}. Measured, one run each (fastest of {data['repeat']}). Targets: wall seconds on one core "
            f"(peak MiB where given; the tuner: {tuner}). `load` "
            "is the 1-minute load average before and after the case: the machine is shared with other work, and "
            f"where the load passes its two cores the wall times are longer than on a quiet machine.{against}{source}"
            "\n\n```\n" + "\n".join(header_lines(data) + [row_line(r) for r in data["rows"]]) + "\n```\n")

if __name__ == "__main__":
    main()
