"""What a served step has that the profiler's steps do not: requests that read the same cached
prefix pages, an eager step launched behind the step before it, KV pages scattered over the
pool, a decode step right after a prompt step (Qwen3-8B, H200).

    # on the GPU, one device call per part (build included; --part all: about 6 minutes):
    OUT=... BUDGET_S=300 START_S=15; source benchmarks/visit_common.sh; export PYTHONPATH=$PYTHONPATH:$PWD/benchmarks; timeout 300 python3 benchmarks/served_steps.py --run --part shared --out $OUT/served_steps.json
    (--part eager | layout | after: the other parts; the shared and eager parts are in
    profiles/h200/raw/served_qwen3-8b.json)
    python benchmarks/served_steps.py --json F.json      # the tables
    TRITON_INTERPRET=1 python benchmarks/served_steps.py --run --tiny --out /tmp/served.json   # CPU dry run

Shared prefixes. Multi-turn traffic with the prefix cache on holds many running requests
whose first pages are the same physical pages (the decoder's ``PrefixPages``): R requests
of ``CONTEXT`` tokens in G groups, each group's requests starting with the same ``PREFIX``
tokens, admitted as the serving loop admits them (the group's first request's pages join
the tree, the others match them). Whole decode steps as served (``time_requests``:
overlapped, CUDA graphs) for the target alone (none) and DSpark (block 7), for G from R
(nothing shared) down to 1; the KV the step streams is the same in every G, the distinct
pages it reads are not.

Eager steps behind a step. A step with prompt tokens beside decode rows runs eagerly: the
host launches each kernel (tens of milliseconds for this model) while the GPU runs the step
before it. This times such a step (the mixed-step probe's ``Point``: R decode rows beside
one prompt chunk) behind a GPU spin of a fraction of its own launch time (0: launched on an
idle GPU; 2: the launch wholly hidden, the profile's timing), the step's device seconds
between its first and last events.

Scattered pages. The profiler's timing requests take their pages in order from a fresh
pool, each request's KV one contiguous run; a served request takes a page as it grows, from
a free list that finishing requests have shuffled, so its KV lies scattered over the pool.
This times whole decode steps as served (none, MTP-3, DSpark) over R requests of long-tailed
contexts (the mixed-step probe's draw) with their pages taken in order and taken from a
shuffled free list, the same contexts.

Decode steps right after a prompt step. In served records the decode step that follows a step
with prompt chunks runs further over its price than other decode steps. This times a decode
step of R requests (long-tailed contexts) by device events, right after an eager prompt step
of ``AFTER_CHUNK`` tokens and right after another decode step, alternating, for every drafter
kind (the GPU's clock falls under a prompt step's power and may not be back for the next).
The same decode step is also timed after ``HOLD_S`` of prompt steps back to back (a prefill
duty of 1, as a saturated server holds the GPU at its power limit) and after ``HOLD_S`` idle
(the clock restored), ``CLOCK_REPS`` times each: what the power limit costs a decode step of
each drafter kind, which the profile's power-limit term (``dspark_sim/cost/hot.py``) does not
price yet.

The drafter after the target. The profiler times a drafter by replaying its graph back to back,
so each replay may find part of its weights still in the GPU's L2 cache from the one before; in
a served step the drafter runs right after the target's forward has streamed gigabytes through
it. This times the profiler's drafter step (MTP-3's chain, DSpark's block 7) both ways: as the
profiler does, and with ``L2_FLUSH_BYTES`` written before each replay (untimed), over R
requests of the profiler's ``DRAFT_CONTEXT`` tokens, the rounds interleaved. Whole served steps time their
drafter over the profile's price at 64-128 requests (the layout part's ``draft_s``).

Each point is written as soon as it is timed; a failing point is recorded and skipped, and
no point starts after ``--budget-s`` seconds.
"""
from __future__ import annotations

import gc
import statistics
import sys
import time

import numpy as np
from outputs import begin_probe, code_commit, probe_main, probe_parser, write_result

from dspark_sim.reports.served_steps import SPINS, table

T0 = time.monotonic()
CONTEXT, PREFIX = 2560, 2048
REQS = (224, 128, 64)
GROUPS = (0, 32, 8, 1)  # 0: every request its own prefix
KINDS = ("none", "block")
LAYOUT_KINDS, LAYOUT_REQS = ("none", "chain", "block"), (192, 128, 64)  # a table row left for a prompt
AFTER_CHUNK = 4096
HOLD_S, CLOCK_REPS = 1.0, 3  # seconds of back-to-back prompt steps (or idle) before a decode step
EAGER_REQS, EAGER_CHUNKS = (128, 64), (512, 2048)
DRAFT_REQS, DRAFT_ROUNDS, L2_FLUSH_BYTES = (16, 64, 128, 256), 3, 512 << 20  # H200's L2: 60 MiB
TINY = dict(reqs=(4,), groups=(0, 2, 1), context=48, prefix=32, eager_reqs=(3,), eager_chunks=(8,), layout_reqs=(4,), after_chunk=8,
            hold_s=0.01, draft_reqs=(2, 4))


def build(args):
    """(stepper, grid): Qwen3-8B with the prefix cache on, or the tiny CPU decoder."""
    from dspark_sim.kernels.profiler.steps import Stepper

    if args.tiny:
        from dspark_sim.kernels.decoder.tiny import tiny_decoder

        dec = tiny_decoder("dspark", max_running_requests=8, max_model_len=160, kv_tokens=2048, synthetic=True,
                           prefix_cache=True)
        return Stepper(dec, reps=2), TINY
    from dspark_sim.catalog import get_model
    from dspark_sim.kernels.decoder import Decoder, DecoderConfig

    conf = DecoderConfig.of(method="dspark", block_size=8, scheduler="full", max_running_requests=max(REQS),
                            batching="prefill_first", prefix_cache=True, max_model_len=CONTEXT + max(EAGER_CHUNKS) + 1024,
                            kv_tokens=args.kv_tokens, device="cuda")
    dec = Decoder(get_model(args.model), conf)
    dec.randomize_cache()
    return Stepper(dec), dict(reqs=REQS, groups=GROUPS, context=CONTEXT, prefix=PREFIX, eager_reqs=EAGER_REQS,
                              eager_chunks=EAGER_CHUNKS, layout_reqs=LAYOUT_REQS, after_chunk=args.after_chunk,
                              hold_s=HOLD_S, draft_reqs=DRAFT_REQS)


def shared_requests(dec, reqs: int, groups: int, context: int, prefix: int, rng) -> list | None:
    """``reqs`` decoding requests of ``context`` tokens in ``groups`` groups sharing their first
    ``prefix`` tokens' pages (0: none shared), admitted through the prefix cache; None (nothing
    held) when the pages do not hold them."""
    from dspark_sim.kernels.decoder.sequence import Sequence

    vocab, seqs = dec.spec.vocab_size, []
    heads = [rng.integers(0, vocab, prefix).tolist() for _ in range(groups)]
    for i in range(reqs):
        head = heads[i % groups] if groups else rng.integers(0, vocab, prefix).tolist()
        s = Sequence(i, head + rng.integers(0, vocab, context - prefix).tolist(), 1 << 30, 1.0, 0)
        s.tokens.append(int(rng.integers(0, vocab)))
        seqs.append(s)
        if not dec.fake_prefill(s):
            for t in seqs:
                dec.release(t)
            dec.pages.drop_cached()
            return None
        if groups and i < groups:
            dec.pages.share([s])  # the group's first request: its pages join the tree
    dec.pages.flush()
    dec.rows.put(seqs)
    return seqs


def run_shared(out: dict, stepper, grid: dict, args, rng) -> None:
    from dspark_sim.kernels.profiler.steps import time_requests

    for reqs in grid["reqs"]:
        for kind in KINDS:
            for groups in grid["groups"]:
                key = {"part": "shared", "kind": kind, "reqs": reqs, "groups": groups}
                if _skipped(out, key, args):
                    continue
                try:
                    dec = stepper._step_decoder(kind, True)
                    hits = dec.pages.hit_tokens
                    seqs = shared_requests(dec, reqs, groups, grid["context"], grid["prefix"], rng)
                    if seqs is None:
                        raise RuntimeError("the pages do not hold these requests")
                    shared = dec.pages.hit_tokens - hits
                    distinct = len({p for s in seqs for p in s.pages})
                    got = time_requests(dec, seqs, args.steps)
                    dec.pages.drop_cached()
                    if got is None:
                        raise RuntimeError("no step timed")
                except Exception as e:  # noqa: BLE001 - one point failing must not lose the others
                    _fail(out, key, e)
                    continue
                record_steps(out, args, {**key, "context": grid["context"], "prefix": grid["prefix"],
                                         "shared_tokens": shared, "distinct_pages": distinct}, got,
                             f"{kind:5s} R {reqs:4d} G {groups:3d}, shared {shared} tokens")


def record_steps(out: dict, args, point: dict, got: dict, label: str) -> None:
    """A point of timed whole steps (``time_requests``) into ``out``, written, and its line."""
    med = lambda i: statistics.median(r[i] for r in got["steps"])  # noqa: E731
    out["points"].append({**point, "verify_tokens": med(0), "step_s": got["step_s"], "draft_s": med(2),
                          "verify_s": med(3), "steps": got["steps"]})
    write_result(args.out, out)
    print(f"{label}: step {got['step_s'] * 1e3:8.3f} ms, draft {med(2) * 1e3:7.3f} ms, verify {med(3) * 1e3:7.3f} ms "
          f"(+{time.monotonic() - T0:.0f} s)", flush=True)


def run_layout(out: dict, stepper, grid: dict, args, rng) -> None:
    """Whole decode steps over long-tailed contexts, pages in order and scattered."""
    from dspark_sim.kernels.profiler.steps import time_requests
    from dspark_sim.reports.mixed_steps import CONTEXT_MAX, CONTEXT_MEAN, contexts

    for reqs in grid["layout_reqs"]:
        lengths = contexts(reqs, min(CONTEXT_MEAN, grid["context"] // 2), min(CONTEXT_MAX, grid["context"]))
        for kind in LAYOUT_KINDS:
            for layout in ("ordered", "scattered"):
                key = {"part": "layout", "kind": kind, "reqs": reqs, "layout": layout}
                if _skipped(out, key, args):
                    continue
                try:
                    dec = stepper._step_decoder(kind, True)
                    order_pages(dec, layout, reqs)
                    seqs = stepper.requests_of(lengths, dec)
                    if seqs is None:
                        raise RuntimeError("the pages do not hold these requests")
                    got = time_requests(dec, seqs, args.steps)
                    order_pages(dec, "ordered", reqs)
                    if got is None:
                        raise RuntimeError("no step timed")
                except Exception as e:  # noqa: BLE001 - one point failing must not lose the others
                    _fail(out, key, e)
                    continue
                record_steps(out, args, {**key, "context_sum": sum(lengths), "context_max": max(lengths)}, got,
                             f"{kind:5s} R {reqs:4d} {layout:9s}")


def run_layout_mixed(out: dict, stepper, grid: dict, args, rng) -> None:
    """Eager steps (decode rows beside a prompt chunk, launch hidden) with the rows' pages in
    order and scattered."""
    from dspark_sim.reports.mixed_steps import CONTEXT_MAX, CONTEXT_MEAN

    dec = stepper._step_decoder("none", True)
    draw = {"mean": min(CONTEXT_MEAN, grid["context"] // 2), "max_context": min(CONTEXT_MAX, grid["context"])}
    for reqs in grid["eager_reqs"]:
        for layout in ("ordered", "scattered"):
            chunk = max(grid["eager_chunks"])
            key = {"part": "layout_mixed", "reqs": reqs, "chunk": chunk, "layout": layout}
            if _skipped(out, key, args):
                continue
            try:
                rows, context_sum = spun_point(dec, reqs, draw, chunk, np.random.default_rng(reqs), args.reps, layout)
            except Exception as e:  # noqa: BLE001
                _fail(out, key, e)
                continue
            out["points"].append({**key, "context_sum": context_sum, "gpu_s": rows["gpu_s"]["2.0"],
                                  "launch_s": rows["launch_s"]})
            write_result(args.out, out)
            print(f"mixed R {reqs:4d} C {chunk:5d} {layout:9s}: gpu {rows['gpu_s']['2.0'] * 1e3:8.3f} ms "
                  f"(+{time.monotonic() - T0:.0f} s)", flush=True)


def run_after(out: dict, stepper, grid: dict, args, rng) -> None:
    """Decode steps timed right after a prompt step and right after a decode step."""
    from mixed_steps import Point

    from dspark_sim.reports.mixed_steps import CONTEXT_MAX, CONTEXT_MEAN, contexts

    chunk = grid["after_chunk"]
    for reqs in grid["layout_reqs"]:
        lengths = contexts(reqs, min(CONTEXT_MEAN, grid["context"] // 2), min(CONTEXT_MAX, grid["context"]))
        for kind in LAYOUT_KINDS:
            key = {"part": "after", "kind": kind, "reqs": reqs, "chunk": chunk,
                   "hold": "mixed" if args.hold_mixed else "prompt"}
            if _skipped(out, key, args):
                continue
            point, seqs = None, None
            try:
                dec = stepper._step_decoder(kind, True)
                seqs = stepper.requests_of(lengths, dec)
                if seqs is None:
                    raise RuntimeError("the pages do not hold these requests")
                point = Point(dec, seqs if args.hold_mixed else [], chunk, 0, rng)
                got = time_after(dec, seqs, point, args.reps, grid["hold_s"])
            except Exception as e:  # noqa: BLE001
                _fail(out, key, e)
                continue
            finally:
                if point is not None:
                    point.close()
                for s in seqs or ():
                    dec.release(s)
                dec.graphs.clear()
            out["points"].append({**key, "context_sum": sum(lengths), **got})
            write_result(args.out, out)
            print(f"{kind:5s} R {reqs:4d}: decode after prompt {got['after_prompt_s'] * 1e3:8.3f} ms, after decode "
                  f"{got['after_decode_s'] * 1e3:8.3f} ms, hot {got['hot_s'] * 1e3:8.3f} ms, cool "
                  f"{got['cool_s'] * 1e3:8.3f} ms (+{time.monotonic() - T0:.0f} s)", flush=True)


def time_after(dec, seqs: list, point, reps: int, hold_s: float) -> dict:
    """Three warm decode steps, then ``reps`` rounds of: a prompt step, a decode step, a decode
    step; then :data:`CLOCK_REPS` rounds of: ``hold_s`` idle, a decode step (cool), ``hold_s`` of
    prompt steps back to back, a decode step (hot). Each decode step's device seconds (events),
    launched as the serving loop launches it."""
    def decode() -> float:
        for s in seqs:
            dec.pages.reserve(s, len(s.tokens) + s.pending + dec.conf.block_size)
        pending = dec.launch(seqs, [])
        dec.finish(pending)
        return pending.timer.seconds("start", "end")
    was = gc.isenabled()
    gc.disable()
    try:
        for _ in range(3):
            decode()
        after_prompt, after_decode = [], []
        for _ in range(reps):
            point.step()
            after_prompt.append(decode())
            after_decode.append(decode())
        cool, hot, held, cool_step, hot_step = [], [], [], [], []
        for _ in range(CLOCK_REPS):
            time.sleep(hold_s)
            cool.append(decode())
            time.sleep(hold_s)
            cool_step.append(point.step()["gpu_s"])  # the held step itself, cool
            t0, n = time.monotonic(), 0
            while time.monotonic() - t0 < hold_s or not n:
                last = point.step()["gpu_s"]
                n += 1
            held.append(n)
            hot_step.append(last)  # and after a second of its kind back to back
            hot.append(decode())
    finally:
        if was:
            gc.enable()
    return {"after_prompt_s": statistics.median(after_prompt), "after_decode_s": statistics.median(after_decode),
            "cool_s": statistics.median(cool), "hot_s": statistics.median(hot), "hold_s": hold_s,
            "held_cool_s": statistics.median(cool_step), "held_hot_s": statistics.median(hot_step),
            "runs": {"after_prompt": after_prompt, "after_decode": after_decode, "cool": cool, "hot": hot,
                     "prompt_steps_held": held, "held_cool": cool_step, "held_hot": hot_step}}


def run_draft(out: dict, stepper, grid: dict, args, rng) -> None:
    """The profiler's drafter steps replayed back to back and each after the L2 is overwritten."""
    import torch

    from dspark_sim.kernels.profiler.steps import DRAFT_CONTEXT

    flush = torch.empty(L2_FLUSH_BYTES // 4 if not args.tiny else 1024, dtype=torch.float32,
                        device=stepper.dec.device)
    cold = lambda i: flush.fill_(float(i))  # noqa: E731 - untimed, before each replay
    context = min(DRAFT_CONTEXT, grid["context"])
    for reqs in grid["draft_reqs"]:
        for kind in ("chain", "block"):
            key = {"part": "draft", "kind": kind, "reqs": reqs}
            if _skipped(out, key, args):
                continue
            try:
                time_one = (lambda between: stepper.chain(reqs, 3, context, between=between)) if kind == "chain" else \
                    (lambda between: stepper.draft(reqs, 7, context, between=between))
                warm, flushed = [], []
                for _ in range(DRAFT_ROUNDS):  # interleaved, so a drifting clock moves both alike
                    warm.append(time_one(None))
                    flushed.append(time_one(cold))
                if None in warm or None in flushed:
                    raise RuntimeError("the pages do not hold these requests")
            except Exception as e:  # noqa: BLE001 - one point failing must not lose the others
                _fail(out, key, e)
                continue
            got = {"warm_s": statistics.median(warm), "flushed_s": statistics.median(flushed),
                   "runs": {"warm": warm, "flushed": flushed}}
            out["points"].append({**key, "block_size": 3 if kind == "chain" else 7, "context": context,
                                  **got})
            write_result(args.out, out)
            print(f"{kind:5s} R {reqs:4d}: drafter back to back {got['warm_s'] * 1e3:7.3f} ms, after an L2 flush "
                  f"{got['flushed_s'] * 1e3:7.3f} ms ({got['flushed_s'] / got['warm_s'] - 1:+.1%}) "
                  f"(+{time.monotonic() - T0:.0f} s)", flush=True)


def run_eager(out: dict, stepper, grid: dict, args, rng) -> None:
    from dspark_sim.reports.mixed_steps import CONTEXT_MAX, CONTEXT_MEAN

    dec = stepper._step_decoder("none", True)
    draw = {"mean": min(CONTEXT_MEAN, grid["context"] // 2), "max_context": min(CONTEXT_MAX, grid["context"])}
    for reqs in grid["eager_reqs"]:
        for chunk in grid["eager_chunks"]:
            key = {"part": "eager", "reqs": reqs, "chunk": chunk}
            if _skipped(out, key, args):
                continue
            try:
                rows, context_sum = spun_point(dec, reqs, draw, chunk, rng, args.reps)
            except Exception as e:  # noqa: BLE001
                _fail(out, key, e)
                continue
            out["points"].append({**key, "context_sum": context_sum, **rows})
            write_result(args.out, out)
            print(f"eager R {reqs:4d} C {chunk:5d}: " + ", ".join(
                f"spin {f:g}: {rows['gpu_s'][str(f)] * 1e3:7.3f} ms" for f in SPINS)
                + f", launch {rows['launch_s'] * 1e3:.1f} ms (+{time.monotonic() - T0:.0f} s)", flush=True)


def spun_point(dec, reqs: int, draw: dict, chunk: int, rng, reps: int, layout: str | None = None):
    """(:func:`time_spins` of R decode rows beside a ``chunk``-token prompt, their summed context),
    the rows' pages taken as ``layout`` says (None: as the pool holds them); nothing left held."""
    from mixed_steps import Point, requests

    point, seqs = None, []
    try:
        if layout is not None:
            order_pages(dec, layout, reqs)
        seqs = requests(dec, reqs, draw, rng)
        point = Point(dec, seqs, chunk, 0, rng)
        return time_spins(point, reps), sum(len(s.tokens) for s in seqs)
    finally:
        if point is not None:
            point.close()
        for s in seqs:
            dec.release(s)
        dec.graphs.clear()
        if layout is not None:
            order_pages(dec, "ordered", reqs)


def order_pages(dec, layout: str, seed: int) -> None:
    """Put the pool's free pages in order, or (``scattered``) in a shuffled order."""
    import random
    from collections import deque

    pages = sorted(dec.pages.free)
    if layout == "scattered":
        random.Random(seed).shuffle(pages)
    dec.pages.free = deque(pages)


def time_spins(point, reps: int) -> dict:
    """Two warm steps, then ``reps`` rounds of one step behind each spin of :data:`SPINS`."""
    was = gc.isenabled()
    gc.disable()
    try:
        launch = statistics.median(point.step()["launch_s"] for _ in range(3))
        got = {f: [] for f in SPINS}
        for _ in range(reps):
            for f in SPINS:
                got[f].append(point.step(f * launch) if f else point.step())
    finally:
        if was:
            gc.enable()
    med = lambda rows, k: statistics.median(r[k] for r in rows)  # noqa: E731
    return {"launch_s": launch, "gpu_s": {str(f): med(r, "gpu_s") for f, r in got.items()},
            "wall_s": {str(f): med(r, "wall_s") for f, r in got.items()},
            "spin_s": {str(f): med(r, "spin_s") for f, r in got.items() if f and "spin_s" in r[0]},
            "runs": {str(f): r for f, r in got.items()}}


def _skipped(out: dict, key: dict, args) -> bool:
    """Whether the budget is spent (the point then recorded as skipped)."""
    if time.monotonic() - T0 <= args.budget_s:
        return False
    out["failed"].append({**key, "error": "skipped: budget"})
    return True


def _fail(out: dict, key: dict, e: Exception) -> None:
    out["failed"].append({**key, "error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"})
    print(f"{key}: {out['failed'][-1]['error']}", flush=True)


def header(args) -> dict:
    from dspark_sim.kernels.profiler.provenance import provenance, sm_clocks

    return {**provenance(), "tree": code_commit("benchmarks", "kernels") or None, "sm_clocks_before": sm_clocks(),
            "model": "tiny" if args.tiny else args.model, "weights": "random", "kv_tokens": args.kv_tokens,
            "steps": args.steps, "reps": args.reps, "block_size": {"block": 7}}


def run(args) -> dict:
    from dspark_sim.kernels.profiler.provenance import sm_clocks

    out, (stepper, grid) = begin_probe(args, "served_steps", header(args), build, T0)
    rng = np.random.default_rng(0)
    if args.part in ("all", "eager"):
        run_eager(out, stepper, grid, args, rng)
    if args.part in ("all", "shared"):
        run_shared(out, stepper, grid, args, rng)
    if args.part in ("all", "layout"):
        run_layout(out, stepper, grid, args, rng)
        run_layout_mixed(out, stepper, grid, args, rng)
    if args.part in ("all", "after"):
        run_after(out, stepper, grid, args, rng)
    if args.part in ("all", "draft"):
        run_draft(out, stepper, grid, args, rng)
    out["provenance"].update(total_s=round(time.monotonic() - T0, 1), sm_clocks_after=sm_clocks())
    write_result(args.out, out)
    return out


def main() -> int:
    ap = probe_parser(__doc__, "served_steps", kv_tokens=620_000, budget_s=260.0)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--reps", type=int, default=6)
    ap.add_argument("--part", choices=("all", "eager", "shared", "layout", "after", "draft"), default="all",
                    help="which steps to time (default: all, about 6 minutes on an H200)")
    ap.add_argument("--after-chunk", type=int, default=AFTER_CHUNK, help="--part after: the held prompt chunk")
    ap.add_argument("--hold-mixed", action="store_true",
                    help="--part after: the held steps carry the decode rows beside the chunk, as served mixed steps do")
    return probe_main(ap.parse_args(), "served_steps", run, table)


if __name__ == "__main__":
    sys.exit(main())
