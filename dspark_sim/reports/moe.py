"""``docs/moe.md`` from its committed figures (``benchmarks/moe_costs.py``): MoE models' sizes,
experts touched, KV capacity, step times by layout, DSpark against MTP-1, measured slices."""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
JSON = ROOT / "docs" / "bench" / "moe_costs.json"


def _kind(source: str) -> str:
    return "measured" if source.startswith("measured") else "projection" if source.startswith("projected") \
        else "roofline"


def _models_table(rows: list[dict]) -> list[str]:
    out = [("| model | params (published) | active (published) | KV bytes/token (bf16) | KV bytes/request (fixed) "
           "| checkpoint | weights |"), "|---|---|---|---|---|---|---|"]
    return out + [f"| {r['model']} | {r['params'] / 1e9:,.1f} B ({r['params_published'] / 1e9:,.1f} B) | "
                  f"{r['active'] / 1e9:.2f} B ({r['active_published'] / 1e9:.1f} B) | {r['kv_bytes_per_token']:,} | "
                  f"{r['kv_bytes_per_request'] / 2**20:.1f} MiB | {r['checkpoint']} | {r['weight_bytes'] / 1e9:,.0f} GB |"
                  for r in rows]


def _experts_table(rows: list[dict]) -> list[str]:
    out = ["| model | routing | " + " | ".join(f"T={t}" for t in TOKENS) + " |", "|---|---|" + "---|" * len(TOKENS)]
    def routing(skew: float) -> str:
        return "uniform" if skew == 0 else f"skew {skew:g}"

    return out + [f"| {r['model']} ({r['num_experts']} experts, top {r['top_k']}) | {routing(r['skew'])} | "
                  + " | ".join(f"{e:.1f}" for e in r["experts"]) + " |" for r in rows]


def _capacity_table(rows: list[dict]) -> list[str]:
    out = [("| GPU | served weights | layout | KV dtype | KV tokens (8 GPUs) | tokens a request holds besides its "
           "length | requests of 8k |"), "|---|---|---|---|---|---|---|"]
    return out + [f"| {r['gpu']} | {r['served']} | {r['layout']} | {r['kv_dtype']} | {r['kv_tokens']:,} | "
                  f"{r['fixed_tokens']:,} | {r['kv_tokens'] // (8192 + r['fixed_tokens']):,} |" for r in rows]


def _step_table(rows: list[dict]) -> list[str]:
    out = ["| GPU | layout | cost model | " + " | ".join(f"R={r}: 1 / 6 tokens" for r in STEP_REQS) + " |",
           "|---|---|---|" + "---|" * len(STEP_REQS)]
    return out + [f"| {r['gpu']} | {r['layout']} | {_kind(r['source'])} | "
                  + " | ".join(f"{a:.2f} / {b:.2f}" for a, b in r["ms"]) + " |" for r in rows]


def _compare_table(rows: list[dict]) -> list[str]:
    by = {(r["method"], r["concurrency"]): r for r in rows}
    out = [("| concurrency | none tok/s/GPU | MTP-1 tok/s/GPU | DSpark tok/s/GPU | DSpark vs MTP-1 | DSpark tok/s/user "
           "| accept length (MTP-1 / DSpark) | verify tokens / request |"), "|---|---|---|---|---|---|---|---|"]
    for c in COMPARE_CONC:
        n, m, d = by["none", c], by["mtp1", c], by["dspark", c]
        gain = d["output_throughput_per_gpu"] / m["output_throughput_per_gpu"] - 1
        out.append(f"| {c} | {n['output_throughput_per_gpu']:,.0f} | {m['output_throughput_per_gpu']:,.0f} | "
                   f"{d['output_throughput_per_gpu']:,.0f} | {gain:+.1%} | {d['mean_tok_per_s_per_user']:.0f} | "
                   f"{m['mean_accept_length']:.2f} / {d['mean_accept_length']:.2f} | "
                   f"{d['mean_verify_tokens_per_request']:.2f} |")
    return out


def _measured_sections(data: dict) -> list[str]:
    out = ["## Slice scaling, measured", ""]
    scaling = data["slice_scaling"]
    if scaling is None:
        out += [("Not measured yet: `profiles/h200/slice_scaling.json` is written by "
                "`python benchmarks/fit_profiles.py` (`dspark-profile fit`) from the raw files of "
                "`benchmarks/h200_moe_visit.sh` (one H200 call)."), ""]
    else:
        out += [("Scaled from two slices against the same model timed whole on one H200 (verify points both "
                "timed; relative error of the scaled step time):"), "",
                "| model | slices | layers | points | median | p90 | max | median by requests | measured |",
                "|---|---|---|---|---|---|---|---|---|"]
        for name, e in sorted(scaling.items()):
            if e["points"]:
                by = ", ".join(f"R={r}: {100 * v:.1f} %" for r, v in e["by_reqs"].items())
                out.append(f"| {name} | {e['slices']} | {e['layers']} | {e['points']} | {100 * e['median']:.1f} % | "
                           f"{100 * e['p90']:.1f} % | {100 * e['max']:.1f} % | {by} | {e['date']} |")
        out.append("")
    out += ["## MoE profiles: held-out error", ""]
    if not data["held_out"]:
        return out + ["No MoE profile measured yet (see above).", ""]
    out += ["| model | source | verify k-fold median / p90 / max | verify by level median / p90 / max | points |",
            "|---|---|---|---|---|"]
    for r in data["held_out"]:
        cells = ["-" if v is None else f"{100 * v[0]:.1f} / {100 * v[1]:.1f} / {100 * v[2]:.1f} %"
                 for v in (r["kfold"], r["by_level"])]
        out.append(f"| {r['model']} | {r['source']} | {cells[0]} | {cells[1]} | {r['points']} |")
    return out + [""]


def markdown(data: dict) -> str:
    """docs/moe.md from the committed JSON (and the method's prose, docs/moe_method.md)."""
    sources = sorted({f"- {r['source']}" for model in data["steps"].values() for r in model})
    return "\n".join([
        "# MoE and DeepSeek-V4 costs", "",
        (f"Made by `{data['command']}` at commit {data['commit']} on {data['date']} ({data['machine']}), from "
        f"`{JSON.relative_to(ROOT)}` (`python benchmarks/doc_blocks.py write`); do not edit."), "",
        (ROOT / "docs" / "moe_method.md").read_text().strip(), "",
        "## The models", "", *_models_table(data["models"]), "",
        "## Experts a step reads", "", "Expected distinct experts per MoE layer for T tokens in the step:", "",
        *_experts_table(data["experts"]), "",
        "## KV capacity of one 8-GPU node: DeepSeek-V4-Flash", "", *_capacity_table(data["capacity"]), "",
        "## Step time by GPU and layout (ms; context 4,096; FP8 KV)", "",
        "DeepSeek-V4-Flash, decode steps of R requests verifying 1 or 6 tokens each:", "",
        *_step_table(data["steps"]["deepseek-v4-flash"]), "",
        "Qwen3-30B-A3B, the same steps:", "", *_step_table(data["steps"]["qwen3-30b-a3b"]), "",
        "Cost models, as each labels itself:", "", *sources, "",
        "## DSpark against DeepSeek-V4's MTP-1 (8 x B300, `examples/v4_flash_b300.yaml`)", "",
        ("Closed loop at each concurrency; acceptance: the V4-Flash DSpark preset (engine report, DSPARK.md "
        "section 6) and, for MTP-1, DeepSeek-V3's MTP figures (no V4 MTP figure is published); costs as labelled "
        "above (block 5 drafter: three MoE layers)."), "", *_compare_table(data["compare"]), "",
        *_measured_sections(data["measured"])]) + "\n"


TOKENS = (1, 8, 64, 512, 4096)


STEP_REQS = (1, 16, 64, 256)


COMPARE_CONC = (1, 16, 64, 256)
