"""``dspark-decode``: serve a trace or a prompt file with the decoder.

    dspark-decode --config dspark.yaml --model qwen3-8b [--checkpoint DIR]
                  [--draft-checkpoint DIR] (--trace FILE | --prompts FILE) --out DIR [--tp N]

Random weights (no ``--checkpoint``) use synthetic acceptance from the config's
acceptance model; real weights use real acceptance. What the run is (weights, acceptance)
is printed at the start and written to ``provenance.json`` beside the record; with random
weights or synthetic acceptance the tokens mean nothing and no ``outputs.jsonl`` is
written. ``--tp N`` runs one process per GPU
(tensor parallel, :mod:`.tp`), or joins the group when ``torchrun --nproc-per-node N``
started it. ``--max-model-len`` defaults to the model's context (its config's
``max_position_embeddings``); a request longer (prompt + output), or longer than the KV cache
holds, is refused with one line naming it and a ``rejected`` row, as the engines refuse it.
Bad input prints one line and exits with code 2; a CUDA error one line naming the step it
met (exit code 1), with nothing written; a rank that fails ends the run with one line and a
nonzero code.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from dspark_sim.errors import ArgumentParser, InputError, run_reporting_errors


def parse_args(argv=None) -> argparse.Namespace:
    p = ArgumentParser(prog="dspark-decode", description=__doc__.split("\n")[0])
    p.add_argument("--config", required=True, help="a scenario file, e.g. the tuner's dspark.yaml")
    p.add_argument("--model", help="model preset, e.g. qwen3-8b (default: the config's)")
    p.add_argument("--checkpoint", help="Hugging Face checkpoint directory (safetensors)")
    p.add_argument("--draft-checkpoint", help="DeepSpec DSpark drafter checkpoint directory")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--trace", help="trace file (azure, mooncake or burstgpt); default: the config's")
    src.add_argument("--prompts", help="JSONL, one {prompt_ids: [...]} or {prompt: text} a line")
    p.add_argument("--out", default="decode_out", help="output directory (requests.csv, steps.csv)")
    p.add_argument("--realtime", action="store_true", help="honour arrival gaps in real time")
    p.add_argument("--synthetic", choices=("auto", "on", "off"), default="auto",
                   help="synthetic acceptance (auto: on for random weights)")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--max-tokens", type=int, default=256, help="prompt-file requests")
    p.add_argument("--max-requests", type=int)
    p.add_argument("--max-model-len", type=int, help="longest request, prompt + output, in tokens "
                   "(default: the model's context from its config, e.g. 40960 for qwen3-8b)")
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"))
    p.add_argument("--kernels", default="triton", choices=("triton", "torch"))
    p.add_argument("--no-graphs", action="store_true", help="run eagerly (no CUDA graphs)")
    p.add_argument("--warmup", choices=("auto", "on", "off"), default="auto",
                   help="compile and capture every step shape before serving (auto: with CUDA graphs)")
    p.add_argument("--tp", type=int, default=1, help="GPUs of the replica, one process each (the "
                   "scenario's deployment.tp must say the same)")
    p.add_argument("--moe-comm", choices=("allreduce", "a2a"), default="allreduce",
                   help="expert-parallel MoE: sum the ranks' experts (allreduce) or dispatch/combine (a2a)")
    p.add_argument("--timeout-s", type=float, default=86400.0, help="stop every rank after this long (--tp > 1)")
    args = p.parse_args(argv)
    if args.tp < 1:
        p.error("--tp must be >= 1")
    return args


MAX_TEMPERATURE = 100.0  # sampling temperatures beyond are a uniform draw in all but name


def main(argv=None) -> int:
    return run_reporting_errors(run, parse_args(argv), program="dspark-decode")


def check_flags(args) -> None:
    """The command line's numbers and paths, each error naming its flag, before anything loads."""
    from dspark_sim.config import check_int, check_real
    from dspark_sim.kernels.decoder.launch import check_device
    from dspark_sim.limits import MAX_REQUESTS, MAX_TOKENS

    check_real(args.temperature, "--temperature", 0, MAX_TEMPERATURE)
    check_int(args.max_tokens, "--max-tokens", 1, MAX_TOKENS)
    check_int(args.max_requests, "--max-requests", 1, MAX_REQUESTS, optional=True)
    check_int(args.max_model_len, "--max-model-len", 64, MAX_TOKENS, optional=True)
    for flag, path, is_dir in (("--config", args.config, False), ("--trace", args.trace, False),
                               ("--prompts", args.prompts, False), ("--checkpoint", args.checkpoint, True),
                               ("--draft-checkpoint", args.draft_checkpoint, True)):
        if path is not None and not (Path(path).is_dir() if is_dir else Path(path).is_file()):
            raise InputError(None, flag, path, f"no such {'directory' if is_dir else 'file'}")
    if Path(args.out).exists() and not Path(args.out).is_dir():
        raise InputError(None, "--out", args.out, "exists and is not a directory")
    check_device(args.device)


def _launch(args):
    """``(launch, spec)``: the scenario read for the decoder, and its model."""
    from dspark_sim.catalog import get_model
    from dspark_sim.kernels.decoder.launch import check_draft_checkpoint, load_launch

    check_flags(args)
    synthetic = args.synthetic == "on" or (args.synthetic == "auto" and not args.checkpoint)
    launch = load_launch(args.config, args.model, args.tp, synthetic=synthetic, device=args.device,
                         dtype=args.dtype, kernels=args.kernels, cuda_graphs=not args.no_graphs,
                         max_model_len=args.max_model_len)
    spec = get_model(launch.scenario.model)
    check_draft_checkpoint(args.draft_checkpoint, launch.conf)
    if args.tp > 1:
        from dspark_sim.kernels.decoder.shard import check_split
        check_split(spec, args.tp, "--tp")
    return launch, spec


def run(args) -> int:
    if args.tp == 1:
        return serve_rank(None, args)
    from dspark_sim.kernels.decoder.tp import RankFailed, context_from_env, run_ranks

    kind = "cuda" if args.device.startswith("cuda") else "cpu"
    ctx = context_from_env(kind, args.moe_comm)
    if ctx is not None:  # torchrun started this process as one rank
        if ctx.world != args.tp:
            raise InputError("torchrun", "--nproc-per-node", ctx.world, f"must equal --tp {args.tp}")
        return serve_rank(ctx, args)
    _launch(args)  # bad input ends here, before any process starts
    try:
        return run_ranks(args.tp, serve_rank, (args,), device_kind=kind, timeout_s=args.timeout_s,
                         moe_comm=args.moe_comm)
    except RankFailed as err:
        print(f"dspark-decode: {err}", file=sys.stderr)
        return err.code


def serve_rank(ctx, args) -> int:
    """Serve on one GPU (``ctx`` None) or as one rank of a tensor-parallel group: rank 0 runs
    the serving loop and writes the outputs, the others follow it (:mod:`.ranks`)."""
    from dspark_sim.kernels.decoder.engine import serve, write_csvs
    from dspark_sim.kernels.decoder.faults import device_faults
    from dspark_sim.kernels.decoder.launch import build_decoder, prompt_sequences, trace_sequences
    from dspark_sim.metrics.outdir import atomic_dir
    from dspark_sim.metrics.record import write_provenance

    launch, spec = _launch(args)
    synthetic = args.synthetic == "on" or (args.synthetic == "auto" and not args.checkpoint)
    meta = run_provenance(args, launch, synthetic)
    if ctx is None or ctx.leader:
        print(f"dspark-decode: {meta['summary']}", flush=True)
    if args.prompts:  # the requests are read before the model is built: bad input fails fast
        seqs = prompt_sequences(launch, args.prompts, max_tokens=args.max_tokens, max_requests=args.max_requests,
                                temperature=args.temperature, vocab_size=spec.vocab_size)
    else:
        seqs = trace_sequences(launch, spec.vocab_size, trace=args.trace, max_requests=args.max_requests,
                               temperature=args.temperature)
    if ctx is not None:
        from dataclasses import replace

        import torch

        from dspark_sim.kernels.decoder.ranks import Leader, follow
        torch.manual_seed(launch.conf.seed)  # the same random streams on every rank
        launch = replace(launch, conf=replace(launch.conf, device=ctx.device))
    with device_faults("building the decoder"):
        decoder = build_decoder(spec, launch, args.checkpoint, args.draft_checkpoint,
                                shard=ctx.shard if ctx is not None else None)
    if ctx is not None and not ctx.leader:
        follow(decoder, ctx.control)
        return 0
    if ctx is not None:
        decoder = Leader(decoder, ctx.control)
    if args.warmup == "on" or (args.warmup == "auto" and decoder.graphs.enabled):
        with device_faults("warming up (compiling and capturing every step shape)"):
            w = decoder.warmup()
        print(f"warm-up: {w['verify_points']} verify shapes, {w['prefill_steps']} prefill shapes, "
              f"{w['graphs']} CUDA graphs", flush=True)
    result = serve(decoder, seqs, realtime=args.realtime)  # a GPU fault ends it: one line, exit 1
    if ctx is not None:
        decoder.stop()
    for line in result.refused:
        print(f"dspark-decode: {line}", file=sys.stderr)
    with atomic_dir(args.out) as tmp:
        write_csvs(result, tmp)
        write_provenance(tmp, meta)
        if args.prompts and meta["outputs_meaningful"]:
            with open(tmp / "outputs.jsonl", "w") as f:
                for s in seqs:
                    f.write(json.dumps({"request_id": s.id, "output_ids": s.outputs}) + "\n")
    if args.prompts and not meta["outputs_meaningful"]:
        print("outputs.jsonl not written: random weights or synthetic acceptance make the tokens meaningless")
    served = [r for r in result.requests if r.get("status", "completed") == "completed"]
    tokens = sum(r["output_tokens"] for r in served)
    span = max((r["finish_s"] for r in served), default=0.0)
    print(f"{len(served)} requests, {tokens} tokens in {span:.2f} s ({tokens / max(span, 1e-9):.1f} tok/s)"
          + (f", {len(result.refused)} refused" if result.refused else "")
          + f"; wrote {args.out}/requests.csv, steps.csv")
    return 0


def run_provenance(args, launch, synthetic: bool) -> dict:
    """What a ``dspark-decode`` run is: its weights, its acceptance (real, or synthetic from the
    simulator's model, with the preset it draws from), and a one-line summary printed at start."""
    from dspark_sim.provenance import acceptance_block

    weights = f"checkpoint {args.checkpoint}" if args.checkpoint else "random (no --checkpoint)"
    drafter = f"checkpoint {args.draft_checkpoint}" if args.draft_checkpoint else "random (no --draft-checkpoint)"
    scenario = launch.scenario
    if synthetic:
        drawn = acceptance_block(scenario.speculation, scenario.model)
        acc = {**drawn, "kind": "synthetic", "preset_kind": drawn["kind"]}
        acc_text = f"synthetic acceptance drawn from the simulator's model ({acc['detail']})"
    else:
        acc = {"kind": "real", "detail": "the target's verification of the drafter's tokens"}
        acc_text = "real acceptance"
    meaningful = bool(args.checkpoint) and not synthetic
    summary = (f"target weights {weights}; drafter weights {drafter}; {acc_text}; "
               + ("step times and tokens are real" if meaningful else
                  "step times are real, tokens and accept lengths are not a model's"))
    return {"kind": "decoder", "model": scenario.model, "weights": weights, "drafter_weights": drafter,
            "acceptance": acc, "temperature": args.temperature, "outputs_meaningful": meaningful,
            "summary": summary}


if __name__ == "__main__":
    sys.exit(main())
