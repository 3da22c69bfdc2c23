"""Where a decode step's GPU time goes (Qwen3-8B, random bf16 weights): the gap to the targets split.

    python benchmarks/forward_breakdown.py --run [--out F.json]     # on the GPU
    python benchmarks/forward_breakdown.py [--json F.json] [--doc docs/decoder.md]   # the table

`benchmarks/bench_targets.py` measures whole steps against the weight-read time and the
roofline; this splits the same steps, in one process on the GPU:

- the step as served (CUDA graphs, overlapped; median of timed steps), no speculation at
  R = 1 and 64 requests and DSpark (production scheduler) at R = 1;
- every kernel of those steps from the profiler's device trace (torch.profiler, CUPTI),
  grouped by kind: matrix products (cuBLAS), attention, fused norm/RoPE/activation,
  DSpark's own kernels, copies and the rest; their sum against the step is the time no
  kernel ran (launch gaps inside the graph, and the step's host synchronisation);
- the target's linear layers alone, each weight once, replayed as one CUDA graph at the
  step's token count: what the matrix products cost without anything else, against the
  weight bytes at the copy bandwidth measured in the same run (the products' efficiency).

So the step's excess over the weight-read time is split into: products slower than the
copy bandwidth, attention and the small kernels, and time no kernel ran.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from dspark_sim.reports.forward_breakdown import block_text, kind_of

HERE = Path(__file__).resolve().parent
JSON = HERE.parent / "profiles" / "h200" / "forward_breakdown.json"
CASES = (("none", 1), ("none", 64), ("dspark", 1))


def kernel_trace(dec, seqs, steps: int) -> dict:
    """The device kernels of ``steps`` served steps: per-kind ms per step, kernels per step,
    busy ms per step (union of kernel intervals) and the top kernels by time."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from dspark_sim.kernels.profiler.steps import overlapped_steps

    overlapped_steps(dec, seqs, 4)  # warm the path
    torch.cuda.synchronize()
    launches, launch = [0], dec.launch

    def counted(*a, **k):  # every launch under the profiler is one step whose kernels the trace holds
        launches[0] += 1
        return launch(*a, **k)
    dec.launch = counted
    try:
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            timed = overlapped_steps(dec, seqs, steps)
            torch.cuda.synchronize()
    finally:
        del dec.launch
    kernels = [(e.name, e.time_range.start, e.time_range.end) for e in prof.events()
               if e.device_type == torch.autograd.DeviceType.CUDA and e.time_range.end > e.time_range.start]
    per_kind, by_name = {}, {}
    for name, start, end in kernels:
        us = end - start
        per_kind[kind_of(name)] = per_kind.get(kind_of(name), 0.0) + us
        count, total = by_name.get(name, (0, 0.0))
        by_name[name] = (count + 1, total + us)
    busy, last = 0.0, None
    for _, start, end in sorted(kernels, key=lambda k: k[1]):
        if last is None or start > last:
            busy += end - start
            last = end
        elif end > last:
            busy += end - last
            last = end
    span_us = (max(k[2] for k in kernels) - min(k[1] for k in kernels)) if kernels else 0.0
    steps_traced = max(launches[0], 1)
    top = sorted(by_name.items(), key=lambda kv: -kv[1][1])[:25]
    return {"steps_traced": steps_traced, "kernels_per_step": len(kernels) / steps_traced,
            "kind_ms_per_step": {k: v / 1e3 / steps_traced for k, v in sorted(per_kind.items())},
            "busy_ms_per_step": busy / 1e3 / steps_traced, "span_ms_per_step": span_us / 1e3 / steps_traced,
            "step_ms_under_profiler": 1e3 * statistics.median(t for t, _, _ in timed) if timed else None,
            "top": [{"name": k[:120], "kind": kind_of(k), "count_per_step": c / steps_traced,
                     "ms_per_step": us / 1e3 / steps_traced, "mean_us": us / c} for k, (c, us) in top]}


def linear_chain(dec, tokens: int, copy_gbps: float) -> dict:
    """The target's linear layers alone (each 2-D weight but the embedding table once, at
    ``tokens`` tokens), replayed as one CUDA graph: ms, bytes, and bytes / copy bandwidth."""
    import torch
    import triton.testing

    target = dec.target
    weights = [p for name, p in target.named_parameters() if p.dim() == 2 and (name != "embed" or
               target.lm_head is target.embed) and p.dtype in (torch.bfloat16, torch.float16, torch.float32)]
    # by width and dtype: DeepSeek-V4 keeps its mixing weights in fp32 beside the bf16 products
    inputs = {(w.shape[1], w.dtype): torch.randn(tokens, w.shape[1], device=w.device, dtype=w.dtype) for w in weights}
    outs = [torch.empty(tokens, w.shape[0], device=w.device, dtype=w.dtype) for w in weights]

    def chain():
        for w, o in zip(weights, outs):
            torch.matmul(inputs[w.shape[1], w.dtype], w.t(), out=o)
    chain()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        chain()
    ms = triton.testing.do_bench(graph.replay, warmup=10, rep=200, return_mode="median")
    eager_ms = triton.testing.do_bench(chain, warmup=5, rep=100, return_mode="median")
    nbytes = sum(w.numel() * w.element_size() for w in weights)
    return {"tokens": tokens, "weights": len(weights), "bytes": nbytes, "graph_ms": ms, "eager_ms": eager_ms,
            "read_ms_at_copy_bw": nbytes / copy_gbps / 1e6, "efficiency": nbytes / copy_gbps / 1e6 / ms}


def run(args) -> dict:
    import numpy as np
    import torch

    sys.path.insert(0, str(HERE))  # its neighbours: a visit runs it with PYTHONSAFEPATH
    from bench_decoder import measure
    from bench_kernels import copy_bandwidth
    from bench_targets import make_decoder, weight_bytes
    from outputs import write_result

    from dspark_sim.kernels.profiler.provenance import provenance, sm_clocks

    dev = torch.device("cuda")
    start = time.perf_counter()
    log = lambda m: print(f"[{time.perf_counter() - start:6.1f}s] {m}", flush=True)  # noqa: E731
    weights = "random bf16" + (", experts block-scaled FP8 (kernels/decoder/moe_fp8.py)" if args.moe_fp8 else "")
    out = {"provenance": {**provenance(), "model": args.model, "slice_layers": args.layers, "weights": weights,
                          "acceptance": "synthetic (math, simulator preset)", "context_tokens": args.context,
                          "sm_clocks_before": sm_clocks()},
           "copy": copy_bandwidth(dev, False), "cases": []}
    log(f"copy {out['copy']['gbps']:.0f} GB/s")
    kv = 64 * (args.context + 8 * (4 * args.steps + 80) + 64)
    cases = tuple((m, int(r)) for m, r in (c.split(":") for c in args.cases.split(","))) if args.cases else CASES
    for name in dict.fromkeys(n for n, _ in cases):
        dec = make_decoder(name, args.model, args.context, 64, kv, "cuda", layers=args.layers)
        if args.moe_fp8:  # the experts as the engines run FP8 checkpoints on Hopper, before any graph is captured
            from dspark_sim.kernels.decoder.moe_fp8 import quantize_moe_

            for module in [m for m in dec.target.modules() if getattr(m, "gate_up", None) is not None
                           and m.gate_up.dim() == 3]:
                quantize_moe_(module)
            torch.cuda.empty_cache()
        if name == "none":
            out["weights"] = weight_bytes(dec)
            out["linear_chain"] = [linear_chain(dec, t, out["copy"]["gbps"]) for t in (1, 64)]
            log(json.dumps(out["linear_chain"]))
        for method, reqs in cases:
            if method != name or time.perf_counter() - start > args.max_seconds:
                continue
            case = {"method": method, "reqs": reqs}
            try:
                case["served"] = measure(dec, reqs, args.context, args.steps, 0, 0, overlap=True)
                seqs = dec.fake_requests(reqs, args.context, np.random.default_rng(1), domain=0)
                try:
                    case["trace"] = kernel_trace(dec, seqs, args.steps)
                finally:
                    for s in seqs:
                        dec.release(s)
            except Exception as err:  # keep the other cases
                case["error"] = f"{type(err).__name__}: {str(err)[:300]}"
            out["cases"].append(case)
            log(json.dumps({k: v for k, v in case.items() if k != "trace"})
                + " " + json.dumps(case.get("trace", {}).get("kind_ms_per_step")))
            write_result(args.out, out)
        del dec
        torch.cuda.empty_cache()
    out["provenance"]["sm_clocks_after"] = sm_clocks()
    write_result(args.out, out)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--run", action="store_true")
    p.add_argument("--json", default=str(JSON))
    p.add_argument("--out", help="with --run: where to write the JSON")
    p.add_argument("--doc", help="write the table into this markdown file's forward_breakdown block")
    p.add_argument("--model", default="qwen3-8b")
    p.add_argument("--cases", help="with --run: METHOD:R,... (default: none:1,none:64,dspark:1)")
    p.add_argument("--layers", type=int, default=0, help="with --run: a slice of the model's first layers "
                   "(MoE and DeepSeek-V4 slices, as dspark-profile --layers)")
    p.add_argument("--moe-fp8", action="store_true", help="with --run: the experts in block-scaled FP8 (the "
                   "weight-read figures then count the other weights only)")
    p.add_argument("--context", type=int, default=1024)
    p.add_argument("--steps", type=int, default=24)
    p.add_argument("--max-seconds", type=float, default=200.0)
    args = p.parse_args(argv)
    data = run(args) if args.run else json.loads(Path(args.json).read_text())
    text = block_text(data)
    print(text)
    if args.doc:
        from outputs import write_block

        write_block(Path(args.doc), "forward_breakdown", text)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    sys.exit(main())
