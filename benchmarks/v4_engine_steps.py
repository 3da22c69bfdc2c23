"""DeepSeek-V4 as the engines run it: the batch-1 step by GPU and TP, and DSpark's speed-up.

    python benchmarks/v4_engine_steps.py          # -> docs/v4_engines.md, docs/v4_engines.json

Three tables, from the simulator's cost models, closed-loop runs and the published runs' replays
(no GPU needed):

1. The batch-1 decode step (one request verifying one token, context 8,192, FP8 KV) of V4-Flash
   and V4-Pro under SGLang, by GPU and TP: the engines' MoE roofline (fitted on published
   SGLang runs, ``benchmarks/external.py calibrate``) and, for contrast, the decoder's own cost
   model (V4-Flash's H200 profile, scaled from layer slices of the project's kernels), beside
   the per-token time of SGLang's published low-latency cells (MTP 3 steps: their TPOT, which
   is the step over the accept length, so a ratio of steps, not a step).
2. DSpark (block 7, SGLang's default block size) against no speculation at each concurrency, closed
   loop (a client at that concurrency, random 8,192 / 1,024 prompts as the cookbook runs them,
   chat traffic): output tokens a second and the speed-up, with DSpark's mean accept length.
3. DSpark against MTP where published runs differ in the speculation alone (``PAIRS``), from
   docs/external.json: the published ratio of output throughputs beside the replayed one.
"""
from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC, DOC_JSON = ROOT / "docs" / "v4_engines.md", ROOT / "docs" / "v4_engines.json"
EXTERNAL_JSON = ROOT / "docs" / "external.json"  # benchmarks/external.py check
GPUS = ("h100", "h200", "b200", "b300")
LAYOUTS = {"deepseek-v4-flash": (4, 8), "deepseek-v4-pro": (8,)}
CONCURRENCY = (1, 4, 16, 64, 256)
# SGLang DeepSeek-V4 cookbook, low-latency cells (MTP 3), concurrency 1: mean TPOT ms (SGLang 0.5.15,
# docs_new/src/snippets/configs/deepseek-ai/deepseek-v4-benchmarks.jsx at 08587007c815)
PUBLISHED_TPOT_MS = {("deepseek-v4-flash", "b200", 4): 2.88, ("deepseek-v4-flash", "b300", 4): 2.85,
                     ("deepseek-v4-flash", "h200", 4): 3.37, ("deepseek-v4-flash", "h100", 8): 3.22,
                     ("deepseek-v4-pro", "b200", 8): 4.26, ("deepseek-v4-pro", "b300", 8): 4.12,
                     ("deepseek-v4-pro", "h200", 8): 5.64}


def _scenario(model: str, gpu: str, tp: int, engine, speculation: dict, concurrency: int = 1, requests: int = 32):
    from dspark_sim.scenario import Scenario

    return Scenario.from_dict({
        "name": f"{model}-{gpu}-tp{tp}", "model": model, "gpu": gpu, "engine": engine,
        "deployment": {"tp": tp, "kv_cache_dtype": "fp8", "max_running_requests": max(concurrency, 1)},
        "speculation": speculation, "seed": 0,
        "workload": {"synthetic": {"num_requests": requests, "rate_per_s": 1e9,
                                   "prompt_tokens": {"dist": "uniform", "min_tokens": 1, "max_tokens": 8192},
                                   "output_tokens": {"dist": "uniform", "min_tokens": 1, "max_tokens": 1024}},
                     "domain": "chat", "max_concurrency": concurrency}})


def step_rows() -> list[dict]:
    from dspark_sim.cost import StepWork, scenario_cost

    work = StepWork(decode_reqs=1, verify_tokens=1, decode_context_tokens=8192, decode_max_context=8192,
                    running_reqs=1)
    rows = []
    for model, layouts in LAYOUTS.items():
        for tp in layouts:
            for gpu in GPUS:
                try:
                    engines = scenario_cost(_scenario(model, gpu, tp, "sglang", {"method": "none"}), warn=False)
                    decoder = scenario_cost(_scenario(model, gpu, tp, "decoder", {"method": "none"}), warn=False)
                except Exception as err:  # a layout the model does not split into on this GPU
                    rows.append({"model": model, "gpu": gpu, "tp": tp, "error": str(err)})
                    continue
                gpu_s = sum(v for k, v in engines.breakdown(work).items() if k not in ("engine_s", "eager_s"))
                rows.append({"model": model, "gpu": gpu, "tp": tp, "engines_ms": gpu_s * 1e3,
                             "decoder_ms": decoder.step_s(work) * 1e3,
                             "published_tpot_ms": PUBLISHED_TPOT_MS.get((model, gpu, tp)),
                             "engines_source": engines.gpu.source.split(",")[0]})
    return rows


def speedup_rows(model: str = "deepseek-v4-flash", gpu: str = "b200", tp: int = 8) -> list[dict]:
    from dspark_sim.metrics.summary import summarize
    from dspark_sim.serving.simulator import simulate

    rows = []
    for c in CONCURRENCY:
        out = {}
        for name, spec in (("none", {"method": "none"}), ("dspark", {"method": "dspark", "block_size": 7})):
            s = summarize(simulate(_scenario(model, gpu, tp, "sglang", spec, c, requests=max(16, 4 * c))))
            out[name] = s
        rows.append({"model": model, "gpu": gpu, "tp": tp, "concurrency": c,
                     "none_tok_s": out["none"].output_throughput, "dspark_tok_s": out["dspark"].output_throughput,
                     "speedup": out["dspark"].output_throughput / out["none"].output_throughput,
                     "accept_length": out["dspark"].mean_accept_length})
        print(f"{model} {gpu} tp{tp} c={c}: speed-up {rows[-1]['speedup']:.2f}", file=sys.stderr, flush=True)
    return rows


# Published runs of one GPU, model and recipe that differ in the speculation alone (docs/external.md):
# SGLang PR 33109's balanced DSpark legs beside the cookbook's balanced MTP-1 cells on 4 x H200
# (FlashInfer MXFP4 experts, 64 and 256 concurrent requests).
PAIRS = (("pr33109-v4flash0731-h200-balanced-c64", "cookbook-v4flash-h200-fp4-balanced-c64", 64),
         ("pr33109-v4flash0731-h200-balanced-c256", "cookbook-v4flash-h200-fp4-balanced-c256", 256))


def pair_rows() -> list[dict]:
    """DSpark's output throughput over MTP's where both are published, measured and as replayed
    (docs/external.json's predictions: each run replayed with the shipped terms)."""
    cases = {r["id"]: r for r in json.loads(EXTERNAL_JSON.read_text())["cases"]}
    rows = []
    for dspark, mtp, c in PAIRS:
        d, m = cases[dspark], cases[mtp]
        measured = d["measured"]["throughput"] / m["measured"]["throughput"]
        replayed = d["predicted"]["throughput"] / m["predicted"]["throughput"]
        rows.append({"dspark": dspark, "mtp": mtp, "concurrency": c, "roles": [d["role"], m["role"]],
                     "measured": measured, "replayed": replayed, "error": replayed / measured - 1.0})
    return rows


def reference(steps: list[dict], model: str) -> dict | None:
    """The row a model's batch-1 steps are compared by: its B200 cell at the TP SGLang published it."""
    return next((r for r in steps if r["model"] == model and r["gpu"] == "b200" and "error" not in r
                 and r["published_tpot_ms"]), None)


def write(steps: list[dict], speedups: list[dict], pairs: list[dict]) -> None:
    from dspark_sim.cost.jsonio import write_json_atomic
    from dspark_sim.metrics.outdir import atomic_write_text

    write_json_atomic(DOC_JSON, {"generated_by": "python benchmarks/v4_engine_steps.py", "steps": steps,
                                 "speedups": speedups, "dspark_vs_mtp": pairs})
    lines = ["# DeepSeek-V4 as the engines run it", "",
             "Generated by `python benchmarks/v4_engine_steps.py` (from `docs/v4_engines.json`); do not edit by hand.",
             "", "## The batch-1 decode step by GPU and TP", "",
             "One request verifying one token at a context of 8,192 (FP8 KV), GPU work only (no host time), under "
             "SGLang: the engines' MoE roofline (layer floors and expert bandwidth fitted on published SGLang runs, "
             "[external.md](external.md)) beside the decoder's own cost model (V4-Flash's profile is scaled from "
             "layer slices of the project's kernels, launch-bound; other pairs project it). The published column "
             "is SGLang's low-latency cookbook cell at concurrency 1 (MTP 3 steps): its TPOT, the step over the "
             "accept length, so compare how it moves with the GPU and TP, not its value: the two `/ B200` "
             "columns divide the engines' step and the published TPOT by the model's B200 cell at the TP SGLang "
             "published it (V4-Flash TP 4, V4-Pro TP 8), so where both are given they should agree.", "",
             "| model | TP | GPU | engines' step ms | decoder's step ms | published TPOT ms (MTP 3) "
             "| engines' step / B200 | published / B200 |",
             "|---|---|---|---|---|---|---|---|"]
    for r in steps:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['tp']} | {r['gpu']} | - | - | - | - | - |")
            continue
        pub = f"{r['published_tpot_ms']:.2f}" if r["published_tpot_ms"] else "-"
        ref = reference(steps, r["model"])
        ours = f"{r['engines_ms'] / ref['engines_ms']:.2f}" if ref else "-"
        theirs = f"{r['published_tpot_ms'] / ref['published_tpot_ms']:.2f}" if ref and r["published_tpot_ms"] else "-"
        lines.append(f"| {r['model']} | {r['tp']} | {r['gpu']} | {r['engines_ms']:.2f} | {r['decoder_ms']:.2f} | {pub} "
                     f"| {ours} | {theirs} |")
    lines += ["", "## DSpark against no speculation by concurrency", "",
              "Closed loop at each concurrency (random prompts of up to 8,192 tokens, outputs of up to 1,024, chat "
              "acceptance), SGLang's defaults, DSpark at block 7 with the V4 preset by domain "
              "([acceptance.md](acceptance.md)); output tokens a second of the replica.", "",
              "| model | GPU | TP | concurrency | none tok/s | DSpark tok/s | speed-up | DSpark accept length |",
              "|---|---|---|---|---|---|---|---|"]
    for r in speedups:
        lines.append(f"| {r['model']} | {r['gpu']} | {r['tp']} | {r['concurrency']} | {r['none_tok_s']:,.0f} | "
                     f"{r['dspark_tok_s']:,.0f} | {r['speedup']:.2f} | {r['accept_length']:.2f} |")
    lines += ["", "## DSpark against MTP where both are published", "",
              "No published run in [external.md](external.md)'s sources sets DSpark on DeepSeek-V4 beside no "
              "speculation at the same concurrency; SGLang PR 33109's DSpark legs and the cookbook's MTP-1 cells "
              "share the GPU (4 x H200), the model (V4-Flash; the PR serves its 0731 revision, with the DSpark head "
              "attached) and the recipe (balanced: FlashInfer MXFP4 experts) and differ in the speculation. DSpark's output tokens a second over MTP-1's, as published and as the replays "
              "in [external.md](external.md) give them (PR 33109's legs at the accept length the run reports). "
              "Both runs of each pair are 'calibrate' cases: this is not a held-out check.", "",
              "| concurrency | DSpark run | MTP-1 run | published DSpark / MTP-1 | replayed | error |",
              "|---|---|---|---|---|---|"]
    for r in pairs:
        lines.append(f"| {r['concurrency']} | {r['dspark']} | {r['mtp']} | {r['measured']:.3f} | {r['replayed']:.3f} | "
                     f"{r['error'] * 100:+.1f} % |")
    atomic_write_text(DOC, "\n".join(lines) + "\n")


def main() -> int:
    warnings.simplefilter("ignore", UserWarning)
    steps = step_rows()
    speedups = speedup_rows("deepseek-v4-flash", "b200", 8) + speedup_rows("deepseek-v4-pro", "b300", 8)
    write(steps, speedups, pair_rows())
    print(f"wrote {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
