"""`dspark-sim engine-fit`: an engine's host terms from files its own tools wrote
(:mod:`dspark_sim.engines.fit`)."""
from __future__ import annotations

import sys
from pathlib import Path

from dspark_sim.scenario import load_scenario


def run(args) -> int:
    from dspark_sim.cost.jsonio import write_json_atomic
    from dspark_sim.engines.fit import calibrate

    scenario = load_scenario(args.scenario)

    def progress(done: int, total: int) -> None:
        if not args.quiet:
            print(f"\rfit: replayed the runs {done} times (at most {total})", end="", file=sys.stderr, flush=True)

    result = calibrate(scenario, [Path(f) for f in args.files], progress=progress)
    if not args.quiet:
        print(file=sys.stderr)
    out = Path(args.out)
    write_json_atomic(out, result)
    t = result["terms"]
    print(f"{result['engine']} {result['version']} on {result['gpu']}/{result['model']} tp{result['tp']}: "
          f"step host {t['step_host_s'] * 1e3:.3f} ms + {t['step_host_s_per_req'] * 1e6:.2f} us/request, "
          f"front end {t['frontend_s'] * 1e3:.1f} ms a request + {t['stream_s'] * 1e6:.1f} us a streamed message")
    for row in result["replay"]:
        e = row["error"]
        print(f"  {Path(row['file']).name}: TTFT {_pct(e['ttft'])}, TPOT {_pct(e['tpot'])}, "
              f"throughput {_pct(e['throughput'])}")
    print(f"wrote {out} (use it as engine: {{name: {result['engine']}, calibration: {out}}})")
    return 0


def _pct(value) -> str:
    return "n/a" if value is None else f"{value * 100:+.1f} %"


def register(sub) -> None:
    p = sub.add_parser("engine-fit", help="fit an engine's host terms from its benchmark or step-time files")
    p.add_argument("scenario", help="scenario YAML naming the model, GPU, deployment and engine (sglang, vllm, trtllm)")
    p.add_argument("files", nargs="+", help="sglang.bench_serving JSONL, vllm bench serve JSON, dspark_sps_profiler "
                   "records/rounds JSONL, or a step CSV (reqs, step_s[, verify_tokens, context])")
    p.add_argument("--out", default="engine_calibration.json", help="calibration file to write")
    p.add_argument("--quiet", action="store_true", help="no progress")
    p.set_defaults(func=run)
