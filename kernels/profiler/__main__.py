"""``dspark-profile`` (``python -m dspark_sim.kernels.profiler``): time a model's steps on this GPU.

    dspark-profile --gpu h200 --model qwen3-8b --out DIR \\
        [--part verify,draft,chain,prefill,step,kernels,mixed,sched,spread | all] [--max-seconds S] \\
        [--resume RAW.json [--replace prefill,...] [--add step,...]] [--eager-steps] [--layers N] \\
        [--method none] [--tp-rank N] [--verify-contexts 32768,16384] [--shares verify=1,prefill=1]

Writes ``DIR/raw_<model>.json``: a provenance block and the timed points
``verify: [{reqs, tokens, context, step_s}]``, ``draft: [{kind, reqs, block_size,
context, step_s}]`` (kind ``block``: the DSpark drafter; ``chain``: an MTP-k
chain), ``prefill: [{kind, chunk, context, step_s, p90_s, reps}]`` (``--prefill-chunks``,
``--prefill-cached``, ``--prefill-kinds``: the grid; levels of cached tokens coarse first), ``step: [{kind, reqs,
context, graphs, step_s, steps}]`` (whole decode steps as served) and
``kernels: [{kernel, reqs, block_size, vocab, step_s}]`` (one launch of the fused
``schedule_verify`` or ``accept``), ``mixed: [{reqs, tokens, short_context,
max_context, context, step_s}]`` (verify steps over requests of ``short_context``
tokens but one of ``max_context``; ``context`` the mean) and ``sched: [{kind,
reqs, step_s, steps}]`` (the serving loop's host time between steps, ``reqs``
requests running: bursts served by the real loop) and ``spread: [{reqs, tokens,
mean, sigma, context, max_context, step_s, uniform_s}]`` (verify steps over
lognormal contexts as served traffic holds them, and the same step at their mean;
the fit reads both as verify rows). ``--layers N`` times a slice of the model's first N
layers (DeepSeek-V4: its compressed layers, CSA and HCA alternating) and writes
``raw_<model>.slice<N>.json`` (``provenance.slice_layers``, ``provenance.layer_ratios``);
``dspark-profile fit`` scales two slices to the whole model by layer count.
``--method none`` times the target alone (no drafter built): verify steps at one token a
request (decode), prefill, whole steps and the serving loop's host time of kind ``none``
(``provenance.method``). ``--tp-rank N`` times one rank of an N-way tensor-parallel replica
on this one GPU (:meth:`~dspark_sim.catalog.ModelSpec.tp_rank`: its heads, KV heads, MLP
width and vocabulary rows, every layer), without the collectives (``provenance.tp``);
``dspark-profile fit`` makes it a profile measured per rank at tp N.
A DeepSeek-V4 target runs without a drafter: its parts are verify and prefill. Random bf16
weights; the grid is cut to ``--max-seconds`` (coarse points first), and points
that do not fit in memory are skipped; both are listed under
``provenance.skipped``. ``--resume`` keeps the points of an earlier raw file
and times only the missing ones (``--replace`` drops a part's old points
first), so a grid too large for one run is split across runs and merged;
``--add`` times a part's points again and keeps the old ones beside them (host
times move between processes: runs in several processes are pooled). ``--verify-contexts``
replaces the verify grid's contexts per request (long contexts added to an earlier file with
``--resume``: only the new points are timed) and ``--shares`` the split of ``--max-seconds``
over the parts.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

PARTS = ("verify", "draft", "chain", "prefill", "step", "kernels", "mixed", "sched", "spread")
SHARE = {"verify": 0.68, "draft": 0.05, "chain": 0.05, "prefill": 0.1, "step": 0.1, "kernels": 0.02,
         "mixed": 0.05, "sched": 0.1, "spread": 0.05}
DRAFT_KIND = {"draft": "block", "chain": "chain"}
DRAFTED = ("draft", "chain", "kernels", "mixed", "spread")  # parts a target-only profile leaves out
SECTION = {"verify": "verify", "draft": "draft", "chain": "draft", "prefill": "prefill", "step": "step",
           "kernels": "kernels", "mixed": "mixed", "sched": "sched", "spread": "spread"}


def parse_args(argv=None):
    from dspark_sim.errors import ArgumentParser

    p = ArgumentParser(prog="dspark-profile")
    p.add_argument("--gpu", required=True, help="GPU name recorded in the file (e.g. h200)")
    p.add_argument("--model", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--part", default="all", help=f"comma list of {PARTS}, or all")
    p.add_argument("--max-seconds", type=float, default=540.0,
                   help="time budget; 0 times nothing (a resumed file merged and written as is)")
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--prefill-idle", type=float, default=0.0,
                   help="idle seconds after each timed prefill per second it took (served duty cycle)")
    p.add_argument("--resume", help="earlier raw file: keep its points, time the missing ones")
    p.add_argument("--replace", default="", help="with --resume: parts whose old points are dropped")
    p.add_argument("--add", default="", help="with --resume: parts timed again, old points kept beside")
    p.add_argument("--eager-steps", action="store_true", help="also time whole steps without CUDA graphs")
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--kv-tokens", type=int, default=0, help="KV capacity (0: fit free memory)")
    p.add_argument("--layers", type=int, default=0, help="time a slice of this many layers (0: all)")
    p.add_argument("--method", default="dspark", choices=("dspark", "none"),
                   help="none: the target alone (decode verify steps, prefill, steps and sched of kind none)")
    p.add_argument("--tp-rank", type=int, default=1,
                   help="time one rank of a replica split this many ways (tensor parallel), collectives left out")
    p.add_argument("--prefill-chunks", default="", help="prefill chunk sizes, comma list (default: the grid's)")
    p.add_argument("--prefill-cached", default="", help="cached tokens before a prefill chunk, comma list")
    p.add_argument("--prefill-kinds", default="", help="drafter kinds of prefill steps (none,chain,block)")
    p.add_argument("--prefill-max-total", type=int, default=0, help="largest chunk + cached timed (0: any)")
    p.add_argument("--verify-contexts", default="", help="context per request of verify steps, comma list "
                   "(default: the grid's), timed in the order given")
    p.add_argument("--shares", default="", help="part=weight,... : how --max-seconds is split over the parts "
                   "(default: the profiler's split)")
    args = p.parse_args(argv)
    args.verify_contexts = _int_list(p, "--verify-contexts", args.verify_contexts, 1)
    args.shares = _shares(p, args.shares)
    args.prefill_chunks = _int_list(p, "--prefill-chunks", args.prefill_chunks, 1)
    args.prefill_cached = _int_list(p, "--prefill-cached", args.prefill_cached, 0)
    args.prefill_kinds = tuple(x for x in args.prefill_kinds.split(",") if x)
    for kind in args.prefill_kinds:
        if kind not in ("none", "chain", "block"):
            p.error(f"argument --prefill-kinds: unknown kind {kind!r}; expected none, chain, block")
    for flag, value, low, high in (("--layers", args.layers, 0, 10**4), ("--reps", args.reps, 1, 10**4),
                                   ("--prefill-idle", args.prefill_idle, 0, 100),
                                   ("--kv-tokens", args.kv_tokens, 0, 2**32), ("--tp-rank", args.tp_rank, 1, 64),
                                   ("--max-seconds", args.max_seconds, 0.0, 7 * 24 * 3600.0)):
        if not low <= value <= high:  # NaN fails too
            p.error(f"argument {flag}: {value!r} is not in [{low:g}, {high:g}]")
    if not args.gpu.strip() or any(c in args.gpu for c in "/\\"):
        p.error(f"argument --gpu: {args.gpu!r} is not a GPU name")
    if Path(args.out).exists() and not Path(args.out).is_dir():
        p.error(f"argument --out: {args.out} exists and is not a directory")
    args.parts = PARTS if args.part == "all" else tuple(x for x in args.part.split(",") if x)
    args.replace = tuple(x for x in args.replace.split(",") if x)
    args.add = tuple(x for x in args.add.split(",") if x)
    for name in args.parts + args.replace + args.add:
        if name not in PARTS:
            p.error(f"unknown part {name!r}; expected {PARTS}")
    args.old = {}
    if args.resume:
        try:
            args.old = json.loads(Path(args.resume).read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            p.error(f"argument --resume: {args.resume}: {type(err).__name__}")
        if not isinstance(args.old, dict):
            p.error(f"argument --resume: {args.resume}: not a raw profile (a JSON object)")
    return args


def _shares(p, text: str) -> dict:
    """``--shares``: SHARE with the given parts' weights replaced."""
    out = dict(SHARE)
    for item in (x for x in text.split(",") if x.strip()):
        part, _, weight = item.partition("=")
        try:
            value = float(weight)
        except ValueError:
            value = -1.0
        if part not in SHARE or not 0 < value <= 100:
            p.error(f"argument --shares: {item!r} is not part=weight with a part of {PARTS} and 0 < weight <= 100")
        out[part] = value
    return out


def _int_list(p, flag: str, text: str, low: int) -> tuple[int, ...]:
    """A comma list of whole numbers >= ``low`` (empty: the grid's default)."""
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        p.error(f"argument {flag}: {text!r} is not a comma list of whole numbers")
    if any(v < low or v > 2**20 for v in values):
        p.error(f"argument {flag}: {text!r}: values must lie in [{low}, {2**20}]")
    return values


def prefill_grid(args) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``(chunks, cached)`` of the prefill part: the flags', else the grid's."""
    from dspark_sim.kernels.profiler.grid import CACHED, CHUNKS

    return (getattr(args, "prefill_chunks", ()) or CHUNKS), (getattr(args, "prefill_cached", ()) or CACHED)


def model_len(args) -> int:
    """The profiler decoder's ``max_model_len``: the longest prefill (cached + chunk) or verify
    request (context + window) of the grid, and some room."""
    from dspark_sim.kernels.profiler.grid import CONTEXTS, MAX_WINDOW

    chunks, cached = prefill_grid(args)
    contexts = getattr(args, "verify_contexts", ()) or CONTEXTS
    return max(max(cached) + max(chunks), max(contexts) + MAX_WINDOW) + 64


def build(args):
    """The decoder the points run on: DSpark block drafter, block size 8 (the largest timed)."""
    from dspark_sim.kernels.decoder import Decoder, DecoderConfig
    from dspark_sim.kernels.profiler.grid import CHUNKS

    spec = model_spec(args)
    chunks, _ = prefill_grid(args)
    method = "none" if spec.v4 is not None else getattr(args, "method", "dspark")  # V4: no drafter here
    conf = DecoderConfig.of(method=method, block_size=8, scheduler="full", max_running_requests=256,
                            batching="prefill_first", prefix_cache=False,
                            max_batched_tokens=max(max(CHUNKS), max(chunks)), max_model_len=model_len(args),
                            kv_tokens=args.kv_tokens, dtype=args.dtype, device=args.device)
    dec = Decoder(spec, conf)
    dec.randomize_cache()
    return dec


def model_spec(args):
    """The catalog model of ``--model``, cut to ``--layers`` layers when given, or to one rank of
    ``--tp-rank`` ranks."""
    from dspark_sim.catalog import get_model
    from dspark_sim.errors import InputError

    try:
        spec = get_model(args.model)
    except InputError as err:  # named as the command-line flag it came from
        raise InputError("dspark-profile", "--model", args.model, err.why) from None
    if args.layers and args.layers > spec.num_layers:
        raise InputError("dspark-profile", "--layers", args.layers, f"{spec.name} has {spec.num_layers} layers")
    drafterless = ("draft", "chain", "step", "sched")
    if spec.v4 is not None and any(p in drafterless for p in args.parts):
        raise InputError("dspark-profile", "--part", ",".join(args.parts),
                         f"{spec.name} runs without a drafter: its parts are verify, prefill, kernels, mixed, spread")
    if getattr(args, "method", "dspark") == "none" and any(p in DRAFTED for p in args.parts):
        raise InputError("dspark-profile", "--part", ",".join(args.parts),
                         f"--method none times no drafter: its parts are {', '.join(p for p in PARTS if p not in DRAFTED)}")
    tp = getattr(args, "tp_rank", 1)
    if tp > 1:
        if args.layers:
            raise InputError("dspark-profile", "--tp-rank", tp, "a rank of the whole model: leave out --layers")
        try:
            spec = spec.tp_rank(tp)
        except InputError as err:
            raise InputError("dspark-profile", "--tp-rank", tp, err.why) from None
    return spec.sliced(args.layers) if args.layers else spec


def plan(stepper, part: str, eager: bool, args=None):
    """``(points, fn, keys, extra)`` of one part: what to time and how rows are named."""
    from dspark_sim.kernels.profiler import grid
    from dspark_sim.kernels.profiler.steps import DRAFT_CONTEXT

    drafted = getattr(args, "method", "dspark") != "none"
    if part == "verify":
        contexts = getattr(args, "verify_contexts", ()) or grid.CONTEXTS
        return (grid.verify_points(contexts=contexts) if drafted else grid.decode_points(contexts)), stepper.verify, \
            ("reqs", "tokens", "context"), {}
    if part == "draft":
        return ([(r, g) for g in grid.BLOCK_SIZES for r in grid.REQS], stepper.draft, ("reqs", "block_size"),
                {"kind": "block", "context": DRAFT_CONTEXT})
    if part == "chain":
        return ([(r, k) for k in grid.CHAIN_KS for r in grid.REQS], stepper.chain, ("reqs", "block_size"),
                {"kind": "chain", "context": DRAFT_CONTEXT})
    if part == "prefill":
        kinds = grid.STEP_KINDS if stepper.dec.drafter is not None else ("none",)
        kinds = tuple(k for k in kinds if k in (getattr(args, "prefill_kinds", ()) or kinds))
        chunks, cached = prefill_grid(args)
        return (grid.prefill_points(kinds, chunks, cached, getattr(args, "prefill_max_total", 0)),
                stepper.prefill_kind, ("kind", "chunk", "context"), {})
    if part == "mixed":
        return grid.mixed_points(), stepper.verify_mixed, ("reqs", "tokens", "short_context", "max_context"), {}
    if part == "spread":
        return grid.spread_points(), stepper.verify_spread, ("reqs", "tokens", "mean", "sigma"), {}
    kinds = grid.STEP_KINDS if drafted else ("none",)
    if part == "sched":
        return [(kind, r) for kind in kinds for r in grid.REQS], stepper.sched, ("kind", "reqs"), {}
    if part == "kernels":
        return ([(k, r, grid.KERNEL_BLOCK_SIZE) for k in grid.KERNELS for r in grid.REQS], stepper.kernel,
                ("kernel", "reqs", "block_size"), {"vocab": stepper.vocab})
    modes = (True, False) if eager else (True,)
    points = [(kind, r, grid.STEP_CONTEXT, g) for g in modes for kind in kinds for r in grid.REQS]
    return points, stepper.decode_step, ("kind", "reqs", "context", "graphs"), {}


def _key(part: str, row: dict) -> tuple:
    keys = {"verify": ("reqs", "tokens", "context"), "draft": ("kind", "reqs", "block_size"),
            "chain": ("kind", "reqs", "block_size"), "prefill": ("kind", "chunk", "context"),
            "step": ("kind", "reqs", "context", "graphs"), "kernels": ("kernel", "reqs", "block_size"),
            "mixed": ("reqs", "tokens", "short_context", "max_context"), "sched": ("kind", "reqs"),
            "spread": ("reqs", "tokens", "mean", "sigma")}[part]
    return tuple(row.get(k, "block" if k == "kind" else None) for k in keys)


def main(argv=None) -> int:
    from dspark_sim.errors import run_reporting_errors

    return run_reporting_errors(profile, parse_args(argv), program="dspark-profile")


def profile(args) -> int:
    """Time the parts of ``args`` and write the raw file (atomically)."""
    from dspark_sim.kernels.decoder.graphs import TOKEN_STEP_ABOVE, TOKEN_TIERS, request_tier
    from dspark_sim.kernels.decoder.step import PREFILL_GRAPH_MIN, PREFILL_GRAPH_TOKENS
    from dspark_sim.kernels.profiler.provenance import provenance, sm_clocks
    from dspark_sim.kernels.profiler.steps import Stepper, run_part

    from dspark_sim.kernels.decoder.launch import check_device

    model_spec(args)  # a bad --model, --layers or --part fails before any GPU work
    check_device(args.device)
    t0 = time.perf_counter()
    old = args.old
    # the earlier file's points, less those of the parts to re-time (draft and chain share
    # the draft section, told apart by kind)
    dropped = {DRAFT_KIND.get(p, SECTION[p]) for p in args.replace}
    out = {s: [] if s in dropped else old.get(s, [])
           for s in ("verify", "draft", "prefill", "step", "kernels", "mixed", "sched", "spread")}
    out["draft"] = [r for r in ({"kind": "block", **r} for r in out["draft"])
                    if r["kind"] not in dropped]
    if "step" in args.replace and not args.eager_steps:  # re-timed with graphs: keep eager rows
        out["step"] = [r for r in old.get("step", []) if r.get("graphs") is False]
    prov = {**provenance(), "gpu_label": args.gpu, "model": args.model, "dtype": args.dtype,
            "weights": "random", "method": args.method, "tp": args.tp_rank, "sm_clocks_before": sm_clocks()}
    dec = build(args)
    if args.tp_rank > 1:
        spec = dec.spec
        prov["tp_rank"] = (f"one rank of tp {args.tp_rank} on one GPU, collectives left out: {spec.num_heads} query heads, "
                           f"{spec.num_kv_heads} KV heads, MLP width {spec.intermediate_size}, "
                           f"{spec.vocab_size} vocabulary rows (LM head and embedding), {spec.num_layers} layers")
    if args.layers:
        spec = dec.spec
        prov.update(slice_layers=spec.num_layers,
                    layer_ratios=list(spec.v4.compress_ratios) if spec.v4 is not None else None)
    if dec.spec.v4 is not None:  # V4's sparse attention streams a request's keys in one program
        prov["attn_max_splits"] = 1
    print(f"profiling {args.model} on {args.gpu}: parts {','.join(args.parts)}", flush=True)
    stepper = Stepper(dec, reps=args.reps, prefill_idle=args.prefill_idle)
    share = getattr(args, "shares", None) or SHARE
    total = sum(share[p] for p in args.parts)
    skipped = {}
    for part in args.parts:
        budget = (args.max_seconds - (time.perf_counter() - t0)) * share[part] / total
        total -= share[part]
        deadline = time.perf_counter() + max(budget, 0.0)
        points, fn, keys, extra = plan(stepper, part, args.eager_steps, args)
        section = SECTION[part]
        done = set() if part in args.add else {_key(part, r) for r in out[section]}
        points = [p for p in points if _key(part, {**extra, **dict(zip(keys, p))}) not in done]
        rows, skip = run_part(points, fn, deadline,
                              lambda p, s: print(part, p, _show(s), flush=True))
        for point, result in rows:
            row = {**extra, **dict(zip(keys, point))}
            row.update(result if isinstance(result, dict) else {"step_s": result})
            out[section].append(row)
        skipped[part] = [list(p) for p in skip]
    limits = [limit for limit, _ in TOKEN_TIERS]
    steps = [step for _, step in TOKEN_TIERS] + [TOKEN_STEP_ABOVE]
    prov.update(sm_clocks_after=sm_clocks(), elapsed_s=round(time.perf_counter() - t0, 1),
                skipped=skipped, kv_capacity_tokens=int(dec.cache.k.shape[1]), reps=args.reps,
                prefill_idle=args.prefill_idle,
                pad_limits=limits, pad_steps=steps,
                prefill_graph_tokens=PREFILL_GRAPH_TOKENS if dec.pad_prefill else 0,
                prefill_graph_min=PREFILL_GRAPH_MIN,
                request_tiers=sorted({request_tier(r, 256) for r in range(1, 257)}),
                note="verify = target forward over the windows + drafter context keys + logits "
                "(one CUDA graph, token count padded to pad_limits/pad_steps tiers, requests to "
                "request_tiers); draft block = DSpark backbone (5 layers) + Markov loop + "
                "confidence head (one CUDA graph); draft chain = one layer run k times (one CUDA "
                "graph); prefill = chunk forward per drafter kind (none, chain, block; rows "
                "without kind: block) as served (a CUDA graph up to 512 tokens, eager above), the chunk "
                "ending its prompt (first token sampled), wall time with host, median (step_s) and 90th "
                "percentile (p90_s) of reps synchronised calls after 3 warm-ups, GC off; step = whole decode steps as served "
                "(step n+1 launched before step n's tokens are read; temperature 1, synthetic "
                "acceptance), time between step ends; kernels = one launch "
                "of schedule_verify (production) or accept, median of replays, inputs rotating; mixed = "
                "verify steps (as verify) over requests of short_context tokens and one of max_context; "
                "sched = the GPU's idle time between decode steps in the serving loop (serve, GC frozen, "
                "steps overlapped) with reqs requests running, median of 12 after 3; spread = verify steps over lognormal "
                "contexts (mean, sigma; context the mean drawn) and uniform_s the same at the mean")
    if old:
        prov["merged_from"] = [old.get("provenance", {})]
    Path(args.out).mkdir(parents=True, exist_ok=True)
    path = Path(args.out) / (f"raw_{args.model}.slice{args.layers}.json" if args.layers else f"raw_{args.model}.json")
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({"provenance": prov, **out}, indent=1))
    tmp.replace(path)
    print(f"wrote {path}: " + ", ".join(f"{len(v)} {k}" for k, v in out.items())
          + f" points in {prov['elapsed_s']} s")
    return 0


def _show(result) -> str:
    if isinstance(result, dict) and "steps" in result:
        return f"{result['step_s'] * 1e3:.3f} ms ({len(result['steps'])} steps)"
    if isinstance(result, dict):
        return f"{result['step_s'] * 1e3:.3f} ms"
    return f"{result * 1e3:.3f} ms"


if __name__ == "__main__":
    sys.exit(main())
