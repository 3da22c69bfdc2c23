"""Correctness on the GPU before timing: the attention kernel against its reference
(bf16, Qwen3 head shapes), the decoder with CUDA graphs against target-only greedy
(steps overlapped and waited for, ``prefill_first`` and ``mixed`` batching, prompt steps
through their graphs), the decoder's prefix cache (greedy outputs with the cache equal those
without it, under graphs, overlap and both batchings; every page back), the
schedule_verify tests run natively (R = 4096 included), and (``long``, not run unless asked)
long prompts up to the model's whole context against target-only greedy (:mod:`dspark_sim.validation.long_prompts`).
The file holds ``{"provenance": {...}, "rows": [...]}``.

    python benchmarks/gpu_check.py [--only attention,decoder,prefix,kernels,long] [--out FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np
import torch


def attention_cases() -> list[dict]:
    from dspark_sim.kernels.decoder.attention import attention, attention_ref, plan
    from dspark_sim.kernels.decoder.batch import make_batch
    from dspark_sim.kernels.decoder.cache import Pages

    rows = []
    rng = np.random.default_rng(0)
    for heads, kvh, q_lens, ctx, causal in ((32, 8, [8, 3, 1, 5], 700, True),
                                            (40, 8, [1] * 6, 3000, True),
                                            (32, 8, [300, 64], 500, True),
                                            (32, 8, [7, 7, 7], 900, False),
                                            (64, 8, [16, 2], 129, True)):
        pages = Pages(4096, 16, 8, 512, "cuda")
        R = len(q_lens)
        seqs = []
        for _ in range(R):
            s = type("S", (), {})()
            pages.attach(s)
            pages.reserve(s, ctx)
            seqs.append(s)
        pages.flush()
        q_len = np.array(q_lens)
        kv_len = np.array([ctx - int(rng.integers(0, 50)) for _ in range(R)])
        batch = make_batch(np.zeros(q_len.sum(), np.int64), q_len, kv_len,
                           np.array([s.row for s in seqs]), pages)
        q = torch.randn(int(q_len.sum()), heads, 128, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(4096 * 16, kvh, 128, device="cuda", dtype=torch.bfloat16)
        v = torch.randn_like(k)
        shape = plan(int(q_len.max()), R, kvh, heads // kvh, causal=causal)
        out = attention(q, k, v, batch, shape).float()
        ref = attention_ref(q.float(), k.float(), v.float(), batch, causal).float()
        err = float((out - ref).norm() / ref.norm())
        rows.append({"case": f"H{heads}/KV{kvh} q{q_lens} ctx{ctx} causal={causal} "
                             f"splits={shape.splits} chunks={shape.chunks}", "rel_err": err,
                     "ok": err < 1e-2})
    return rows


def decoder_cases() -> list[dict]:
    from dspark_sim.kernels.decoder.engine import serve
    from dspark_sim.kernels.decoder.sequence import Sequence
    from dspark_sim.kernels.decoder.tiny import greedy_reference, tiny_decoder

    prompts = [[3, 1, 4], [1, 5, 9, 2, 6, 5, 3, 5, 8], list(range(2, 19))]
    base = dict(device="cuda", cuda_graphs=True, kernels="triton", attention="triton")
    ref = [greedy_reference(tiny_decoder("none", device="cuda"), p, 16) for p in prompts]
    rows = []
    for method, over, runs in (("none", {}, (("prefill_first", True), ("prefill_first", False), ("mixed", True))),
                               ("static", {"block_size": 3}, (("mixed", True),)),
                               ("dspark", {"scheduler": "full"}, (("prefill_first", True),)),
                               ("dspark", {"scheduler": "production"}, (("prefill_first", True), ("mixed", True)))):
        for batching, overlap in runs:
            dec = tiny_decoder(method, **base, **over, batching=batching, max_batched_tokens=24,
                               max_running_requests=3)
            seqs = [Sequence(i, p, 16, arrival_s=0.001 * i) for i, p in enumerate(prompts)]
            steps = serve(dec, seqs, overlap=overlap).steps
            rows.append({"case": f"graphs {method} {over} {batching} overlap={overlap}",
                         "ok": [s.outputs for s in seqs] == ref, "graphs": len(dec.graphs.entries),
                         "mixed_steps": sum(1 for r in steps if r["decode_reqs"] and r["prefill_tokens"])})
    return rows


def prefix_cases() -> list[dict]:
    """Sessions over one shared system prompt served with the prefix cache and without it on
    the GPU kernels: the same greedy outputs, prompt tokens read from the cache, every page
    back in the free list or the cache after serving. Accepted drafts are recorded beside:
    they may differ where the verify lengths or the kernels' reductions depend on which
    requests share a step (the cache changes that); the control serves the same prompts
    without the cache at other arrival times, to show how much batching alone moves them."""
    from dspark_sim.kernels.decoder.engine import serve
    from dspark_sim.kernels.decoder.sequence import Sequence
    from dspark_sim.kernels.decoder.tiny import tiny_decoder

    system = [(5 * j + 3) % 31 for j in range(22)]
    prompts = [system + [(u * 11 + k) % 29 + 1 for k in range(6 * (turn + 1))] for turn in range(3) for u in range(3)]
    base = dict(device="cuda", cuda_graphs=True, kernels="triton", attention="triton", max_batched_tokens=24,
                max_running_requests=3)
    rows = []
    for method, over in (("none", {}), ("static", {"block_size": 3}), ("dspark", {"scheduler": "full"}),
                         ("dspark", {"scheduler": "production"})):
        for batching in ("prefill_first", "mixed"):
            runs = []
            for cache, gap_s in ((True, 0.02), (False, 0.02), (False, 0.0)):
                dec = tiny_decoder(method, **base, **over, batching=batching, prefix_cache=cache)
                seqs = [Sequence(i, p, 12, arrival_s=gap_s * i) for i, p in enumerate(prompts)]
                serve(dec, seqs)
                runs.append((dec, [s.outputs for s in seqs], [s.accepted for s in seqs]))
            pages = runs[0][0].pages
            total = runs[0][0].cache.k.shape[1] // pages.page_size - 1
            same = runs[0][1] == runs[1][1]
            rows.append({"case": f"prefix cache {method} {over} {batching}",
                         "ok": same and pages.hit_tokens > 0 and len(pages.free) + pages.cached_pages == total,
                         "outputs_equal": same, "accepted_equal": runs[0][2] == runs[1][2],
                         "accepted_on_off": [sum(runs[0][2]), sum(runs[1][2])],
                         "control_outputs_equal": runs[1][1] == runs[2][1],
                         "control_accepted_equal": runs[1][2] == runs[2][2],
                         "hit_tokens": pages.hit_tokens, "cached_pages": pages.cached_pages})
    return rows


def kernel_tests() -> list[dict]:
    """The schedule_verify tests, natively on the GPU (the CPU runs them interpreted)."""
    import os
    import subprocess

    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_kernels_schedule_verify.py",
           "-k", "every_path or budget_given or 4096 or brute_force or lagged"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=dict(os.environ, TRITON_INTERPRET="0"))
    tail = (res.stdout + res.stderr).strip().splitlines()
    return [{"case": "tests/test_kernels_schedule_verify.py natively (every path, R = 4096)", "ok": res.returncode == 0,
             "summary": tail[-1] if tail else ""}]


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out")
    p.add_argument("--only", default="attention,decoder,prefix,kernels",
                   help="which checks (comma list of attention, decoder, prefix, kernels, long)")
    p.add_argument("--long-seconds", type=float, default=120.0, help="the long-prompt section's time cap")
    p.add_argument("--tiny", action="store_true", help="long: a tiny model on the CPU (checks the section)")
    args = p.parse_args(argv)
    if args.tiny:
        os.environ.setdefault("TRITON_INTERPRET", "1")
    from dspark_sim.validation.long_prompts import long_prompt_cases
    from dspark_sim.kernels.profiler.provenance import provenance

    rows = []
    checks = {"attention": attention_cases, "decoder": decoder_cases, "prefix": prefix_cases, "kernels": kernel_tests,
              "long": lambda: long_prompt_cases(args.tiny, args.long_seconds)}
    for name in args.only.split(","):
        try:
            rows += checks[name]()
        except Exception as err:  # report and go on: the timing runs still tell something
            rows.append({"case": name, "ok": False, "error": f"{type(err).__name__}: {err}"})
    for r in rows:
        print(json.dumps(r))
    if args.out:  # written whole at the end, through a temporary file
        tmp = f"{args.out}.tmp"
        with open(tmp, "w") as f:
            json.dump({"provenance": provenance(), "rows": rows}, f, indent=1)
        os.replace(tmp, args.out)
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
