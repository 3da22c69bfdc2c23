"""Where a DeepSeek-V4 or Qwen3-MoE layer's decode time goes: each component its own CUDA graph.

    python -m dspark_sim.kernels.profiler.layer_parts --model deepseek-v4-flash --out F.json   # on a GPU
    python -m dspark_sim.kernels.profiler.layer_parts --tiny --out F.json   # CPU dry run (TRITON_INTERPRET=1)
    python -m dspark_sim.kernels.profiler.layer_parts --show F.json         # the table

At real width with random weights (bf16), decode steps of R requests (one token each, every
request at ``--context``), R in ``--reqs``. For V4, one CSA and one HCA layer (sharing one
MoE), each timed as:

* ``layer``: the whole layer as the decoder runs it (fused hyper-connections and RoPE),
  ``layer_unfused``: the same with those as torch ops (the path of the 2026-12-01 slices),
  ``layer_eager`` (R = 1 and 64): the fused layer without a graph (host launch-bound);
* its stages (each with the GEMMs inside it): ``hyper_connections`` (both mixes, merges and
  the two norms), ``queries`` and ``store_key`` (norms, RoPE, cache write), ``compression``
  (compressors and indexer keys), ``indexer`` (scores and top-k), ``sparse_attention``,
  ``output`` (inverse RoPE, grouped output projection);
* ``projections``: the layer's dense GEMMs alone (input, query, indexer query, output, router);
* ``moe_routed_bf16`` / ``moe_routed_fp8`` (routing, alignment, grouped GEMMs: experts in bf16
  or block-scaled FP8, :mod:`..decoder.moe_fp8`), ``shared_expert``.

Qwen3-30B-A3B: its MoE at both precisions and its dense projections (its whole layer is in
the slice profiles). No communication anywhere: one GPU. Each part: median of ``--reps``
graph replays (device events). ``kernels``: CUDA kernels of one eager layer (fused and
unfused; on the CPU the aten ops, a proxy).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn.functional as F

from dspark_sim.kernels.profiler.timing import median_seconds

REQS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
EAGER_REQS = (1, 64)
PAGE = 64


def decode_batch(reqs: int, rows: int, context: int, device):
    """A decode step of ``reqs`` requests, one token each at position ``context - 1``, rows
    ``0 .. reqs - 1`` of a page table of ``rows`` rows (the last one the dummy)."""
    from dspark_sim.kernels.decoder.batch import make_batch

    pages = -(-(context + 16) // PAGE)
    table = torch.zeros(rows, pages, dtype=torch.int32)
    table[:-1] = 1 + torch.arange((rows - 1) * pages, dtype=torch.int32).view(rows - 1, pages)
    book = SimpleNamespace(table=table.to(device), page_size=PAGE, dummy_row=rows - 1)
    one = np.ones(reqs, np.int64)
    return make_batch(np.zeros(reqs, np.int64), one, one * context, np.arange(reqs), book)


def timed(fn, reps: int, graph: bool) -> float:
    """Median seconds of ``fn`` replayed as a CUDA graph (``graph``), else called eagerly."""
    if not graph:
        return median_seconds(fn, reps, warmup=1)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()  # compiles and warms outside the capture
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    try:
        return median_seconds(g.replay, reps)
    finally:
        del g


def count_launches(fn) -> int:
    """CUDA kernels one eager call of ``fn`` launches (on the CPU: aten ops and Triton launches, a proxy)."""
    if torch.cuda.is_available():
        from torch.profiler import ProfilerActivity, profile

        fn()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        return sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)
    from unittest import mock

    from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes
    from triton.runtime.interpreter import InterpretedFunction

    count = [0]

    class Count(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            count[0] += 1
            return func(*args, **(kwargs or {}))

    run = InterpretedFunction.run

    def launch(self, *args, **kwargs):  # one Triton launch; the interpreter's own torch calls uncounted
        count[0] += 1
        with _disable_current_modes():
            return run(self, *args, **kwargs)

    with mock.patch.object(InterpretedFunction, "run", launch), Count():
        fn()
    return count[0]


def v4_parts(layers: dict, moe_fp8, batch, k_cache, ropes, reqs: int, impl: str):
    """Name -> closure of each timed part of the V4 layers at one step (inputs made here)."""
    from dspark_sim.kernels.decoder.moe import fused_moe, route_sqrtsoftplus
    from dspark_sim.kernels.decoder.v4 import ROUTED_SCALE, UNFUSED, merge

    dev, slots = k_cache.device, batch.slots()
    parts = {}
    for kind, layer in layers.items():
        a, hc = layer.attn, layer.attn_hc
        h, m = layer.norm1.shape[0], hc.m
        gen = torch.Generator(device=dev).manual_seed(reqs)
        streams = torch.randn(reqs, m, h, generator=gen, device=dev).to(k_cache.dtype)
        x = torch.randn(reqs, h, generator=gen, device=dev).to(k_cache.dtype)
        p = a.project(x)
        q_res, q = a.queries(p, batch, ropes, impl)
        plans = {}  # the step's compressor slots, made once a step for all layers
        comp, keys = a.compress(p, batch, ropes, impl, plans)
        topk = a.select(q_res, p, keys, batch, ropes, impl)
        o = a.attend(q, k_cache, comp, topk, batch, impl)
        grouped = o.view(reqs, a.v.o_groups, -1).transpose(0, 1)
        ffn = layer.ffn_hc

        def mixes(layer=layer, streams=streams, x=x, hc=hc, ffn=ffn):
            post, comb, y = hc(streams, impl)
            s = merge(streams, layer.norm1[None, :] * y, post, comb, impl)
            post, comb, y = ffn(s, impl)
            return merge(s, x + layer.norm2[None, :] * y, post, comb, impl)

        def gemms(a=a, x=x, q_res=q_res, grouped=grouped, layer=layer):
            F.linear(x, a.w_in), F.linear(q_res, a.q_b), F.linear(x, layer.mlp.router)
            if a.index is not None:
                F.linear(q_res, a.index_q)
            return F.linear(torch.bmm(grouped, a.o_a).transpose(0, 1).reshape(reqs, -1), a.o_b)

        run = {
            "layer": lambda layer=layer, s=streams, plans=plans: layer(s, batch, slots, k_cache, ropes, impl, plans),
            "layer_unfused": lambda layer=layer, s=streams: layer(s, batch, slots, k_cache, ropes, UNFUSED),
            "hyper_connections": mixes,
            "queries": lambda a=a, p=p: a.queries(p, batch, ropes, impl),
            "store_key": lambda a=a, p=p: a.store_key(p, batch, slots, k_cache, ropes, impl),
            "compression": lambda a=a, p=p, plans=plans: a.compress(p, batch, ropes, impl, plans),
            "indexer": lambda a=a, p=p, q_res=q_res, keys=keys: a.select(q_res, p, keys, batch, ropes, impl),
            "sparse_attention": lambda a=a, q=q, comp=comp, topk=topk: a.attend(q, k_cache, comp, topk, batch, impl),
            "output": lambda a=a, o=o: a.output(o.clone(), batch, ropes, impl),
            "projections": gemms,
        }
        if a.index is None:  # an HCA layer has no indexer: nothing to time (an empty graph)
            del run["indexer"]
        if kind == "csa":  # the MoE is the same module in both layers: timed once
            mlp = layer.mlp

            def routed(experts, mlp=mlp, x=x):
                w, ids = route_sqrtsoftplus(F.linear(x, mlp.router), mlp.bias, mlp.top_k, ROUTED_SCALE, impl)
                return fused_moe(x, experts[0], experts[1], w, ids, impl)

            run.update({"moe_routed_bf16": lambda: routed((mlp.gate_up, mlp.down)),
                        "moe_routed_fp8": lambda: routed(moe_fp8),
                        "shared_expert": lambda mlp=mlp, x=x: mlp.shared(x, impl)})
        parts.update({(kind, name): fn for name, fn in run.items()})
    return parts


def build_v4(spec, reqs_max: int, context: int, dtype, device, group: int, seed: int = 0):
    """``(layers {"csa", "hca"}, FP8 experts (gate_up, down), k_cache, ropes)``: one layer of each
    compressed kind at real width, the HCA layer running the CSA layer's MoE (one copy in memory)."""
    from dspark_sim.kernels.decoder.moe_fp8 import quantize_blocks
    from dspark_sim.kernels.decoder.v4 import COMPRESS_THETA, RopeTable, V4Layer
    from dspark_sim.kernels.decoder.weights import init_random

    rows, max_pos = reqs_max + 1, context + 16
    with torch.device(device):
        layers = {"csa": V4Layer(spec, 4, dtype, rows, max_pos), "hca": V4Layer(spec, 128, dtype, rows, max_pos)}
    layers["hca"].mlp = layers["csa"].mlp
    gen = torch.Generator(device=device).manual_seed(seed)
    for layer in layers.values():
        init_random(layer, 0.02, seed)
        for c in (layer.attn.comp, layer.attn.index):
            if c is not None:
                c.randomize_(gen)
    mlp = layers["csa"].mlp
    fp8 = (quantize_blocks(mlp.gate_up.detach(), group), quantize_blocks(mlp.down.detach(), group))
    v = spec.v4
    k_cache = torch.randn(rows * -(-max_pos // PAGE) * PAGE, 1, v.head_dim, generator=gen, device=device).to(dtype)
    ropes = (RopeTable(v.rope_head_dim, spec.rope_theta, max_pos, device),
             RopeTable(v.rope_head_dim, COMPRESS_THETA, max_pos, device))
    return layers, fp8, k_cache, ropes


def qwen_parts(spec, reqs_list, dtype, device, group: int, seed: int = 0):
    """Qwen3-MoE: ``{reqs: {name: closure}}`` for its MoE (bf16, FP8) and dense projections."""
    from dspark_sim.kernels.decoder.layers import Moe
    from dspark_sim.kernels.decoder.moe import fused_moe, route_softmax
    from dspark_sim.kernels.decoder.moe_fp8 import quantize_blocks
    from dspark_sim.kernels.decoder.weights import init_random

    with torch.device(device):
        moe = Moe(spec, dtype)
        qkv = torch.randn((spec.num_heads + 2 * spec.num_kv_heads) * spec.head_dim, spec.hidden_size).to(dtype)
        o = torch.randn(spec.hidden_size, spec.num_heads * spec.head_dim).to(dtype)
    init_random(moe, 0.02, seed)
    fp8 = (quantize_blocks(moe.gate_up.detach(), group), quantize_blocks(moe.down.detach(), group))
    out = {}
    for reqs in reqs_list:
        x = torch.randn(reqs, spec.hidden_size, device=device).to(dtype)
        a = torch.randn(reqs, spec.num_heads * spec.head_dim, device=device).to(dtype)

        def routed(experts, x=x):
            w, ids = route_softmax(F.linear(x, moe.router), moe.top_k, "triton")
            return fused_moe(x, experts[0], experts[1], w, ids, "triton")

        out[reqs] = {("moe", "moe_routed_bf16"): lambda: routed((moe.gate_up, moe.down)),
                     ("moe", "moe_routed_fp8"): lambda: routed(fp8),
                     ("moe", "projections"): lambda x=x, a=a: (F.linear(x, qkv), F.linear(a, o), F.linear(x, moe.router))}
    return out


def measure(args) -> dict:
    """Every part at every request count (until ``--max-seconds``), and the launches a layer makes."""
    from dspark_sim.catalog import get_model
    from dspark_sim.kernels.decoder.tiny import tiny_spec, tiny_v4_spec
    from dspark_sim.kernels.profiler.provenance import provenance

    graph = torch.cuda.is_available() and not args.tiny
    device, dtype = ("cuda", torch.bfloat16) if graph else ("cpu", torch.float32)
    group = 16 if args.tiny else 128
    v4 = args.model.startswith("deepseek-v4")
    spec = (tiny_v4_spec() if v4 else tiny_spec(moe=True)) if args.tiny else get_model(args.model)
    reqs = [int(r) for r in args.reqs.split(",")]
    t0 = time.monotonic()
    rows, kernels, skipped = [], [], []
    if v4:
        layers, fp8, k_cache, ropes = build_v4(spec, max(reqs), args.context, dtype, device, group)
    else:
        qwen = qwen_parts(spec, reqs, dtype, device, group)
    for r in reqs:
        if time.monotonic() - t0 > args.max_seconds:
            skipped.append(r)
            continue
        if v4:
            batch = decode_batch(r, max(reqs) + 1, args.context, device)
            parts = v4_parts(layers, fp8, batch, k_cache, ropes, r, "triton")
        else:
            parts = qwen[r]
        for (kind, name), fn in parts.items():
            rows.append({"layer": kind, "reqs": r, "part": name, "s": timed(fn, args.reps, graph)})
            if name == "layer" and r in EAGER_REQS:
                rows.append({"layer": kind, "reqs": r, "part": "layer_eager", "s": timed(fn, args.reps, False)})
            if name.startswith("layer") and r == reqs[0]:
                kernels.append({"layer": kind, "part": name, "launches": count_launches(fn)})
    prov = provenance()
    prov.update({"model": spec.name, "context": args.context, "dtype": str(dtype).removeprefix("torch."),
                 "weights": "random", "cuda_graphs": graph, "fp8_group": group, "reps": args.reps,
                 "communication": "none (one GPU)", "skipped_reqs": skipped,
                 "elapsed_s": round(time.monotonic() - t0, 1),
                 "launches": "CUDA kernels of one eager call" if graph else "aten ops and Triton launches of one eager call (CPU proxy)",
                 "note": "decode steps: every request one token at the context; each part its own CUDA graph, "
                         "median of reps replays; stage parts include their own GEMMs, projections are the "
                         "dense GEMMs alone (kernels/profiler/layer_parts.py)"
                         + ("; TINY CPU DRY RUN under the Triton interpreter: not a measurement" if args.tiny else "")})
    return {"provenance": prov, "parts": rows, "kernels": kernels}


def table(data: dict) -> str:
    """Milliseconds per part (columns) and request count (rows), one block per layer kind."""
    out = [f"{data['provenance']['model']} on {data['provenance']['gpu']}, context {data['provenance']['context']}"]
    for kind in dict.fromkeys(r["layer"] for r in data["parts"]):
        rows = [r for r in data["parts"] if r["layer"] == kind]
        names = list(dict.fromkeys(r["part"] for r in rows))
        out.append(f"\n[{kind}] ms   " + " ".join(f"{n[:16]:>16}" for n in names))
        for reqs in dict.fromkeys(r["reqs"] for r in rows):
            got = {r["part"]: r["s"] for r in rows if r["reqs"] == reqs}
            out.append(f"R={reqs:<9} " + " ".join(f"{1e3 * got[n]:16.3f}" if n in got else f"{'':>16}"
                                                  for n in names))
    out += [f"launches [{k['layer']}] {k['part']}: {k['launches']}" for k in data["kernels"]]
    return "\n".join(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="layer_parts", description=__doc__.split("\n")[0])
    p.add_argument("--model", default="deepseek-v4-flash")
    p.add_argument("--reqs", default=",".join(map(str, REQS)))
    p.add_argument("--context", type=int, default=4096)
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--max-seconds", type=float, default=150.0)
    p.add_argument("--tiny", action="store_true", help="tiny model on the CPU (TRITON_INTERPRET=1): a dry run")
    p.add_argument("--out", help="JSON file written (atomically)")
    p.add_argument("--show", help="print the table of a written file")
    args = p.parse_args(argv)
    if args.show:
        with open(args.show) as f:
            print(table(json.load(f)))
        return 0
    if args.tiny:
        args.reqs, args.context, args.reps = "1,2,4", 40, 1
        if os.environ.get("TRITON_INTERPRET") != "1":
            print("layer_parts: --tiny needs TRITON_INTERPRET=1", file=sys.stderr)
            return 2
    data = measure(args)
    if args.out:
        tmp = args.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(data, f, indent=1)
        os.replace(tmp, args.out)
        print(f"wrote {args.out}")
    print(table(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
