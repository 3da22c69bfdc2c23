"""Simulator speed: simulated requests and output tokens per wall-clock second, and peak memory.

Each case runs in its own process (so peak RSS is that case's) pinned to one
core where the OS allows. Usage:

    python benchmarks/bench_sim.py                 # shipped trace + 100k synthetic, none and dspark
    python benchmarks/bench_sim.py --cases million # the 1,000,000-request scale case
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
TRACE = REPO / "examples" / "traces" / "azure_llm_2023_code.csv"


def synthetic(n: int, rate: float, method: str) -> dict:
    return {"name": f"synthetic-{n}", "model": "qwen3-8b", "gpu": "h200",
            "workload": {"synthetic": {"num_requests": n, "rate_per_s": rate, "arrival": "poisson",
                                       "prompt_tokens": {"dist": "lognormal", "mean": 1000, "sigma": 1.0},
                                       "output_tokens": {"dist": "lognormal", "mean": 250, "sigma": 0.8}},
                         "domain": {"math": 0.4, "code": 0.4, "chat": 0.2}},
            "deployment": {"replicas": 1, "max_running_requests": 256, "max_batched_tokens": 8192},
            "speculation": {"method": method}, "slo": {"ttft_ms": 2000, "tpot_ms": 50}, "seed": 0}


def trace(method: str) -> dict:
    return {"name": "azure-code", "model": "qwen3-8b", "gpu": "h200",
            "workload": {"trace": str(TRACE), "domain": "code"},
            "deployment": {"max_running_requests": 256, "max_batched_tokens": 8192},
            "speculation": {"method": method}, "slo": {"ttft_ms": 2000, "tpot_ms": 50}, "seed": 0}


CASES = {
    "default": [("azure code trace (8,819 req), none", trace("none")),
                ("azure code trace (8,819 req), dspark", trace("dspark")),
                ("synthetic 100k req, none", synthetic(100_000, 30.0, "none")),
                ("synthetic 100k req, dspark", synthetic(100_000, 30.0, "dspark"))],
    "million": [("synthetic 1M req, dspark", synthetic(1_000_000, 30.0, "dspark"))],
}


def one(path: str) -> None:
    """Child process: run one scenario with outputs, print a JSON line of figures."""
    try:
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    except (AttributeError, OSError):
        pass
    from dspark_sim.run import run_scenario
    from dspark_sim.scenario import load_scenario

    scenario = load_scenario(path)
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        summary, _ = run_scenario(scenario, Path(tmp) / "out", plots=False, show_progress=False)
        wall = time.perf_counter() - start
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"wall_s": wall, "completed": summary["completed"],
                      "output_tokens": summary["total_output_tokens"], "steps": summary["num_steps"],
                      "peak_mib": peak_mib}))


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
    p.add_argument("--cases", default="default", choices=sorted(CASES))
    p.add_argument("--json", help="also write the rows here")
    p.add_argument("--markdown", help="also write the table, machine and command into this Markdown file")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        return one(args.child)
    rows = []
    lines = [f"machine: {_cpu_name()}, {os.cpu_count()} cores, python {platform.python_version()}; "
             f"one core per case; load average before: {os.getloadavg()[0]:.1f}",
             f"{'case':<42}{'wall s':>9}{'req/s':>10}{'out tok/s':>12}{'steps':>10}{'peak MiB':>10}"]
    print("\n".join(lines), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for label, data in CASES[args.cases]:
            path = Path(tmp) / "s.yaml"
            path.write_text(yaml.safe_dump(data))
            out = subprocess.run([sys.executable, __file__, "--child", str(path)], check=True,
                                 capture_output=True, text=True).stdout.strip().splitlines()[-1]
            r = json.loads(out) | {"case": label}
            rows.append(r)
            lines.append(f"{label:<42}{r['wall_s']:>9.2f}{r['completed'] / r['wall_s']:>10.0f}"
                         f"{r['output_tokens'] / r['wall_s']:>12.0f}{r['steps']:>10}{r['peak_mib']:>10.0f}")
            print(lines[-1], flush=True)
    if args.markdown:
        command = "python benchmarks/bench_sim.py" + (f" --cases {args.cases}" if args.cases != "default" else "")
        Path(args.markdown).write_text(f"Made by `{command}` on {time.strftime('%Y-%m-%d')}:\n\n```\n"
                                       + "\n".join(lines) + "\n```\n")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
