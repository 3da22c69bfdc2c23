"""``python -m dspark_sim.kernels.profiler``: time a model's steps on this GPU.

    python -m dspark_sim.kernels.profiler --gpu h200 --model qwen3-8b --out DIR \\
        [--part verify|draft|prefill|all] [--max-seconds S]

Writes ``DIR/raw_<model>.json``: a provenance block and the timed points
``verify: [{reqs, tokens, context, step_s}]``, ``draft: [{reqs, gamma, context,
step_s}]``, ``prefill: [{chunk, context, step_s}]``. Random bf16 weights; the
grid is cut to ``--max-seconds`` (coarse points first), and points that do not
fit in memory are skipped; both are listed under ``provenance.skipped``.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m dspark_sim.kernels.profiler")
    p.add_argument("--gpu", required=True, help="GPU name recorded in the file (e.g. h200)")
    p.add_argument("--model", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--part", default="all", choices=("verify", "draft", "prefill", "all"))
    p.add_argument("--max-seconds", type=float, default=540.0)
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--kv-tokens", type=int, default=0, help="KV capacity (0: fit free memory)")
    return p.parse_args(argv)


def build(args):
    """The decoder the points run on: DSpark block drafter, gamma 8 (the largest timed)."""
    from dspark_sim.catalog import get_model
    from dspark_sim.kernels.decoder import Decoder, DecoderConfig
    from dspark_sim.kernels.profiler.grid import CACHED, CHUNKS

    spec = get_model(args.model)
    conf = DecoderConfig(method="dspark", block_size=8, scheduler="full", max_running_requests=256,
                         max_batched_tokens=max(CHUNKS), max_model_len=max(CACHED) + max(CHUNKS) + 64,
                         kv_tokens=args.kv_tokens, dtype=args.dtype, device=args.device)
    dec = Decoder(spec, conf)
    dec.randomize_cache()
    return dec


def main(argv=None) -> int:
    args = parse_args(argv)
    from dspark_sim.kernels.profiler import grid
    from dspark_sim.kernels.profiler.provenance import provenance, sm_clocks
    from dspark_sim.kernels.profiler.steps import DRAFT_CONTEXT, Stepper, run_part

    t0 = time.perf_counter()
    prov = {**provenance(), "gpu_label": args.gpu, "model": args.model, "dtype": args.dtype,
            "weights": "random", "sm_clocks_before": sm_clocks()}
    dec = build(args)
    stepper = Stepper(dec, reps=args.reps)
    parts = ("verify", "draft", "prefill") if args.part == "all" else (args.part,)
    share = {"verify": 0.75, "draft": 0.1, "prefill": 0.15}
    total = sum(share[p] for p in parts)
    out = {"verify": [], "draft": [], "prefill": []}
    skipped = {}
    for part in parts:
        budget = (args.max_seconds - (time.perf_counter() - t0)) * share[part] / total
        total -= share[part]
        deadline = time.perf_counter() + max(budget, 0.0)
        points, fn, keys = {
            "verify": (grid.verify_points(), stepper.verify, ("reqs", "tokens", "context")),
            "draft": ([(r, g) for g in grid.GAMMAS for r in grid.REQS], stepper.draft, ("reqs", "gamma")),
            "prefill": ([(c, k) for k in grid.CACHED for c in grid.CHUNKS], stepper.prefill,
                        ("chunk", "context")),
        }[part]
        rows, skip = run_part(points, fn, deadline, lambda p, s: print(part, p, f"{s * 1e3:.3f} ms",
                                                                       flush=True))
        for point, seconds in rows:
            row = dict(zip(keys, point))
            if part == "draft":
                row["context"] = DRAFT_CONTEXT
            out[part].append({**row, "step_s": seconds})
        skipped[part] = [list(p) for p in skip]
    prov.update(sm_clocks_after=sm_clocks(), elapsed_s=round(time.perf_counter() - t0, 1),
                skipped=skipped, kv_capacity_tokens=int(dec.cache.k.shape[1]),
                reps=args.reps, note="verify = target forward over the windows + drafter "
                "context keys + logits (one CUDA graph); draft = DSpark backbone (5 layers) + "
                "Markov loop + confidence head (one CUDA graph); prefill = eager chunk forward")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    path = Path(args.out) / f"raw_{args.model}.json"
    path.write_text(json.dumps({"provenance": prov, **out}, indent=1))
    print(f"wrote {path}: {len(out['verify'])} verify, {len(out['draft'])} draft, "
          f"{len(out['prefill'])} prefill points in {prov['elapsed_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
