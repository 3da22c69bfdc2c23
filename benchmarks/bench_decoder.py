"""Decoder speed by method and batch size (issue 6's H200 table).

    python benchmarks/bench_decoder.py --run --out decoder_bench.json   # on the GPU
    python benchmarks/bench_decoder.py [--json F] [--doc docs/decoder.md]  # print / write the table

``--run``: a Qwen3 shape with random bf16 weights and synthetic acceptance
(the simulator's DSpark or MTP preset for that model, ``--domain``); R requests
with ``--context`` cached tokens decode at temperature 1 through the decoder's
own step loop. The DSpark rows schedule from an SPS table: ``--sps profile``
(default) the additive table the simulator and tuner derive from the shipped
profile, drafter included; ``--sps probe`` a floor-probe table of the verify
step alone, profiled at that R before the row. Steps that capture a new CUDA
graph are excluded from the timing.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from dspark_sim.reports.decoder_bench import JSON, block_text, table

DECODERS = {
    "none": {"method": "none"},
    "mtp1": {"method": "static", "block_size": 1},
    "mtp3": {"method": "static", "block_size": 3},
    "dspark-full": {"method": "dspark", "block_size": 7, "scheduler": "full"},
    "dspark": {"method": "dspark", "block_size": 7, "scheduler": "production"},
}
BATCHES = (1, 8, 32, 64, 128, 256)


def sps_table(decoder, reqs: int, context: int, window: int):
    """Floor-probe SPS table of the verify step at ``reqs`` requests (probes R..R*window)."""
    from dspark_sim.cost.sps import default_probes
    from dspark_sim.kernels.profiler.steps import Stepper
    from dspark_sim.kernels.sps_tensors import SpsTensors

    probes = [m for m in default_probes(reqs * window) if reqs <= m <= reqs * window]
    if len(probes) > 12:
        step = len(probes) / 11
        probes = sorted({probes[round(i * step)] for i in range(11)} | {probes[-1]})
    stepper = Stepper(decoder, reps=6)
    sps = [1.0 / stepper.verify(reqs, m, context) for m in probes]
    table = {"sample_batch_tokens": probes, "sample_steps_per_sec": sps,
             "max_batch_tokens": probes[-1]}
    return SpsTensors.from_json_dict(table, decoder.device), table


def profile_table(model: str, decoder, context: int, conf):
    """The additive SPS table the simulator derives from the shipped H200 profile (drafter in)."""
    from dspark_sim.cost import get_cost_model, sps_from_cost_model
    from dspark_sim.kernels.sps_tensors import sps_from_json_dict

    table = sps_from_cost_model(get_cost_model("h200", model, warn=False), additive=True,
                                context_tokens_per_req=context, draft_kind="block",
                                block_size=conf.block_size).to_json_dict()
    return sps_from_json_dict(table, decoder.device), table


def measure(decoder, reqs: int, context: int, steps: int, domain: int, seed: int, overlap: bool = True) -> dict:
    """Decode ``steps`` timed steps of ``reqs`` requests as served (``overlap``: step n+1
    launched before step n's tokens are read; steps that captured a graph left out);
    tokens and seconds, the device time of the draft and the target forward, and the
    GPU's idle time between steps (host time the overlap did not hide)."""
    import numpy as np

    from dspark_sim.kernels.profiler.steps import overlapped_steps, sync_steps

    seqs = decoder.fake_requests(reqs, context, np.random.default_rng(seed), domain=domain)
    if seqs is None:
        raise RuntimeError(f"out of KV pages at {reqs} requests")
    try:
        timed = (overlapped_steps if overlap else sync_steps)(decoder, seqs, steps)
    finally:
        for s in seqs:
            decoder.release(s)
    times = [t for t, _, _ in timed]
    emitted = sum(st.accepted_tokens for _, st, _ in timed)
    total = sum(times)
    return {"reqs": reqs, "steps": len(times), "step_ms": 1e3 * statistics.median(times),
            "tok_per_s_per_user": emitted / reqs / total, "tok_per_s": emitted / total,
            "tokens_per_step_per_user": emitted / reqs / len(times),
            "verify_tokens_per_step": statistics.mean(st.verify_tokens for _, st, _ in timed),
            "draft_share": sum(st.draft_s for _, st, _ in timed) / total,
            "draft_ms": 1e3 * statistics.median(st.draft_s for _, st, _ in timed),
            "verify_ms": 1e3 * statistics.median(st.verify_s for _, st, _ in timed),
            "exposed_host_ms": 1e3 * statistics.median(g for _, _, g in timed if g is not None)
            if any(g is not None for _, _, g in timed) else None}


def run(args) -> dict:
    import torch

    from dspark_sim.catalog import get_model
    from dspark_sim.kernels.decoder import Decoder, DecoderConfig
    from dspark_sim.kernels.profiler.provenance import provenance, sm_clocks

    spec = get_model(args.model)
    domain = ("math", "code", "chat").index(args.domain)
    batches = [b for b in BATCHES if b <= args.max_batch]
    out = {"provenance": {**provenance(), "model": args.model, "weights": "random bf16",
                          "acceptance": f"synthetic ({args.domain}, simulator preset)",
                          "context_tokens": args.context, "temperature": 1.0,
                          "sps_table": {"profile": "additive, from the shipped profile, drafter "
                                        "included", "probe": "floor probe of the verify step at R"}[args.sps],
                          "sm_clocks_before": sm_clocks()}, "rows": []}
    kv = max(batches) * (args.context + (args.steps * 3 + 40) * 8 + 64)
    deadline = time.perf_counter() + args.max_seconds
    for name in args.methods:
        conf = DecoderConfig.of(**DECODERS[name], synthetic=True, batching="prefill_first", prefix_cache=False,
                                max_running_requests=max(batches), max_model_len=args.context + 1024,
                                kv_tokens=kv, device=args.device, dtype=args.dtype)
        sps0 = None
        if conf.method == "dspark" and conf.scheduler != "full":
            from dspark_sim.kernels.sps_tensors import SpsTensors
            sps0 = SpsTensors.from_json_dict({"sample_batch_tokens": [1],
                                              "sample_steps_per_sec": [1.0], "max_batch_tokens": 1 << 20})
        t0 = time.perf_counter()
        dec = Decoder(spec, conf, sps=sps0, acceptance={"drafter": "mtp" if conf.method == "static"
                                                        else "dspark"})
        dec.randomize_cache()
        print(f"{name}: built in {time.perf_counter() - t0:.1f} s", flush=True)
        for reqs in batches:
            row = {"method": name, "reqs": reqs}
            if time.perf_counter() > deadline:
                row["error"] = "skipped: --max-seconds reached"
                out["rows"].append(row)
                continue
            try:
                if sps0 is not None and args.sps == "probe":
                    sps, row["sps_table"] = sps_table(dec, reqs, args.context, conf.window)
                    dec.set_sps(sps)
                elif sps0 is not None:
                    sps, row["sps_table"] = profile_table(args.model, dec, args.context, conf)
                    dec.set_sps(sps)
                dec.graphs.clear()
                row.update(measure(dec, reqs, args.context, args.steps, domain, args.seed))
            except Exception as err:  # keep the other rows; the miss is reported
                row["error"] = f"{type(err).__name__}: {err}"
            out["rows"].append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "sps_table"}), flush=True)
            Path(args.out).write_text(json.dumps(out, indent=1))
        del dec
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    out["provenance"]["sm_clocks_after"] = sm_clocks()
    Path(args.out).write_text(json.dumps(out, indent=1))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--run", action="store_true", help="measure (needs the GPU)")
    p.add_argument("--json", default=str(JSON))
    p.add_argument("--out", default=None, help="with --run: where to write the JSON")
    p.add_argument("--doc", help="also write the table into this markdown file")
    p.add_argument("--model", default="qwen3-8b")
    p.add_argument("--domain", default="math")
    p.add_argument("--methods", nargs="+", default=list(DECODERS))
    p.add_argument("--max-batch", type=int, default=max(BATCHES))
    p.add_argument("--context", type=int, default=1024)
    p.add_argument("--steps", type=int, default=24)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sps", choices=("profile", "probe"), default="profile",
                   help="DSpark rows: the profile's table with the drafter, or a verify-only probe")
    p.add_argument("--max-seconds", type=float, default=300.0)
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default="bfloat16")
    args = p.parse_args(argv)
    if args.run:
        args.out = args.out or args.json
        data = run(args)
    else:
        data = json.loads(Path(args.json).read_text())
    text = table(data)
    print(text)
    if args.doc:
        write_doc(Path(args.doc), data)
    return 0


def write_doc(path: Path, data: dict) -> None:
    """Replace the generated block of ``path`` (between markers) with the table."""
    from outputs import write_block

    write_block(path, "bench_decoder", block_text(data))


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    sys.exit(main())
