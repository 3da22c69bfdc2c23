"""Long prompts on the GPU: single prompts from 1,000 tokens to the model's whole context, alone
and among other requests, served by a Qwen3-8B-shaped decoder (random bf16 weights, no
speculation) with and without CUDA graphs, ``prefill_first`` and ``mixed``; every request's
greedy output checked against target-only greedy.

The reference runs each served sequence through the target in one eager forward (one request,
no chunks, no pages of an earlier step, no graphs, no ``accept``): a served output is
target-only greedy when every token is the argmax of the reference's logits at its position
(teacher forcing: one forward checks all of them). With bf16 weights two logits can lie within
rounding of each other; a first divergence where the served token's reference logit is within
:data:`TIE` of the maximum is reported as a near tie and passes, anything else fails.
``tiny``: the same runs on the CPU (Triton interpreter, a tiny fp32 model, lengths scaled down
to a 256-token context), to check the section itself.

    python benchmarks/gpu_check.py --only long [--long-seconds S] [--tiny] --out FILE
"""
from __future__ import annotations

import time
from dataclasses import replace

import numpy as np

LENGTHS = (1000, 0, 9000, 32768, 16384, 8192)  # 0: the model's whole context less the output; cheap first
TINY_LENGTHS = (10, 0, 36, 128, 64, 32)  # the same shapes at a 256-token context and 32-token chunks
OUTPUT = 4
OTHERS = ((96, 24), (300, 24), (1200, 24))  # (prompt, output) of the requests a long prompt serves among
TINY_OTHERS = ((5, 6), (9, 6), (20, 6))
RUNS = (("alone", True, "prefill_first"), ("alone", True, "mixed"), ("alone", False, "prefill_first"),
        ("among others", True, "mixed"), ("among others", False, "prefill_first"))
TIE = 0.1  # logits (bf16 random Qwen3-8B: about 1.3 standard deviation) this close are a near tie


def build(tiny: bool):
    """The decoder every run shares (its variants switch graphs and batching)."""
    if tiny:
        from dspark_sim.kernels.decoder.tiny import tiny_decoder

        return tiny_decoder("none", agreeable=False, kernels="triton", max_model_len=256,
                            max_batched_tokens=32, max_running_requests=4, kv_tokens=1024)
    from dspark_sim.catalog import get_model
    from dspark_sim.kernels.decoder import Decoder, DecoderConfig

    spec = get_model("qwen3-8b")
    conf = DecoderConfig(method="none", max_running_requests=8, max_batched_tokens=8192,
                         max_model_len=spec.max_context, kv_tokens=spec.max_context + 16384,
                         kernels="triton", attention="triton", cuda_graphs=True, dtype="bfloat16", device="cuda")
    return Decoder(spec, conf)


def reference_check(dec, prompt: list[int], outputs: list[int]) -> dict:
    """``{"equal": served == target-only greedy, "divergence": None or where and by how much}``:
    one eager forward over ``prompt + outputs[:-1]``, its last rows' argmax against ``outputs``."""
    logits = dec.score(list(prompt) + list(outputs[:-1]), last=len(outputs)).float()
    top = logits.argmax(-1).tolist()
    for i, (want, got) in enumerate(zip(top, outputs)):
        if want != got:
            row = logits[i]
            margin = float(row[want] - row[got])
            second = float(row.topk(2).values[1])
            return {"equal": False, "divergence": {"index": i, "reference": want, "served": got,
                                                   "margin": round(margin, 4),
                                                   "top2_gap": round(float(row[want]) - second, 4),
                                                   "near_tie": margin <= TIE}}
    return {"equal": True, "divergence": None}


def long_prompt_cases(tiny: bool = False, seconds: float = 120.0, lengths: tuple | None = None) -> list[dict]:
    """One row per (prompt length, run): served alone or among :data:`OTHERS`, with or without
    CUDA graphs, ``prefill_first`` or ``mixed``; ``ok`` when every request's output is target-only
    greedy (or first departs from it at a near tie). Runs past ``seconds`` are skipped (listed).
    ``lengths``: prompt lengths instead of :data:`LENGTHS` (0: the whole context less the output)."""
    from dspark_sim.errors import DeviceFault
    from dspark_sim.kernels.decoder.engine import serve
    from dspark_sim.kernels.decoder.faults import is_device_error
    from dspark_sim.kernels.decoder.sequence import Sequence

    t0 = time.perf_counter()
    dec = build(tiny)
    conf, rng = dec.conf, np.random.default_rng(0)
    vocab = dec.spec.vocab_size
    others = [rng.integers(0, vocab, p).tolist() for p, _ in (TINY_OTHERS if tiny else OTHERS)]
    other_out = [o for _, o in (TINY_OTHERS if tiny else OTHERS)]
    rows, checked, dead = [], {}, None
    for length in lengths or (TINY_LENGTHS if tiny else LENGTHS):
        n = length or conf.max_model_len - OUTPUT
        prompt = rng.integers(0, vocab, n).tolist()
        for where, graphs, batching in RUNS:
            case = f"long prompt {n} {where}, graphs={graphs}, {batching}"
            if dead or time.perf_counter() - t0 > seconds:
                rows.append({"case": case, "ok": False, "skipped": dead or f"past the section's {seconds:.0f} s"})
                continue
            run = dec.variant(replace(conf, cuda_graphs=graphs, batching=batching), None)
            seqs = ([Sequence(i, p, o) for i, (p, o) in enumerate(zip(others, other_out))]
                    if where != "alone" else [])
            seqs.append(Sequence(len(seqs), prompt, OUTPUT))
            started = time.perf_counter()
            try:
                steps = serve(run, seqs).steps
                dec.sync()
            except Exception as err:  # a fault ends the section: after a CUDA error the context is gone
                if not (isinstance(err, DeviceFault) or is_device_error(err)):
                    raise
                dead = f"{type(err).__name__}: {str(err).splitlines()[0]}"
                rows.append({"case": case, "ok": False, "error": dead})
                continue
            wall = time.perf_counter() - started
            checks = []
            for s in seqs:  # each distinct (prompt, output) scored once: runs that agree share it
                key = (n if s is seqs[-1] else -1 - s.id, tuple(s.outputs))
                if key not in checked:
                    checked[key] = reference_check(dec, s.tokens[:s.prompt_len], s.outputs)
                checks.append(checked[key])
            long_check = checks[-1]
            ok = all(len(s.outputs) == s.max_tokens for s in seqs) and all(
                c["equal"] or c["divergence"]["near_tie"] for c in checks)
            rows.append({"case": case, "ok": ok, "model": dec.spec.name, "dtype": conf.dtype,
                         "max_batched_tokens": conf.max_batched_tokens, "prompt_tokens": n, "output_tokens": OUTPUT,
                         "requests": len(seqs), "outputs_equal": all(c["equal"] for c in checks),
                         "long_outputs_equal": long_check["equal"], "divergence": long_check["divergence"],
                         "others_divergences": [c["divergence"] for c in checks[:-1] if c["divergence"]],
                         "steps": len(steps), "prefill_steps": sum(1 for r in steps if r["prefill_tokens"]),
                         "wall_s": round(wall, 3)})
            print(f"{case}: ok={ok} in {wall:.1f} s ({len(steps)} steps)", flush=True)
    return rows


JSON = "profiles/h200/decoder_long_check.json"


def block_text(data: dict | None) -> str:
    """docs/decoder.md's long-prompt block from the check's file (None: not run on a GPU yet)."""
    if data is None:
        return (f"Not run on a GPU yet: `bash benchmarks/h200_long_visit.sh check` writes `gpu_check_long.json`, "
                f"kept as `{JSON}`.")
    p, rows = data["provenance"], data["rows"]
    run = next((r for r in rows if "model" in r), {})
    lines = [f"Measured {p['date']} on {p['gpu']} (GPU {p.get('gpu_uuid')}; driver {p.get('driver')}, CUDA "
             f"{p.get('cuda')}, torch {p['torch']}, triton {p['triton']}; decoder {p.get('decoder_commit')}); "
             f"{run.get('model')} shape, random {run.get('dtype')} weights, no speculation, {OUTPUT} output tokens "
             f"a long prompt, max_batched_tokens {run.get('max_batched_tokens')}. Made by "
             f"`python benchmarks/gpu_check.py --only long` (`{JSON}`). "
             f"ok: every request's output is target-only greedy, or first departs from it where the reference's "
             f"two best logits lie within {TIE} (a near tie, bf16 rounding).", "",
             "| prompt tokens | served | CUDA graphs | batching | ok | outputs equal | first divergence "
             "(margin) | steps | wall s |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "prompt_tokens" not in r:
            lines.append(f"| {r['case']} | | | | no | | {r.get('skipped') or r.get('error')} | | |")
            continue
        where, graphs, batching = r["case"].split(" ", 3)[3].rsplit(", ", 2)
        d = r["divergence"]
        first = "-" if d is None else f"token {d['index']} ({d['margin']:.3f})"
        lines.append(f"| {r['prompt_tokens']:,} | {where} | {graphs.split('=')[1]} | {batching} | "
                     f"{'yes' if r['ok'] else 'no'} | {'yes' if r['outputs_equal'] else 'no'} | {first} | "
                     f"{r['steps']} | {r['wall_s']:.1f} |")
    return "\n".join(lines)
