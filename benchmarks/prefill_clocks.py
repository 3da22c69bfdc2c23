"""Prefill steps timed back to back against timed with the GPU idle between them (Qwen3-8B, H200).

    python benchmarks/prefill_clocks.py --run [--out F.json]    # on the GPU
    python benchmarks/prefill_clocks.py [--json F.json]          # the table

Served prefill steps run between decode steps, which draw far less power; the profiler
times prefill steps back to back (``dspark-profile --part prefill``). This times the same
prefill steps (the profiler's ``Stepper.prefill_kind``, kind none, the chunk ending its
prompt) with the GPU idle for ``r`` times each call's seconds after it (``--prefill-idle r``
of the profiler), the ratios interleaved point by point over two rounds, while nvidia-smi
logs the SM clock, power and temperature every 100 ms. Same decoder, same process.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from outputs import write_result

HERE = Path(__file__).resolve().parent
JSON = HERE.parent / "profiles" / "h200" / "prefill_clocks.json"
POINTS = ((4096, 0), (2048, 2048), (1024, 4096), (512, 0), (256, 1024))
IDLE = (0.0, 1.0, 3.0)


def run(args) -> dict:
    import torch

    sys.path.insert(0, str(HERE))
    from bench_targets import make_decoder

    from dspark_sim.kernels.profiler.provenance import provenance, sm_clocks
    from dspark_sim.kernels.profiler.steps import Stepper

    smi_path = Path(args.out).with_suffix(".smi.csv")
    smi = subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu",
                            "--format=csv,noheader", "-lms", "100"], stdout=smi_path.open("w"))
    out = {"provenance": {**provenance(), "model": args.model, "weights": "random bf16",
                          "sm_clocks_before": sm_clocks(), "smi_log": smi_path.name}, "cells": []}
    try:
        dec = make_decoder("none", args.model, 8192, 4, 4 * 9216, "cuda")
        stepper = Stepper(dec, reps=10)
        for rnd in range(2):
            for chunk, cached in POINTS:
                for idle in IDLE:
                    stepper.prefill_idle = idle
                    t0 = time.time()
                    row = stepper.prefill_kind("none", chunk, cached)
                    cell = {"round": rnd, "chunk": chunk, "cached": cached, "idle": idle,
                            "start_unix": t0, "end_unix": time.time(), "clocks_after": sm_clocks(), **(row or {})}
                    out["cells"].append(cell)
                    print(json.dumps(cell), flush=True)
                    write_result(args.out, out)
        del dec
        torch.cuda.empty_cache()
    finally:
        smi.terminate()
    out["provenance"]["sm_clocks_after"] = sm_clocks()
    write_result(args.out, out)
    return out


def table(data: dict) -> str:
    """Median step ms per point and idle ratio (over the rounds), and the ratio to back to back."""
    lines = ["| chunk | cached | " + " | ".join(f"idle {r:g}x ms" for r in IDLE) + " | "
             + " | ".join(f"idle {r:g}x / back to back" for r in IDLE[1:]) + " |",
             "|---|---|" + "---|" * (2 * len(IDLE) - 1)]
    for chunk, cached in POINTS:
        ms = []
        for idle in IDLE:
            vals = [c["step_s"] for c in data["cells"] if (c["chunk"], c["cached"], c["idle"]) == (chunk, cached, idle)
                    and "step_s" in c]
            ms.append(1e3 * statistics.median(vals) if vals else float("nan"))
        lines.append(f"| {chunk} | {cached} | " + " | ".join(f"{m:.2f}" for m in ms) + " | "
                     + " | ".join(f"{m / ms[0]:.3f}" for m in ms[1:]) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--run", action="store_true")
    p.add_argument("--json", default=str(JSON))
    p.add_argument("--out", help="with --run: where to write the JSON")
    p.add_argument("--model", default="qwen3-8b")
    args = p.parse_args(argv)
    data = run(args) if args.run else json.loads(Path(args.json).read_text())
    print(table(data))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    sys.exit(main())
