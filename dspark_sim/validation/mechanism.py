"""docs/validation.md's account of what the simulator put into its steps at saturation, before
and after the in-flight step (serving/inflight.py), from ``benchmarks/lockstep.py``'s data."""
from __future__ import annotations

import numpy as np

SHOWN = ("output_throughput", "mean_ttft_ms", "p50_tpot_ms")
EXCERPT = ("running_reqs", "decode_reqs", "prefill_reqs", "prefill_tokens", "verify_tokens")


def mechanism_lines(before: dict, after: dict) -> list[str]:
    """The section: what was wrong, what the fix changed, the steps where it shows, and the
    errors of every lockstep case before and after."""
    t = after["traffic"]
    lines = ["", "## At saturation: what goes into a step", "",
             "The decoder's own serving loop (the tiny CPU decoder at the cases' limits: 256 places, 8,192 "
             "tokens a step; null forwards, synthetic acceptance) and the simulator served the same arrivals "
             "on the same step prices: each decoder step lasted what the shipped profile prices its work at "
             "(`dspark_sim/validation/lockstep.py`, `python benchmarks/lockstep.py`). Any difference is in what "
             "each side put into its steps. Traffic: chat-like prompts (mean "
             f"{t['prompt_mean']} tokens), outputs {t['outputs'][0]}..{t['outputs'][1]}, {t['requests']} requests, "
             f"Poisson at {t['rates']['saturated']:g} req/s (past saturation) and {t['rates']['moderate']:g} req/s, "
             f"three seeds; before: {before['commit']}, after: {after['commit']}.", "",
             "What was wrong, all three where the decoder plans step n+1 while step n runs (as SGLang's overlap "
             "scheduler and vLLM's asynchronous scheduling do) and the simulator had planned it from step n's "
             "results:", "",
             "- a request that step n finished still holds its place (and its pages) when step n+1 is planned: "
             "a waiting request takes it in step n+2; the simulator refilled it in step n+1. At saturation every "
             "place that frees is refilled a step late, for every method;",
             "- a request that step n's drafts may or may not finish (two tokens or more left when it was planned) "
             "is decoded once more in step n+1, its tokens dropped: drafts and verify tokens the simulator never "
             "priced (MTP and DSpark only);",
             "- under `mixed` batching a decoding request takes its whole window (drafts + 1) from the token "
             "budget, its verify length being decided on the GPU later; the simulator took the verify tokens "
             "the scheduler chose, leaving DSpark more room for prompt chunks.", "",
             "The fix (`dspark_sim/serving/inflight.py`) makes the simulator's overlapping engines do all three; "
             "engines that read each step before planning the next hold nothing.", ""]
    lines += _excerpt(before) + [""] + _table(before, after)
    return lines


def _excerpt(before: dict) -> list[str]:
    """The first no-speculation case past saturation that differed: its steps around the first difference."""
    case = next((c for c in before["cases"] if c["method"] == "none" and c["load"] == "saturated"
                 and c.get("around")), None)
    if case is None:
        return []
    out = [f"Where it shows (before the fix: no speculation, `{case['batching']}`, seed {case['seed']}): the two "
           f"runs agree step for step until step {case['first_difference']}, the first step after a request "
           "left while others waited. Per step, running / decoding requests / prompt chunks / prompt tokens / "
           "verify tokens:", "", "| step | decoder | simulator |", "|---|---|---|"]
    for d, s in zip(case["around"]["decoder"], case["around"]["sim"]):
        out.append(f"| {d['step']} | " + " / ".join(str(d[c]) for c in EXCERPT) + " | "
                   + " / ".join(str(s[c]) for c in EXCERPT) + " |")
    return out


def _table(before: dict, after: dict) -> list[str]:
    """Per load, batching and method: the first differing step per seed and the mean error of each
    metric over the seeds, (sim - decoder) / decoder, before -> after."""
    lines = ["Each case, before -> after: the first step whose composition differs (per seed; none: every step "
             "agrees), and the mean over the seeds of (simulator - decoder) / decoder:", "",
             "| load | batching | method | first differing step | " + " | ".join(SHOWN) + " |",
             "|---|---|---|---|" + "---|" * len(SHOWN)]
    groups = {}
    for side, data in (("before", before), ("after", after)):
        for c in data["cases"]:
            groups.setdefault((c["load"], c["batching"], c["method"]), {}).setdefault(side, []).append(c)
    for (load, batching, method), sides in groups.items():
        first = " -> ".join(", ".join("none" if c["first_difference"] is None else str(c["first_difference"])
                                      for c in sides.get(s, [])) for s in ("before", "after"))
        errs = [" -> ".join(f"{np.mean([c['error'].get(k, np.nan) for c in sides.get(s, [])]):+.1%}"
                            for s in ("before", "after")) for k in SHOWN]
        lines.append(f"| {load} | {batching} | {method} | {first} | " + " | ".join(errs) + " |")
    return lines
