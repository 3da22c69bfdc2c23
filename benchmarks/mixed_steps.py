"""Mixed steps as the decoder serves them: the decode rows of R requests beside one prompt
chunk of C tokens after K cached, one target forward (Qwen3-8B, no speculation, H200; with
``--method mtp3`` or ``dspark`` the drafter's forward before it and the decode rows' windows,
as the decoder serves those methods, on the smaller grid ``SPEC_GRID``).

    # on the GPU, one device call (build included, under 200 s):
    OUT=... BUDGET_S=240 START_S=15; source benchmarks/visit_common.sh; export PYTHONPATH=$PYTHONPATH:$PWD/benchmarks; timeout 220 python3 benchmarks/mixed_steps.py --run --out $OUT/mixed_steps.json
    timeout 150 python3 benchmarks/mixed_steps.py --run --method dspark --budget-s 120 --out $OUT/spec_mixed_dspark.json
    python benchmarks/mixed_steps.py --json F.json      # the table
    TRITON_INTERPRET=1 python benchmarks/mixed_steps.py --run --tiny --out /tmp/mixed.json   # CPU dry run

The profile times decode steps (R requests, no prompt tokens) and prefill steps (one
chunk, no decode rows) apart; a served step past saturation carries both, run eagerly as
one forward whose attention is planned for the longest query (the chunk): every decode
row gets the chunk's query tiles and no key splits. This times such steps through the
decoder's own ``launch`` and ``finish``: R decoding requests whose contexts are drawn
lognormal (mean 1,000, log-sd 1, 32..8192, the profiler's ``verify_spread`` draw), beside
one chunk, for R in ``REQS`` x C in ``CHUNKS`` x K in ``CACHED``, and each R alone (C = 0).
Each point runs ``WARM`` steps untimed, then ``reps`` pairs: one step launched behind a
GPU spin (so the host's launch is hidden, as the serving loop hides it behind the previous
step: ``gpu_s`` is its device time between the step's first and last events, ``hidden``
says whether the launch returned before the spin ended) and one launched on an idle GPU
and waited for (``wall_s``, host included). The prompt chunk is reset between steps
(``Stepper.prefill_samples``); decode requests keep the token each step gives them.
The decoder has a table row for the prompt beside 256 requests (``max_running_requests``
257; request tiers as at 256). A point that fails is recorded and skipped; the result is
written after every point, and no point starts after ``--budget-s`` seconds.
"""
from __future__ import annotations

import gc
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
from outputs import begin_probe, code_commit, probe_main, probe_parser, write_result

from dspark_sim.reports.mixed_steps import CONTEXT_MAX, CONTEXT_MEAN, CONTEXT_MIN, CONTEXT_SIGMA, contexts, table

HERE = Path(__file__).resolve().parent
T0 = time.monotonic()
REQS = (0, 256, 128, 64, 16)  # the largest first: a run cut short keeps the saturated shapes
CHUNKS = (512, 2048, 8192)
CACHED = (0, 4096)
WARM = 2
SPIN_S = 0.03  # GPU spin ahead of a timed step, seconds (lengthened when a launch takes longer)
PREFILL_ID = 1 << 20  # the prompt's sequence id, apart from the decode requests' 0..R-1
TINY = dict(reqs=(0, 3), chunks=(8,), cached=(0, 16), mean=20, max_context=48)
# with a drafter: the light-load shapes where served DSpark steps with a prompt chunk ran over
# their price (docs/validation_sweeps.md), then a saturated one
SPEC_GRID = dict(reqs=(16, 4, 64, 0), chunks=(512, 1024, 2048), cached=(0,))


def build(args):
    """(decoder, grid): Qwen3-8B as the benchmarks build it, or the tiny CPU decoder."""
    if args.tiny:
        from dspark_sim.kernels.decoder.tiny import tiny_decoder

        tiny = {"none": "none", "mtp3": "static", "dspark": "dspark"}[args.method]
        dec = tiny_decoder(tiny, max_running_requests=8, max_model_len=160, kv_tokens=2048, synthetic=True,
                           kernels="triton", attention="triton")
        return dec, TINY
    sys.path.insert(0, str(HERE))
    from bench_targets import make_decoder

    grid = dict(reqs=REQS, chunks=CHUNKS, cached=CACHED) if args.method == "none" else SPEC_GRID
    context = max(grid["chunks"]) + max(grid["cached"]) + 1024  # the prompt fits under max_model_len
    # a row for the prompt beside the largest R (request tiers are those of max(REQS))
    dec = make_decoder(args.method, args.model, context, max(REQS) + 1, args.kv_tokens, "cuda")
    return dec, dict(grid, mean=CONTEXT_MEAN, max_context=CONTEXT_MAX)


class Point:
    """One (R, C, K) shape on ``dec``: decode requests ``seqs`` and a prompt of ``K + C + 1``
    tokens whose chunk never ends it (no first token sampled)."""

    def __init__(self, dec, seqs: list, chunk: int, cached: int, rng):
        from dspark_sim.kernels.decoder.sequence import Sequence

        self.dec, self.seqs, self.chunk, self.cached = dec, seqs, chunk, cached
        self.pre = None
        if chunk:
            self.pre = Sequence(PREFILL_ID, rng.integers(0, dec.spec.vocab_size, cached + chunk + 1).tolist(), 1, 1.0)
            dec.admit(self.pre)
            if not dec.pages.reserve(self.pre, cached + chunk):
                dec.release(self.pre)
                raise RuntimeError(f"pages do not hold a prompt of {cached + chunk} tokens")

    def close(self) -> None:
        if self.pre is not None:
            self.dec.release(self.pre)

    def step(self, spin_s: float = 0.0) -> dict:
        """One step launched and finished: device seconds (events), wall seconds, host launch."""
        import torch

        dec = self.dec
        for s in self.seqs:
            dec.pages.reserve(s, len(s.tokens) + s.pending + dec.conf.block_size)
        work = []
        if self.pre is not None:
            self.pre.num_cached = self.cached
            del self.pre.tokens[self.pre.prompt_len:]
            work = [(self.pre, self.chunk)]
        spin = None
        if spin_s and dec.device.type == "cuda":
            spin = torch.cuda.Event(enable_timing=True)
            spin.record()
            torch.cuda._sleep(int(spin_s * 1.98e9))  # cycles at about the H200's boost clock
        t0 = time.perf_counter()
        pending = dec.launch(self.seqs, work)
        launched = time.perf_counter() - t0
        st = dec.finish(pending)
        wall = time.perf_counter() - t0
        timer = pending.timer
        out = {"gpu_s": timer.seconds("start", "end"), "forward_s": st.verify_s, "wall_s": wall,
               "launch_s": launched}
        if spin is not None:
            out["spin_s"] = spin.elapsed_time(timer.marks["start"]) / 1e3
        return out


def time_point(point: Point, reps: int) -> dict:
    """``WARM`` steps, then ``reps`` pairs (behind a spin; on an idle GPU), garbage collector off."""
    spun, idle = [], []
    was = gc.isenabled()
    gc.disable()
    try:
        for _ in range(WARM):
            last = point.step()
        spin_s = max(SPIN_S, 2.0 * last["launch_s"])
        for _ in range(reps):
            spun.append(point.step(spin_s))
            idle.append(point.step())
    finally:
        if was:
            gc.enable()
    med = lambda rows, key: statistics.median(r[key] for r in rows)  # noqa: E731
    hidden = [r["launch_s"] < r.get("spin_s", 0.0) for r in spun]
    return {"gpu_s": med(spun, "gpu_s"), "forward_s": med(spun, "forward_s"), "wall_s": med(idle, "wall_s"),
            "idle_gpu_s": med(idle, "gpu_s"), "launch_s": med(idle, "launch_s"),
            "hidden": sum(hidden) / len(hidden), "spun": spun, "idle": idle}


def requests(dec, reqs: int, grid: dict, rng) -> list:
    """``reqs`` decoding requests of :func:`contexts` (empty for 0); none left admitted on failure."""
    if reqs + 1 > len(dec.pages.free_rows):  # the prompt takes a row too
        raise RuntimeError(f"{reqs} requests and a prompt need {reqs + 1} table rows, "
                           f"{len(dec.pages.free_rows)} free")
    seqs = []
    try:
        for n, count in Counter(contexts(reqs, grid["mean"], grid["max_context"])).items():
            got = dec.fake_requests(count, n, rng)
            if got is None:
                raise RuntimeError(f"pages do not hold {reqs} requests")
            seqs += got
    except Exception:
        for s in seqs:
            dec.release(s)
        raise
    return seqs


def shapes(grid: dict, reqs: int) -> list[tuple[int, int]]:
    """(chunk, cached) of one R: alone first (none for R = 0), then the chunks, cheapest first."""
    alone = [(0, 0)] if reqs else []
    return alone + [(c, k) for c in grid["chunks"] for k in grid["cached"]]


def header(args) -> dict:
    from dspark_sim.kernels.profiler.provenance import provenance, sm_clocks

    return {**provenance(), "tree": code_commit("benchmarks", "kernels") or None, "sm_clocks_before": sm_clocks(),
            "model": "tiny" if args.tiny else args.model, "weights": "random", "method": args.method,
            "kv_tokens": args.kv_tokens, "reps": args.reps, "warm": WARM,
            "contexts": f"lognormal mean {CONTEXT_MEAN}, log-sd {CONTEXT_SIGMA}, {CONTEXT_MIN}..{CONTEXT_MAX} "
                        "(verify_spread's draw)"}


def run(args) -> dict:
    from dspark_sim.kernels.profiler.provenance import sm_clocks

    out, (dec, grid) = begin_probe(args, "mixed_steps", header(args), build, T0)
    rng = np.random.default_rng(0)
    for reqs in grid["reqs"]:
        run_reqs(out, dec, grid, reqs, args, rng)
    out["provenance"].update(total_s=round(time.monotonic() - T0, 1), sm_clocks_after=sm_clocks())
    write_result(args.out, out)
    return out


def run_reqs(out: dict, dec, grid: dict, reqs: int, args, rng) -> None:
    """Every shape of ``reqs`` decoding requests, on one set of them."""
    import torch

    todo = shapes(grid, reqs)
    try:
        seqs = requests(dec, reqs, grid, rng)
    except Exception as e:  # noqa: BLE001 - recorded, the next R goes on
        fail(out, [(reqs, c, k) for c, k in todo], e)
        return
    try:
        for chunk, cached in todo:
            if time.monotonic() - T0 > args.budget_s:
                fail(out, [(reqs, chunk, cached)], "skipped: budget")
                continue
            measure(out, dec, seqs, reqs, chunk, cached, args, rng)
            write_result(args.out, out)
    finally:
        for s in seqs:
            dec.release(s)
        dec.graphs.clear()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def measure(out: dict, dec, seqs: list, reqs: int, chunk: int, cached: int, args, rng) -> None:
    """Time one point into ``out["points"]``, or record why it failed."""
    point = None
    try:
        point = Point(dec, seqs, chunk, cached, rng)
        got = time_point(point, args.reps)
    except Exception as e:  # noqa: BLE001 - one shape failing must not lose the others
        fail(out, [(reqs, chunk, cached)], e)
        return
    finally:
        if point is not None:
            point.close()
    ctx = [len(s.tokens) for s in seqs]
    row = {"reqs": reqs, "chunk": chunk, "cached": cached, "context_mean": round(sum(ctx) / max(len(ctx), 1), 1),
           "context_max": max(ctx, default=0), "context_sum": sum(ctx), **got}
    out["points"].append(row)
    print(f"R {reqs:4d} C {chunk:5d} K {cached:5d}: gpu {got['gpu_s'] * 1e3:8.3f} ms, wall "
          f"{got['wall_s'] * 1e3:8.3f} ms, hidden {got['hidden']:.0%} (+{time.monotonic() - T0:.0f} s)", flush=True)


def fail(out: dict, points: list, err) -> None:
    line = err if isinstance(err, str) else f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
    for reqs, chunk, cached in points:
        out["failed"].append({"reqs": reqs, "chunk": chunk, "cached": cached, "error": line})
        print(f"R {reqs} C {chunk} K {cached}: {line}", flush=True)


def main() -> int:
    ap = probe_parser(__doc__, "mixed_steps")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--method", choices=("none", "mtp3", "dspark"), default="none",
                    help="the decoder's method (default none: the points the profile's mixed term is fitted on)")
    return probe_main(ap.parse_args(), "mixed_steps", run, table)

if __name__ == "__main__":
    sys.exit(main())
