"""``dspark-decode``: serve a trace or a prompt file with the decoder.

    dspark-decode --config dspark.yaml --model qwen3-8b [--checkpoint DIR]
                  [--draft-checkpoint DIR] (--trace FILE | --prompts FILE) --out DIR

Random weights (no ``--checkpoint``) use synthetic acceptance from the config's
acceptance model; real weights use real acceptance. Bad input prints one line
and exits with code 2.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from dspark_sim.errors import InputError


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="dspark-decode", description=__doc__.split("\n")[0])
    p.add_argument("--config", required=True, help="the tuner's dspark.yaml (a scenario file)")
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
    from dspark_sim.kernels.decoder.settings import load_settings

    synthetic = args.synthetic == "on" or (args.synthetic == "auto" and not args.checkpoint)
    st = load_settings(args.config, args.model, synthetic=synthetic, device=args.device,
                       dtype=args.dtype, kernels=args.kernels, cuda_graphs=not args.no_graphs,
                       max_model_len=args.max_model_len)
    spec = get_model(st.model)
    _check_draft_checkpoint(args.draft_checkpoint, st.decoder)
    decoder = _build(spec, st, args)
    if args.warmup == "on" or (args.warmup == "auto" and decoder.graphs.enabled):
        w = decoder.warmup()
        print(f"warm-up: {w['verify_points']} verify shapes, {w['prefill_steps']} prefill shapes, "
              f"{w['graphs']} CUDA graphs", flush=True)
    seqs = _requests(args, st, spec, decoder)
    from dspark_sim.kernels.decoder.engine import serve, write_csvs

    result = serve(decoder, seqs, realtime=args.realtime)
    write_csvs(result, args.out)
    if args.prompts:
        with open(Path(args.out) / "outputs.jsonl", "w") as f:
            for s in seqs:
                f.write(json.dumps({"request_id": s.id, "output_ids": s.outputs}) + "\n")
    tokens = sum(r["output_tokens"] for r in result.requests)
    span = max((r["finish_s"] for r in result.requests), default=0.0)
    print(f"{len(result.requests)} requests, {tokens} tokens in {span:.2f} s "
          f"({tokens / max(span, 1e-9):.1f} tok/s); wrote {args.out}/requests.csv, steps.csv")
    return 0


def _check_draft_checkpoint(directory, conf) -> None:
    if not directory:
        return
    cfg_path = Path(directory) / "config.json"
    if cfg_path.exists():
        cfg = json.loads(cfg_path.read_text())
        if "block_size" in cfg and cfg["block_size"] != conf.block_size:
            raise InputError(conf.source, "speculation.block_size", conf.block_size,
                             f"the drafter checkpoint was trained with block_size {cfg['block_size']}")


def _build(spec, st, args):
    from dspark_sim.kernels.decoder.decoder import Decoder
    from dspark_sim.kernels.sps_tensors import sps_from_json_dict

    if st.decoder.max_model_len < 64:
        raise InputError(None, "--max-model-len", st.decoder.max_model_len, "must be >= 64")
    sps = sps_from_json_dict(st.sps) if st.sps is not None else None
    return Decoder(spec, st.decoder, sps=sps, checkpoint=args.checkpoint,
                   draft_checkpoint=args.draft_checkpoint, acceptance=st.acceptance)


def _requests(args, st, spec, decoder) -> list:
    from dspark_sim.kernels.decoder.sequence import Sequence

    rng = np.random.default_rng(st.decoder.seed)
    names = [d for d, _ in st.domains]
    weights = np.array([w for _, w in st.domains])
    from dspark_sim.names import DOMAINS as domains
    limit = st.decoder.max_model_len - st.decoder.window - 1
    seqs = []
    if args.prompts:
        for i, line in enumerate(Path(args.prompts).read_text().splitlines()):
            if not line.strip():
                continue
            item = json.loads(line)
            ids = item.get("prompt_ids")
            if ids is None:
                raise InputError(args.prompts, f"line {i + 1}", None, "needs prompt_ids (token ids)")
            dom = domains.index(names[rng.choice(len(names), p=weights)])
            seqs.append(Sequence(len(seqs), list(ids)[-limit:], int(item.get("max_tokens", args.max_tokens)),
                                 args.temperature, dom))
        return seqs[:args.max_requests] if args.max_requests else seqs
    from dspark_sim.workload import read_trace

    trace = args.trace or st.trace
    if trace is None:
        raise InputError(args.config, "workload.trace", None, "no trace: give --trace or --prompts")
    max_req = args.max_requests or st.max_requests
    for chunk in read_trace(trace, fmt=st.trace_format, time_scale=st.time_scale, max_requests=max_req):
        for a, p, o in zip(chunk.arrival_s.tolist(), chunk.prompt_tokens.tolist(),
                           chunk.output_tokens.tolist()):
            out = int(min(o, limit - 1))
            prompt = rng.integers(0, spec.vocab_size, size=max(1, min(p, limit - out))).tolist()
            dom = domains.index(names[rng.choice(len(names), p=weights)])
            seqs.append(Sequence(len(seqs), prompt, out, args.temperature, dom, arrival_s=a))
    return seqs


if __name__ == "__main__":
    sys.exit(main())
