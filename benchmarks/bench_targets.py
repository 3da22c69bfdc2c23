"""The decoder's speed against what the GPU allows, in one process (Qwen3-8B, random bf16 weights).

    python benchmarks/bench_targets.py --run [--out F.json] [--max-seconds 300]   # on the GPU
    python benchmarks/bench_targets.py [--json F.json] [--doc docs/decoder.md]   # the table

Measured in the same run: the device-to-device copy bandwidth (1 GiB, bytes read +
written) and the bf16 matrix rate (8192^3 on random data); the target's weight bytes;
whole decode steps as served (step n+1 launched before step n's tokens are read) for
no speculation, MTP-3 and DSpark (production scheduler, the shipped profile's SPS
table) at R = 1, 8, 32, 64 requests of 1,024 cached tokens, temperature 1, synthetic
acceptance on the math preset: wall time per step, the device time of the draft and
the target forward, and the GPU's idle time between steps (the host time the overlap
did not hide). No speculation also runs with each step waited for, for comparison.

Targets: no speculation at R = 1 within 1.10x of the weight-read time (weight bytes /
copy bandwidth); at R = 64 within 1.15x of the step's roofline (weights, then the KV
cache, each at the larger of bytes / bandwidth and FLOPs / matrix rate); exposed host
time <= 0.3 ms at R <= 64; DSpark at R = 1 >= 4x no speculation in tok/s per user.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from outputs import write_block, write_result

from dspark_sim.reports.decoder_targets import JSON, block_text, host_spread, table

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
BATCHES = (1, 8, 32, 64)
METHOD_NAMES = ("none", "mtp3", "dspark")


def gemm_rate(dev) -> dict:
    """bf16 matrix rate of one 8192^3 product on random data (do_bench median)."""
    import torch
    import triton.testing

    n = 8192
    a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    ms = triton.testing.do_bench(lambda: a @ b, warmup=25, rep=200, return_mode="median")
    return {"n": n, "ms": ms, "tflops": 2 * n ** 3 / ms / 1e9}


def weight_bytes(dec) -> dict:
    """Bytes of the target's weights, and of those a decode step reads (all but the
    embedding table, of which it gathers a row per token)."""
    total = sum(p.numel() * p.element_size() for p in dec.target.parameters())
    embed = dec.target.embed.numel() * dec.target.embed.element_size()
    tied = dec.target.lm_head is dec.target.embed
    return {"total": total, "read_per_step": total if tied else total - embed}


def make_decoder(name: str, model: str, context: int, max_reqs: int, kv_tokens: int, device: str,
                 cuda_graphs: bool = True, layers: int = 0):
    """The benchmark's decoder of one method (random bf16 weights, synthetic acceptance; DSpark
    scheduling from the shipped profile's SPS table), its KV cache filled with random values;
    ``layers`` > 0: a slice of the model's first layers (``ModelSpec.sliced``, as the profiler's
    ``--layers``)."""
    sys.path.insert(0, str(HERE))
    from bench_decoder import DECODERS, profile_table

    from dspark_sim.catalog import get_model
    from dspark_sim.kernels.decoder import Decoder, DecoderConfig

    conf = DecoderConfig.of(**DECODERS[name], synthetic=True, max_running_requests=max_reqs,
                            batching="prefill_first", prefix_cache=False,
                            max_model_len=context + 1024, kv_tokens=kv_tokens, device=device,
                            cuda_graphs=cuda_graphs)
    sps0 = None
    if conf.method == "dspark":
        from dspark_sim.kernels.sps_tensors import SpsTensors
        sps0 = SpsTensors.from_json_dict({"sample_batch_tokens": [1], "sample_steps_per_sec": [1.0],
                                          "max_batch_tokens": 1 << 20})
    spec = get_model(model).sliced(layers) if layers else get_model(model)
    dec = Decoder(spec, conf, sps=sps0, acceptance={"drafter": "mtp" if name == "mtp3" else "dspark"})
    dec.randomize_cache()
    if conf.method == "dspark":
        dec.set_sps(profile_table(model, dec, context, conf)[0])
    return dec


def run(args) -> dict:
    import torch

    sys.path.insert(0, str(HERE))
    from bench_decoder import measure
    from bench_kernels import copy_bandwidth

    from dspark_sim.kernels.profiler.provenance import provenance, sm_clocks

    dev = torch.device(args.device)
    start = time.perf_counter()
    log = lambda m: print(f"[{time.perf_counter() - start:6.1f}s] {m}", flush=True)  # noqa: E731
    out = {"provenance": {**provenance(), "model": args.model, "weights": "random bf16",
                          "acceptance": "synthetic (math, simulator preset)", "context_tokens": args.context,
                          "temperature": 1.0, "sm_clocks_before": sm_clocks()},
           "copy": copy_bandwidth(dev, dev.type != "cuda"), "gemm": gemm_rate(dev), "rows": []}
    log(f"copy {out['copy']['gbps']:.0f} GB/s, gemm {out['gemm']['tflops']:.0f} TFLOP/s")
    kv = max(BATCHES) * (args.context + 8 * (4 * args.steps + 60) + 64)
    for name in METHOD_NAMES:
        dec = make_decoder(name, args.model, args.context, max(BATCHES), kv, args.device)
        if name == "none":
            out["weights"] = weight_bytes(dec)
        for overlap in (True, False) if name == "none" else (True,):
            for reqs in BATCHES:
                if time.perf_counter() - start > args.max_seconds:
                    out["rows"].append({"method": name, "reqs": reqs, "overlap": overlap, "error": "skipped: time"})
                    continue
                row = {"method": name, "reqs": reqs, "overlap": overlap}
                try:
                    row.update(measure(dec, reqs, args.context, args.steps, 0, 0, overlap=overlap))
                except Exception as err:  # keep the other rows
                    row["error"] = f"{type(err).__name__}: {str(err)[:300]}"
                out["rows"].append(row)
                log(json.dumps(row))
                write_result(args.out, out)
        del dec
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    out["provenance"]["sm_clocks_after"] = sm_clocks()
    write_result(args.out, out)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--run", action="store_true")
    p.add_argument("--json", default=str(JSON))
    p.add_argument("--out", help="with --run: where to write the JSON")
    p.add_argument("--doc", help="write the table into this markdown file's targets block")
    p.add_argument("--replicate", help="the same benchmark from another GPU: steps compared")
    p.add_argument("--spread", help="with --replicate: write the host-to-host spread JSON here "
                                    "(profiles/<gpu>/host_spread.json, read by the answers' intervals)")
    p.add_argument("--model", default="qwen3-8b")
    p.add_argument("--context", type=int, default=1024)
    p.add_argument("--steps", type=int, default=24)
    p.add_argument("--max-seconds", type=float, default=300.0)
    p.add_argument("--device", default="cuda")
    args = p.parse_args(argv)
    data = run(args) if args.run else json.loads(Path(args.json).read_text())
    replicate = json.loads(Path(args.replicate).read_text()) if args.replicate else None
    text = table(data, replicate)
    print(text)
    if args.doc:
        write_block(Path(args.doc), "targets", block_text(data, replicate))
    if args.spread and replicate is not None:
        rel = lambda path: str(Path(path).resolve().relative_to(HERE.parent))  # noqa: E731
        write_result(args.spread, host_spread(data, replicate, rel(args.json), rel(args.replicate)))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    sys.exit(main())
