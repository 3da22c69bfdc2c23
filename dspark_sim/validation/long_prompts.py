"""Long prompts on the GPU: single prompts from 1,000 tokens to the model's whole context, alone
and among other requests, served by a Qwen3-8B-shaped decoder (random bf16 weights, no
speculation) with and without CUDA graphs, ``prefill_first`` and ``mixed``; every request's
greedy output checked against target-only greedy.

The reference runs each served sequence through the target in one eager forward (one request,
no chunks, no graphs, no ``accept``): a served output is target-only greedy when every token is
the argmax of the reference's logits at its position (teacher forcing: one forward checks all of
them, and each position on its own). With bf16 weights valid computations of the same logits
round differently (the best two of 151,936 random logits often lie a few bf16 steps apart), so a
served token may be another logit within rounding of the best. How far is measured, not assumed: the same positions are computed two more ways with the same kernels, the
prompt in chunks of ``max_batched_tokens`` and then one token a forward (as the server steps a
request alone), and, for a request served among others, packed in one forward with the run's
other requests and the long prompt's first chunk (as a first prefill step holds them), and all
of the run's requests stepped together as the run's batching steps them (decode rows beside the
long prompt's chunks, or after them). The noise
at a position is the largest difference among the top logits between these and the reference;
a served token that is not the reference's best passes (a near tie) when the reference's margin
is at most :data:`FACTOR` times the noise there. Every departure is recorded with its margin and
noise, and every checked position with its noise.
``tiny``: the same runs on the CPU (Triton interpreter, a tiny fp32 model, lengths scaled down
to a 256-token context), to check the section itself.

    python benchmarks/gpu_check.py --only long [--long-seconds S] [--tiny] --out FILE
"""
from __future__ import annotations

import time

import numpy as np

LENGTHS = (1000, 0, 9000, 32768, 16384, 8192)  # 0: the model's whole context less the output; cheap first
TINY_LENGTHS = (10, 0, 36, 128, 64, 32)  # the same shapes at a 256-token context and 32-token chunks
OUTPUT = 4
OTHERS = ((96, 24), (300, 24), (1200, 24))  # (prompt, output) of the requests a long prompt serves among
TINY_OTHERS = ((5, 6), (9, 6), (20, 6))
RUNS = (("alone", True, "prefill_first"), ("alone", True, "mixed"), ("alone", False, "prefill_first"),
        ("among others", True, "mixed"), ("among others", False, "prefill_first"))
TOP = 8  # the logits whose noise is measured at a position: each computation's best 8 and the served token's
# A margin is the difference of two logits, each of which valid computations moved by up to the
# noise: they can swap when the margin is at most twice it.
FACTOR = 2.0


def build(tiny: bool):
    """The decoder every run shares (its variants switch graphs and batching)."""
    if tiny:
        from dspark_sim.kernels.decoder.tiny import tiny_decoder

        return tiny_decoder("none", agreeable=False, kernels="triton", max_model_len=256,
                            max_batched_tokens=32, max_running_requests=4, kv_tokens=1024)
    from dspark_sim.catalog import get_model
    from dspark_sim.kernels.decoder import Decoder, DecoderConfig

    spec = get_model("qwen3-8b")
    conf = DecoderConfig.of(method="none", max_running_requests=8, max_batched_tokens=8192, batching="prefill_first",
                            prefix_cache=False, max_model_len=spec.max_context, kv_tokens=spec.max_context + 16384,
                            kernels="triton", attention="triton", cuda_graphs=True, dtype="bfloat16", device="cuda")
    return Decoder(spec, conf)


def judge(ref, alts: list, served: list[int]) -> dict:
    """Served tokens against the whole-sequence reference, within its measured noise.

    ``ref``: fp32 logits ``[O, V]`` of the whole-sequence forward at the ``O`` checked positions;
    ``alts``: the same positions computed other valid ways (each ``[O, V]``); ``served``: the
    ``O`` served tokens. The noise at a position is the largest ``|alt - ref|`` over the top
    logits (each computation's :data:`TOP` best and the served token). A position where the
    served token is not the reference's argmax is a near tie when the reference's margin (its
    best logit less the served token's) is at most :data:`FACTOR` times that noise."""
    import torch

    tokens = torch.tensor(served, dtype=torch.long, device=ref.device)
    top = torch.cat([x.topk(TOP, dim=-1).indices for x in [ref, *alts]] + [tokens[:, None]], dim=1)
    base = ref.gather(1, top)
    noise = (torch.stack([(a.gather(1, top) - base).abs().amax(1) for a in alts]).amax(0) if alts
             else torch.zeros(len(served), device=ref.device))
    best = ref.argmax(-1)
    departures = []
    for i in (best != tokens).nonzero().flatten().tolist():
        w, g = int(best[i]), served[i]
        margin = float(ref[i, w] - ref[i, g])
        departures.append({"index": i, "reference": w, "served": g, "margin": _sig(margin),
                           "top2_gap": _sig(ref[i, w] - ref[i].topk(2).values[1]), "noise": _sig(noise[i]),
                           "alt_margins": [_sig(a[i, w] - a[i, g]) for a in alts],
                           "near_tie": margin <= FACTOR * float(noise[i])})
    return {"equal": not departures, "noise": [_sig(x) for x in noise], "divergences": departures}


def _sig(x) -> float:
    """Four significant figures (bf16 logit steps and fp32 rounding alike)."""
    return float(f"{float(x):.4g}")


def reference_logits(dec, prompt: list[int], outputs: list[int]) -> tuple:
    """``(whole, chunked)``: fp32 logits ``[O, V]`` at the positions that chose ``outputs``, from
    one eager forward of ``prompt + outputs[:-1]`` and from the prompt in chunks of
    ``max_batched_tokens`` then one token a forward (as the server steps a request alone)."""
    from dspark_sim.kernels.decoder.scoring import chunked, score_steps, whole

    tokens = list(prompt) + list(outputs[:-1])
    n, at = len(tokens), [range(len(prompt) - 1, len(tokens))]
    return (score_steps(dec, [tokens], whole(n), at)[0],
            score_steps(dec, [tokens], chunked(n, len(prompt), dec.conf.max_batched_tokens), at)[0])


def packed_logits(dec, seqs: list, fill: list[int]) -> list:
    """fp32 logits ``[O, V]`` of each of ``seqs`` at its checked positions from one eager forward
    of all of them whole, beside the first tokens of ``fill`` up to ``max_batched_tokens`` in all
    (a server's first prefill step holds the others' prompts and the long prompt's first chunk)."""
    from dspark_sim.kernels.decoder.scoring import packed, score_steps

    tokens = [s.tokens[:s.prompt_len] + s.outputs[:-1] for s in seqs]
    room = dec.conf.max_batched_tokens - sum(map(len, tokens))
    tokens += [fill[:room]] if room > 0 else []
    at = [range(s.prompt_len - 1, len(t)) for s, t in zip(seqs, tokens)] + [range(0)] * (len(tokens) - len(seqs))
    return score_steps(dec, tokens, packed([len(t) for t in tokens]), at)[:len(seqs)]


def interleaved_logits(dec, seqs: list, batching: str) -> list:
    """fp32 logits ``[O, V]`` of each of ``seqs`` at its checked positions, the sequences stepped
    together as ``batching`` serves them (:func:`~dspark_sim.kernels.decoder.scoring.interleaved`:
    decode rows beside prompt chunks, or after them, ``max_batched_tokens`` a forward)."""
    from dspark_sim.kernels.decoder.scoring import interleaved, score_steps

    tokens = [s.tokens[:s.prompt_len] + s.outputs[:-1] for s in seqs]
    plan = interleaved([len(t) for t in tokens], [s.prompt_len for s in seqs], dec.conf.max_batched_tokens,
                       prefill_first=batching == "prefill_first")
    return score_steps(dec, tokens, plan, [range(s.prompt_len - 1, len(t)) for s, t in zip(seqs, tokens)])


def check_run(dec, seqs: list, refs: dict, batching: str = "mixed") -> list[dict]:
    """One record a request of a served run (the long prompt last): its outputs judged against
    the whole-sequence reference within the noise of the chunked computation and, for requests
    served among others, of the packed one and of all of them stepped together as the run's
    ``batching`` steps them. ``refs``: ``(whole, chunked)`` kept by sequence."""
    packs = packed_logits(dec, seqs[:-1], seqs[-1].tokens[:seqs[-1].prompt_len]) if len(seqs) > 1 else []
    together = interleaved_logits(dec, seqs, batching) if len(seqs) > 1 else []
    records = []
    for i, s in enumerate(seqs):
        key = (tuple(s.tokens[:s.prompt_len]), tuple(s.outputs))
        if key not in refs:
            refs[key] = reference_logits(dec, s.tokens[:s.prompt_len], s.outputs)
        ref, chunk = refs[key]
        verdict = judge(ref, [chunk] + packs[i:i + 1] + together[i:i + 1], s.outputs)
        records.append({"request": s.id, "prompt_tokens": s.prompt_len, "output_tokens": len(s.outputs),
                        "complete": len(s.outputs) == s.max_tokens, **verdict})
    return records


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
    rows, refs, dead = [], {}, None
    for length in lengths or (TINY_LENGTHS if tiny else LENGTHS):
        n = length or conf.max_model_len - OUTPUT
        prompt = rng.integers(0, vocab, n).tolist()
        for where, graphs, batching in RUNS:
            case = f"long prompt {n} {where}, graphs={graphs}, {batching}"
            if dead or time.perf_counter() - t0 > seconds:
                rows.append({"case": case, "ok": False, "skipped": dead or f"past the section's {seconds:.0f} s"})
                continue
            run = dec.variant(conf.replaced(cuda_graphs=graphs, batching=batching), None)
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
            records = check_run(dec, seqs, refs, batching)
            ok = all(r["complete"] and all(d["near_tie"] for d in r["divergences"]) for r in records)
            rows.append({"case": case, "ok": ok, "model": dec.spec.name, "dtype": conf.dtype,
                         "max_batched_tokens": conf.max_batched_tokens, "prompt_tokens": n, "output_tokens": OUTPUT,
                         "requests": len(seqs), "outputs_equal": all(r["equal"] for r in records),
                         "long_outputs_equal": records[-1]["equal"], "steps": len(steps),
                         "prefill_steps": sum(1 for r in steps if r["prefill_tokens"]), "wall_s": round(wall, 3),
                         "check_s": round(time.perf_counter() - started - wall, 3), "sequences": records})
            print(f"{case}: ok={ok} in {wall:.1f} s ({len(steps)} steps), checked in {rows[-1]['check_s']:.1f} s",
                  flush=True)
    return rows


JSON = "profiles/h200/decoder_long_check.json"


LEGACY_TIE = 0.1  # the fixed near-tie threshold (logits) of files made before the noise was measured


def departures(row: dict, long: bool | None = None) -> list[dict]:
    """Every recorded departure of a run from the reference (files before the measured noise
    hold each request's first one only, and no noise); ``long``: only the long prompt's (True)
    or only the other requests' (False)."""
    if "sequences" in row:
        seqs = row["sequences"]
        parts = [s["divergences"] for s in (seqs[-1:] if long else seqs[:-1] if long is False else seqs)]
    else:
        parts = [[row.get("divergence")] if long is not False else [],
                 row.get("others_divergences", []) if not long else []]
    return [d for part in parts for d in part if d]


def summary(rows: list[dict]) -> str:
    """One paragraph of what the rows show (counts and the extremes, from the file)."""
    runs = [r for r in rows if "prompt_tokens" in r]
    bad = [r for r in rows if not r["ok"]]
    kinds: dict[str, int] = {}
    for r in bad:
        kind = r["case"].split(" ", 3)[3]
        kinds[kind] = kinds.get(kind, 0) + 1
    deps = [d for r in runs for d in departures(r)]
    text = (f"{sum(r['ok'] for r in rows)}/{len(rows)} runs ok; {len(rows) - len(runs)} not "
            f"served (skipped or faulted). The long prompt's own output equals target-only greedy in "
            f"{sum(r['long_outputs_equal'] for r in runs)}/{len(runs)} runs. Departures recorded: {len(deps)} "
            f"({sum(len(departures(r, long=True)) for r in runs)} in the long prompt's output, "
            f"{sum(len(departures(r, long=False)) for r in runs)} in the other requests'), "
            f"{sum(d['near_tie'] for d in deps)} of them near ties by this file's criterion")
    if deps:
        text += (f"; reference margins at them {min(d['margin'] for d in deps):.3f}-{max(d['margin'] for d in deps):.3f} "
                 f"(top-2 gaps {min(d['top2_gap'] for d in deps):.3f}-{max(d['top2_gap'] for d in deps):.3f})")
    noise = [x for r in runs for s in r.get("sequences", []) for x in s["noise"]]
    if noise:
        text += (f". Noise at the {len(noise):,} checked positions: median {float(np.median(noise)):.4f}, "
                 f"max {max(noise):.4f}")
    text += "." if not bad else (". Not ok: " + ", ".join(f"{k} ({v})" for k, v in kinds.items()) + ".")
    return text


def _criterion(rows: list[dict]) -> str:
    if any("sequences" in r for r in rows):
        return (f"ok: every request's output is target-only greedy at every position, or departs from it only "
                f"where the reference's margin (its best logit less the served token's) is at most {FACTOR:g} x "
                f"the noise measured there: the largest difference among the top logits between the "
                f"whole-sequence forward and the same positions computed chunked as served alone and packed with "
                f"the run's other requests (same kernels).")
    return (f"These rows predate the measured noise: ok meant every request's output is target-only greedy or "
            f"first departs from it where the reference's margin is at most {LEGACY_TIE} logits, a fixed "
            f"threshold; each request's first departure is recorded, no noise (the check now measures it: "
            f"`bash benchmarks/h200_long_visit.sh check`).")


def _num(x) -> str:
    return "not measured" if x is None else f"{x:.3f}"


def block_text(data: dict | None) -> str:
    """docs/decoder.md's long-prompt block from the check's file (None: not run on a GPU yet)."""
    if data is None:
        return (f"Not run on a GPU yet: `bash benchmarks/h200_long_visit.sh check` writes `gpu_check_long.json`, "
                f"kept as `{JSON}`.")
    p, rows = data["provenance"], data["rows"]
    run = next((r for r in rows if "model" in r), data.get("run", {}))  # early files: the call's notes
    lines = [f"Measured {p['date']} on {p['gpu']} (GPU {p.get('gpu_uuid')}; driver {p.get('driver')}, CUDA "
             f"{p.get('cuda')}, torch {p['torch']}, triton {p['triton']}; decoder {p.get('decoder_commit')}"
             f"{'; tree ' + data['run']['tree'] if 'tree' in data.get('run', {}) else ''}); "
             f"{run.get('model')} shape, random {run.get('dtype')} weights, no speculation, {OUTPUT} output tokens "
             f"a long prompt, max_batched_tokens {run.get('max_batched_tokens')}. Made by "
             f"`python benchmarks/gpu_check.py --only long` (`{JSON}`). {_criterion(rows)}", "", summary(rows), "",
             "| prompt tokens | served | CUDA graphs | batching | ok | outputs equal | departures (near ties) "
             "| largest margin (noise there) | steps | wall s |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "prompt_tokens" not in r:
            lines.append(f"| {r['case']} | | | | no | | | {r.get('skipped') or r.get('error')} | | |")
            continue
        where, graphs, batching = r["case"].split(" ", 3)[3].rsplit(", ", 2)
        deps = departures(r)
        worst = max(deps, key=lambda d: d["margin"], default=None)
        widest = "-" if worst is None else f"{worst['margin']:.3f} ({_num(worst.get('noise'))})"
        lines.append(f"| {r['prompt_tokens']:,} | {where} | {graphs.split('=')[1]} | {batching} | "
                     f"{'yes' if r['ok'] else 'no'} | {'yes' if r['outputs_equal'] else 'no'} | "
                     f"{len(deps)} ({sum(d['near_tie'] for d in deps)}) | {widest} | {r['steps']} | {r['wall_s']:.1f} |")
    return "\n".join(lines)
