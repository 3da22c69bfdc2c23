"""Whole decode steps as served over long-tailed contexts, for every drafter kind (H200).

    # on the GPU, one device call (build included, about 3 minutes):
    OUT=... BUDGET_S=240 START_S=15; source benchmarks/visit_common.sh; export PYTHONPATH=$PYTHONPATH:$PWD/benchmarks; timeout 230 python3 benchmarks/spread_steps.py --run --out $OUT/spread_steps.json
    python benchmarks/spread_steps.py --json F.json      # the table: measured against the shipped profile
    python benchmarks/spread_steps.py --run --tiny --steps 2 --out /tmp/spread.json   # CPU dry run (torch kernels)

The profiler times whole decode steps (target, drafter and the host between, overlapped as
the serving loop runs them: ``Stepper.decode_step``) with every request at one context; a
saturated served run holds contexts drawn long-tailed. This times the same steps
(``Stepper.decode_steps_of``) for the target alone (none), MTP-3 (chain) and DSpark (block
7) over R requests whose contexts are drawn lognormal (mean 1,000, log-sd 1, 32..8192: the
mixed-step probe's draw, :func:`dspark_sim.reports.mixed_steps.contexts`) and over R
requests all at that draw's mean, for R in ``REQS``. Each point keeps every step's verify
tokens, wall seconds (between two steps' ends) and the drafter's and target's device
seconds. A point that fails is recorded and skipped; the result is written after every
point, and no point starts after ``--budget-s`` seconds.
"""
from __future__ import annotations

import statistics
import sys
import time

from outputs import begin_probe, code_commit, probe_main, probe_parser, write_result

from dspark_sim.reports.mixed_steps import CONTEXT_MAX, CONTEXT_MEAN, CONTEXT_MIN, CONTEXT_SIGMA, contexts

T0 = time.monotonic()
KINDS = ("block", "chain", "none")
REQS = (256, 128, 64, 16)  # the largest first: a run cut short keeps the saturated shapes
TINY = dict(reqs=(3,), mean=20, max_context=48)


def build(args):
    """(stepper, grid): Qwen3-8B built as the profiler builds it, or the tiny CPU decoder."""
    from dspark_sim.kernels.profiler.steps import Stepper

    if args.tiny:
        from dspark_sim.kernels.decoder.tiny import tiny_decoder

        dec = tiny_decoder("dspark", max_running_requests=8, max_model_len=160, kv_tokens=2048, synthetic=True)
        return Stepper(dec, reps=2), TINY
    from dspark_sim.catalog import get_model
    from dspark_sim.kernels.decoder import Decoder, DecoderConfig

    conf = DecoderConfig.of(method="dspark", block_size=8, scheduler="full", max_running_requests=max(REQS),
                            batching="prefill_first", prefix_cache=False, max_model_len=CONTEXT_MAX + 1024,
                            kv_tokens=args.kv_tokens, device="cuda")
    dec = Decoder(get_model(args.model), conf)
    dec.randomize_cache()
    return Stepper(dec), dict(reqs=REQS, mean=CONTEXT_MEAN, max_context=CONTEXT_MAX)


def header(args) -> dict:
    from dspark_sim.kernels.profiler.provenance import provenance, sm_clocks

    return {**provenance(), "tree": code_commit("benchmarks", "kernels") or None, "sm_clocks_before": sm_clocks(),
            "model": "tiny" if args.tiny else args.model, "weights": "random", "kv_tokens": args.kv_tokens,
            "steps": args.steps, "block_size": {"block": 7, "chain": 3},
            "contexts": f"lognormal mean {CONTEXT_MEAN}, log-sd {CONTEXT_SIGMA}, {CONTEXT_MIN}..{CONTEXT_MAX} "
                        "(the mixed-step probe's draw), and every request at that draw's mean"}


def run(args) -> dict:
    from dspark_sim.kernels.profiler.provenance import sm_clocks

    out, (stepper, grid) = begin_probe(args, "spread_steps", header(args), build, T0)
    for reqs in grid["reqs"]:
        drawn = contexts(reqs, grid["mean"], grid["max_context"])
        mean = round(sum(drawn) / reqs)
        for kind in KINDS:
            for label, lengths in (("spread", drawn), ("uniform", [mean] * reqs)):
                measure(out, stepper, kind, label, lengths, args)
                write_result(args.out, out)
    out["provenance"].update(total_s=round(time.monotonic() - T0, 1), sm_clocks_after=sm_clocks())
    write_result(args.out, out)
    return out


def measure(out: dict, stepper, kind: str, label: str, lengths: list[int], args) -> None:
    """Time one point into ``out["points"]``, or record why it failed (or was skipped)."""
    key = {"kind": kind, "contexts": label, "reqs": len(lengths)}
    if time.monotonic() - T0 > args.budget_s:
        out["failed"].append({**key, "error": "skipped: budget"})
        return
    try:
        got = stepper.decode_steps_of(kind, lengths, args.steps)
        if got is None:
            raise RuntimeError("the pages do not hold these requests")
    except Exception as e:  # noqa: BLE001 - one point failing must not lose the others
        out["failed"].append({**key, "error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"})
        print(f"{kind} {label} R {len(lengths)}: {out['failed'][-1]['error']}", flush=True)
        return
    med = lambda i: statistics.median(r[i] for r in got["steps"])  # noqa: E731
    out["points"].append({**key, "context_sum": sum(lengths), "context_max": max(lengths),
                          "verify_tokens": med(0), "step_s": got["step_s"], "draft_s": med(2), "verify_s": med(3),
                          "steps": got["steps"]})
    print(f"{kind:5s} {label:7s} R {len(lengths):4d}: step {got['step_s'] * 1e3:8.3f} ms, draft {med(2) * 1e3:7.3f} ms, "
          f"verify {med(3) * 1e3:7.3f} ms (+{time.monotonic() - T0:.0f} s)", flush=True)


def main() -> int:
    from dspark_sim.reports.spread_steps import table

    ap = probe_parser(__doc__, "spread_steps", kv_tokens=600_000, budget_s=200.0)
    ap.add_argument("--steps", type=int, default=12)
    args = ap.parse_args()
    return probe_main(args, "spread_steps", run,
                      lambda data: table(data, None if args.tiny or data["provenance"]["model"] == "tiny" else "h200"))

if __name__ == "__main__":
    sys.exit(main())
