"""Served-shape steps held back to back for seconds: step time against SM clock and power as
the GPU reaches its power limit (Qwen3-8B, H200).

    python benchmarks/sustained_clocks.py --run --out F.json   # on the GPU (about 3 minutes)
    python benchmarks/sustained_clocks.py --json F.json        # the table

The profiler times a decode step by a few graph replays, with the GPU cool and its SM clock
at its maximum; a saturated server runs such steps back to back for seconds, its board
reaches the power limit and the driver lowers the SM clock (nvidia-smi's event reason 0x4,
software power cap). This holds one step shape at a time for ``HOLD_S`` seconds (verify and
draft graphs of the DSpark decoder, the verify graph of the decoder without speculation, at
``REQS`` requests whose contexts are drawn lognormal as served traffic holds them, and
prefill chunks), each call timed by device events, while nvidia-smi logs the SM clock and
power every 50 ms, and rests ``REST_S`` between shapes. Same decoders, same process.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

from outputs import write_result

from dspark_sim.reports.gpus import block_text

HERE = Path(__file__).resolve().parent
REQS = (16, 64, 128, 256)
HOLD_S, REST_S = 4.0, 2.5
PREFILL = ((2048, 0), (8192, 0))


def _contexts(reqs: int) -> list[int]:
    import numpy as np

    rng = np.random.default_rng(reqs)
    return [int(x) for x in np.clip(np.round(rng.lognormal(np.log(1000) - 0.5, 1.0, reqs)), 32, 8192)]


def _held(fn, between=None) -> list:
    """[[seconds since the first call, seconds of the call], ...] over HOLD_S of back-to-back calls."""
    import torch

    calls, t0, i = [], time.perf_counter(), 0
    while time.perf_counter() - t0 < HOLD_S:
        batch = []
        for _ in range(8):
            if between:
                between(i)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            batch.append((start, end))
            i += 1
        torch.cuda.synchronize()
        now = time.perf_counter() - t0
        calls += [[round(now, 4), s.elapsed_time(e) / 1e3] for s, e in batch]
    return calls


def _verify(stepper, reqs: int, tokens: int):
    """(replay, rotate, requests) of the verify graph at ``reqs`` requests, ``tokens`` window tokens."""
    return stepper.verify_graph(_contexts(reqs), tokens)


def _draft(stepper, reqs: int):
    import torch

    from dspark_sim.kernels.decoder.graphs import request_tier

    dec, seqs = stepper.dec, stepper.requests_of(_contexts(reqs))
    rp = request_tier(reqs, dec.conf.max_running_requests)
    dec.graphs.clear()
    dec._draft(stepper._rows(seqs, rp), torch.ones(rp, device=dec.device), rp)
    return dec.graphs.replay_last, None, seqs


def _prefill(stepper, chunk: int, cached: int):
    from dspark_sim.kernels.decoder.sequence import Sequence

    dec = stepper.dec
    s = Sequence(0, stepper.rng.integers(0, stepper.vocab, cached + chunk + 1).tolist(), 1, 1.0)
    dec.admit(s)
    dec.pages.reserve(s, cached + chunk)

    def step():
        s.num_cached = cached
        del s.tokens[s.prompt_len:]
        dec.prefill([(s, chunk)])
    return step, None, [s]


def run(args) -> dict:
    import torch

    sys.path.insert(0, str(HERE))
    from bench_targets import make_decoder

    from dspark_sim.kernels.profiler.provenance import provenance, sm_clocks
    from dspark_sim.kernels.profiler.steps import Stepper

    smi_path = Path(args.out).with_suffix(".smi.csv")
    smi = subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,"
                            "clocks_event_reasons.active", "--format=csv,noheader", "-lms", "50"],
                           stdout=smi_path.open("w"))
    out = {"provenance": {**provenance(), "model": args.model, "weights": "random bf16", "hold_s": HOLD_S,
                          "rest_s": REST_S, "sm_clocks_before": sm_clocks(), "smi_log": smi_path.name}, "shapes": []}
    try:
        for method in ("dspark", "none"):
            dec = make_decoder(method, args.model, 8192, 256, 400_000, "cuda")
            stepper = Stepper(dec, reps=10)
            shapes = [("verify", r, r * (4 if method == "dspark" else 1)) for r in REQS]
            shapes += [("draft", r, 0) for r in REQS] if method == "dspark" else [("prefill", c, k) for c, k in PREFILL]
            for kind, a, b in shapes:
                fn, between, seqs = (_verify(stepper, a, b) if kind == "verify" else _draft(stepper, a)
                                     if kind == "draft" else _prefill(stepper, a, b))
                try:
                    time.sleep(REST_S)
                    start = time.time()
                    calls = _held(fn, between)
                    cell = {"method": method, "kind": kind, "reqs" if kind != "prefill" else "chunk": a,
                            "tokens" if kind != "prefill" else "cached": b, "start_unix": start,
                            "end_unix": time.time(), "calls": calls}
                finally:
                    dec.graphs.clear()
                    for s in seqs:
                        dec.release(s)
                out["shapes"].append(cell)
                first = statistics.median(c[1] for c in calls[:8]) * 1e3
                last = statistics.median(c[1] for c in calls if c[0] > HOLD_S - 1.0) * 1e3
                print(f"{method} {kind} {a} {b}: {len(calls)} calls, first {first:.3f} ms, last second "
                      f"{last:.3f} ms ({last / first - 1:+.1%})", flush=True)
                write_result(args.out, out)
            del dec, stepper
            torch.cuda.empty_cache()
    finally:
        smi.terminate()
        out["provenance"]["sm_clocks_after"] = sm_clocks()
        write_result(args.out, out)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", action="store_true")
    ap.add_argument("--out", default="/tmp/sustained_clocks.json")
    ap.add_argument("--json", default=str(HERE.parent / "profiles" / "h200" / "sustained_clocks.json"))
    ap.add_argument("--model", default="qwen3-8b")
    args = ap.parse_args()
    if args.run:
        run(args)
        return 0
    print(block_text(Path(args.json)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
