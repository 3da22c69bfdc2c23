"""The profiler over several GPUs: collectives by message size, and whole tensor-parallel steps.

    dspark-profile comm --gpu h200 --tp 2 --out DIR [--max-bytes B] [--reps N] [--device cuda|cpu]
    dspark-profile steps --gpu h200 --model qwen3-32b --tp 2 --out DIR [--reqs 1,8,...] [--context C]

``comm`` times ``all_reduce`` and ``all_to_all`` (bf16 on GPUs, fp32 under gloo) from 1 KiB up
to ``--max-bytes`` by factors of 4, the median of ``--reps`` calls after three, the slowest
rank's median kept (a collective ends when its last rank does), and writes
``DIR/comm_tp<N>.json`` (:mod:`dspark_sim.cost.comm_curves`; source ``measured`` on GPUs,
``cpu`` under gloo). ``steps`` times whole decode steps of the tensor-parallel decoder as
served (the one-GPU profiler's ``step`` part: none, chain = MTP-3, block = DSpark block 7;
synthetic acceptance, CUDA graphs captured per rank) and writes
``DIR/steps_<model>.tp<N>.json``, which ``dspark-profile fit`` compares with the tp-1 fit
(:mod:`dspark_sim.profiling.tp_check`).
"""
from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

KIB = 1024


def comm_sizes(max_bytes: int, min_bytes: int = KIB) -> list[int]:
    """Message sizes from ``min_bytes`` to ``max_bytes`` by factors of 4."""
    out, b = [], min_bytes
    while b <= max_bytes:
        out.append(b)
        b *= 4
    return out


def comm_job(ctx, sizes: list[int], reps: int) -> dict:
    """One rank's part of the collective sweep; rank 0 returns ``{op: [(bytes, seconds)]}``."""
    import torch
    import torch.distributed as dist

    cuda = ctx.device.startswith("cuda")
    dtype = torch.bfloat16 if cuda else torch.float32
    item = torch.tensor([], dtype=dtype).element_size()
    out = {}
    for op in ("all_reduce", "all_to_all"):
        rows = []
        for nbytes in sizes:
            n = max(ctx.world, nbytes // item // ctx.world * ctx.world)
            x = torch.ones(n, dtype=dtype, device=ctx.device)
            y = torch.empty_like(x)
            call = (lambda: dist.all_reduce(x)) if op == "all_reduce" else (lambda: dist.all_to_all_single(y, x))
            med = torch.tensor([_median_s(call, reps, cuda)], dtype=torch.float64, device=ctx.device)
            dist.all_reduce(med, op=dist.ReduceOp.MAX)
            rows.append((n * item, float(med)))
        out[op] = rows
    return out


def _median_s(call, reps: int, cuda: bool) -> float:
    import torch
    import torch.distributed as dist

    for _ in range(3):
        call()
    times = []
    for _ in range(reps):
        dist.barrier()
        if cuda:
            torch.cuda.synchronize()
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            call()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) / 1e3)
        else:
            t0 = time.perf_counter()
            call()
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def steps_job(ctx, spec, kinds: tuple, reqs: tuple, context: int, steps: int, overrides: dict) -> list[dict]:
    """One rank's part of the whole-step sweep over ``spec`` (a catalog model, or a tiny one in
    tests; ``overrides``: :class:`DecoderConfig` fields); rank 0 returns the step rows."""
    import numpy as np
    import torch

    from dspark_sim.kernels.decoder import Decoder, DecoderConfig
    from dspark_sim.kernels.decoder.ranks import Leader, follow
    from dspark_sim.kernels.profiler.steps import time_steps
    from dspark_sim.kernels.sps_tensors import SpsTensors

    flat = SpsTensors.from_json_dict({"sample_batch_tokens": [1], "sample_steps_per_sec": [1.0],
                                      "max_batch_tokens": 1 << 20})
    settings = {"none": dict(method="none"), "chain": dict(method="static", block_size=3, scheduler="full"),
                "block": dict(method="dspark", block_size=7, scheduler="production")}
    acceptance = {"none": None, "chain": {"drafter": "mtp"}, "block": {"drafter": "dspark"}}
    rows = []
    for kind in kinds:
        torch.manual_seed(0)
        gpu = ctx.device.startswith("cuda")
        conf = DecoderConfig.of(**{**settings[kind], "synthetic": True, "max_running_requests": max(reqs),
                                   "batching": "prefill_first", "prefix_cache": False,
                                   "max_model_len": context + 1024, "device": ctx.device,
                                   "kernels": "triton" if gpu else "torch",
                                   "attention": "triton" if gpu else "torch", "cuda_graphs": gpu, **overrides})
        dec = Decoder(spec, conf, sps=flat if kind == "block" else None, acceptance=acceptance[kind],
                      shard=ctx.shard)
        dec.randomize_cache()
        if ctx.leader:
            leader, rng = Leader(dec, ctx.control), np.random.default_rng(0)
            for r in reqs:
                got = time_steps(leader, r, context, rng, steps)
                if got is not None:
                    rows.append({"kind": kind, "reqs": r, "context": context, "graphs": conf.cuda_graphs,
                                 "tp": ctx.world, **got})
                    print(f"tp {ctx.world} {kind} R={r}: {got['step_s'] * 1e3:.3f} ms", flush=True)
            leader.stop()
        else:
            follow(dec, ctx.control)
        del dec
        if ctx.device.startswith("cuda"):
            torch.cuda.empty_cache()
    return rows


def parse(argv, what: str) -> argparse.Namespace:
    """The arguments of ``dspark-profile comm`` or ``steps`` (``what``)."""
    p = argparse.ArgumentParser(prog=f"dspark-profile {what}")
    p.add_argument("--gpu", required=True, help="GPU name recorded in the file (e.g. h200)")
    p.add_argument("--tp", type=int, required=True, help="ranks (GPUs), one process each")
    p.add_argument("--out", required=True)
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--timeout-s", type=float, default=3600.0)
    if what == "comm":
        p.add_argument("--max-bytes", type=int, default=256 << 20)
        p.add_argument("--reps", type=int, default=20)
    else:
        p.add_argument("--model", required=True)
        p.add_argument("--kinds", default="none,chain,block")
        p.add_argument("--reqs", default="1,4,16,32,64,128")
        p.add_argument("--context", type=int, default=1024)
        p.add_argument("--kv-tokens", type=int, default=0)
        p.add_argument("--dtype", default="bfloat16")
        p.add_argument("--steps", type=int, default=12)
    args = p.parse_args(argv)
    if args.tp < 2:
        p.error("--tp must be >= 2 (one GPU: dspark-profile --part step)")
    return args


def comm_main(argv) -> int:
    """``dspark-profile comm``: the collective curves of ``--tp`` ranks."""
    from dspark_sim.cost.comm_curves import CommCurve, CommCurves
    from dspark_sim.kernels.decoder.tp import run_ranks

    args = parse(argv, "comm")
    t0 = time.perf_counter()
    got = run_ranks(args.tp, comm_job, (comm_sizes(args.max_bytes), args.reps), device_kind=args.device,
                    timeout_s=args.timeout_s)
    prov = _provenance(args, t0)
    curves = CommCurves(args.gpu, args.tp, "measured" if args.device == "cuda" else "cpu", prov["date"][:10],
                        {op: CommCurve(tuple(b for b, _ in rows), tuple(s for _, s in rows))
                         for op, rows in got.items()}, prov)
    path = Path(args.out) / f"comm_tp{args.tp}.json"
    curves.save(path)
    for op, rows in got.items():
        print(op + ": " + ", ".join(f"{b / KIB:g} KiB {s * 1e6:.1f} us" for b, s in rows))
    print(f"wrote {path}")
    return 0


def steps_main(argv) -> int:
    """``dspark-profile steps``: whole tensor-parallel decode steps of ``--model``."""
    import json

    from dspark_sim.kernels.decoder.shard import check_split
    from dspark_sim.kernels.decoder.tp import run_ranks

    from dspark_sim.catalog import get_model

    args = parse(argv, "steps")
    spec = get_model(args.model, key="--model")
    check_split(spec, args.tp, "--tp")
    t0 = time.perf_counter()
    reqs = tuple(int(x) for x in args.reqs.split(","))
    rows = run_ranks(args.tp, steps_job, (spec, tuple(args.kinds.split(",")), reqs, args.context, args.steps,
                                          {"kv_tokens": args.kv_tokens, "dtype": args.dtype}),
                     device_kind=args.device, timeout_s=args.timeout_s)
    prov = {**_provenance(args, t0), "model": args.model, "weights": "random", "dtype": args.dtype}
    path = Path(args.out) / f"steps_{args.model}.tp{args.tp}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({"provenance": prov, "step": rows}, indent=1))
    tmp.replace(path)
    print(f"wrote {path}: {len(rows)} step points")
    return 0


def _provenance(args, t0: float) -> dict:
    import torch

    from dspark_sim.kernels.profiler.provenance import provenance

    nccl = ".".join(map(str, torch.cuda.nccl.version())) if args.device == "cuda" else None
    backend = "nccl" if args.device == "cuda" else "gloo"
    return {**provenance(), "gpu_label": args.gpu, "tp": args.tp, "backend": backend, "nccl": nccl,
            "elapsed_s": round(time.perf_counter() - t0, 1)}


__all__ = ["comm_sizes", "comm_job", "steps_job", "comm_main", "steps_main"]
