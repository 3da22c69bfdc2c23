"""Where the simulator's time goes: microseconds a request and an event per phase of a run,
beside the per-request budget each speed target of ``benchmarks/bench_sim.py`` implies.

    python benchmarks/sim_breakdown.py                                  # chat hour (first 3,000 req), code trace
    python benchmarks/sim_breakdown.py --requests 1000 --cases chat-dspark
    python benchmarks/sim_breakdown.py --markdown docs/bench/sim_breakdown.md
    python benchmarks/sim_breakdown.py --cases 1m-dspark --requests 100000 --markdown docs/bench/sim_breakdown_million.md

The cases are bench_sim's (the synthetic ones cut to their first ``--requests`` requests, the
code trace whole). Each is run twice in this process, pinned to one core: once plain (its wall
time) and once with the functions each phase names (``PHASES``) wrapped by a timer. A phase's
time is what is spent inside its functions and not inside another phase's (a phase's function
called from another phase counts to the inner one), so the phases sum to the run; what runs
outside all of them (simpy's event loop, the run's own frame) is ``simpy and the rest``.
Attribution is by function, exact, not sampled; the wrappers add about a microsecond a call
(the profiled run's wall beside the plain one says how much). Events: stretches (skip-ahead's
multi-step events) and step-by-step steps (prefills, and decode steps no stretch takes).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from outputs import code_commit, write_result

from dspark_sim.speed.breakdown import DEFAULT_CASES, markdown, measure, table
from dspark_sim.speed.cases import CASES, cpu_name


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", nargs="+", default=list(DEFAULT_CASES), choices=[n for n, c in CASES.items()
                                                                               if c.scenario is not None])
    p.add_argument("--requests", type=int, default=3000, help="first N requests of the synthetic cases")
    p.add_argument("--markdown", help="write the figures beside this page (NAME.json) and the page from them")
    args = p.parse_args()
    try:
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    except (AttributeError, OSError):
        pass
    rows = []
    with tempfile.TemporaryDirectory(prefix="sim-breakdown-") as tmp:
        for name in args.cases:
            rows.append(measure(name, args.requests, Path(tmp)))
            print("\n".join(table(rows[-1])) + "\n", flush=True)
    if args.markdown:
        out = Path(args.markdown)
        argv = " ".join(a for a in sys.argv[1:] if a not in ("--markdown", args.markdown))
        data = {"cpu": cpu_name(), "cores": os.cpu_count(), "python": sys.version.split()[0],
                "command": f"python benchmarks/sim_breakdown.py {argv}".strip(),
                "commit": code_commit("dspark_sim"), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                "file": out.with_suffix(".json").name, "rows": rows}
        write_result(out.with_suffix(".json"), data)
        part = out.with_name(out.name + ".part")
        part.write_text(markdown(data))
        part.replace(out)


if __name__ == "__main__":
    main()
