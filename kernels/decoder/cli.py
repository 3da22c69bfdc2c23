"""``dspark-decode``: serve a trace or a prompt file with the decoder.

    dspark-decode --config dspark.yaml --model qwen3-8b [--checkpoint DIR]
                  [--draft-checkpoint DIR] (--trace FILE | --prompts FILE) --out DIR

Random weights (no ``--checkpoint``) use synthetic acceptance from the config's
acceptance model; real weights use real acceptance. What the run is (weights, acceptance)
is printed at the start and written to ``provenance.json`` beside the record; with random
weights or synthetic acceptance the tokens mean nothing and no ``outputs.jsonl`` is
written. Bad input prints one line and exits with code 2.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from dspark_sim.errors import InputError


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="dspark-decode", description=__doc__.split("\n")[0])
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
    p.add_argument("--max-model-len", type=int, default=16384)
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"))
    p.add_argument("--kernels", default="triton", choices=("triton", "torch"))
    p.add_argument("--no-graphs", action="store_true", help="run eagerly (no CUDA graphs)")
    p.add_argument("--warmup", choices=("auto", "on", "off"), default="auto",
                   help="compile and capture every step shape before serving (auto: with CUDA graphs)")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        return run(args)
    except InputError as err:
        print(f"dspark-decode: {err}", file=sys.stderr)
        return 2


def run(args) -> int:
    from dspark_sim.catalog import get_model
    from dspark_sim.kernels.decoder.engine import serve, write_csvs
    from dspark_sim.metrics.outdir import atomic_write_text
    from dspark_sim.metrics.record import write_provenance
    from dspark_sim.kernels.decoder.launch import (build_decoder, check_draft_checkpoint, load_launch,
                                                   prompt_sequences, trace_sequences)

    synthetic = args.synthetic == "on" or (args.synthetic == "auto" and not args.checkpoint)
    launch = load_launch(args.config, args.model, synthetic=synthetic, device=args.device,
                         dtype=args.dtype, kernels=args.kernels, cuda_graphs=not args.no_graphs,
                         max_model_len=args.max_model_len)
    spec = get_model(launch.scenario.model)
    check_draft_checkpoint(args.draft_checkpoint, launch.conf)
    meta = run_provenance(args, launch, synthetic)
    print(f"dspark-decode: {meta['summary']}", flush=True)
    decoder = build_decoder(spec, launch, args.checkpoint, args.draft_checkpoint)
    if args.warmup == "on" or (args.warmup == "auto" and decoder.graphs.enabled):
        w = decoder.warmup()
        print(f"warm-up: {w['verify_points']} verify shapes, {w['prefill_steps']} prefill shapes, "
              f"{w['graphs']} CUDA graphs", flush=True)
    if args.prompts:
        seqs = prompt_sequences(launch, args.prompts, max_tokens=args.max_tokens, max_requests=args.max_requests,
                                temperature=args.temperature)
    else:
        seqs = trace_sequences(launch, spec.vocab_size, trace=args.trace, max_requests=args.max_requests,
                               temperature=args.temperature)
    result = serve(decoder, seqs, realtime=args.realtime)
    write_csvs(result, args.out)
    write_provenance(args.out, meta)
    if args.prompts and meta["outputs_meaningful"]:
        atomic_write_text(Path(args.out) / "outputs.jsonl", "".join(
            json.dumps({"request_id": s.id, "output_ids": s.outputs}) + "\n" for s in seqs))
    elif args.prompts:
        print("outputs.jsonl not written: random weights or synthetic acceptance make the tokens meaningless")
    tokens = sum(r["output_tokens"] for r in result.requests)
    span = max((r["finish_s"] for r in result.requests), default=0.0)
    print(f"{len(result.requests)} requests, {tokens} tokens in {span:.2f} s "
          f"({tokens / max(span, 1e-9):.1f} tok/s); wrote {args.out}/requests.csv, steps.csv")
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
