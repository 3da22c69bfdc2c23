"""MoE and DeepSeek-V4 costs: writes docs/moe.md (every figure in it comes from this run).

    python benchmarks/moe_costs.py [--requests N] [--out docs/moe.md]

The catalog against the published totals, what a step reads under each layout, KV
capacity of an 8-GPU node, step times by GPU and layout (each labelled with the cost
model it came from: a measured profile, a projection of one, or the roofline), DSpark
against DeepSeek-V4's own MTP-1 on 8 B300s, and, once an H200 has timed them
(benchmarks/h200_moe_visit.sh, then `dspark-profile fit` through benchmarks/fit_profiles.py), the slice-scaling
error and the held-out errors of the MoE profiles.
"""
from __future__ import annotations

import argparse
import datetime
import json
import warnings
from pathlib import Path

from dspark_sim.catalog import get_gpu, get_model, served_format
from dspark_sim.cost import StepWork, get_cost_model
from dspark_sim.cost.moe import Routing, expected_experts
from dspark_sim.cost.parallel import Parallel
from dspark_sim.engine.kv import kv_capacity_tokens, kv_request_tokens
from dspark_sim.scenario import Deployment, load_scenario

REPO = Path(__file__).resolve().parents[1]
MOE_MODELS = ("qwen3-30b-a3b", "qwen3-235b-a22b", "deepseek-v3", "deepseek-v4-flash", "deepseek-v4-pro")
# Published totals (parameters, activated), each from its maker: DeepSeek's V4 release and
# V3 report, Qwen's model cards. DeepSeek's activated counts leave the input embedding out.
PUBLISHED = {"qwen3-30b-a3b": (30.5e9, 3.3e9, True), "qwen3-235b-a22b": (235e9, 22e9, True),
             "deepseek-v3": (671e9, 37e9, False), "deepseek-v4-flash": (284e9, 13e9, False),
             "deepseek-v4-pro": (1.6e12, 49e9, False)}
LAYOUTS = {"TP8": Parallel(8), "TP4 EP4 DP-attn": Parallel(4, 4, True), "TP8 EP8 DP-attn": Parallel(8, 8, True)}
GPUS = ("b300", "b200", "h200", "h100")


def models_table() -> list[str]:
    rows = ["| model | params (published) | active (published) | KV bytes/token (bf16) | KV bytes/request (fixed) "
            "| checkpoint | weights |", "|---|---|---|---|---|---|---|"]
    for name in MOE_MODELS:
        m = get_model(name)
        total, active, with_embed = PUBLISHED[name]
        act = m.active_param_count - (0 if with_embed else m.vocab_size * m.hidden_size)
        rows.append(f"| {name} | {m.param_count / 1e9:,.1f} B ({total / 1e9:,.1f} B) | {act / 1e9:.2f} B "
                    f"({active / 1e9:.1f} B) | {m.kv_bytes_per_token():,} | {m.kv_bytes_per_request() / 2**20:.1f} MiB "
                    f"| {m.weight_format} | {m.weight_bytes_as(m.checkpoint_format) / 1e9:,.0f} GB |")
    return rows


def experts_table() -> list[str]:
    tokens = (1, 8, 64, 512, 4096)
    rows = ["| model | routing | " + " | ".join(f"T={t}" for t in tokens) + " |", "|---|---|" + "---|" * len(tokens)]
    for name in ("qwen3-30b-a3b", "deepseek-v4-flash"):
        m = get_model(name)
        for skew in (0.0, 1.0):
            cells = [f"{expected_experts(m.num_experts, m.experts_per_token, t, Routing(skew)):.1f}" for t in tokens]
            rows.append(f"| {name} ({m.num_experts} experts, top {m.experts_per_token}) | "
                        f"{'uniform' if skew == 0 else f'skew {skew:g}'} | " + " | ".join(cells) + " |")
    return rows


def capacity_table() -> list[str]:
    m = get_model("deepseek-v4-flash")
    rows = ["| GPU | served weights | layout | KV dtype | KV tokens (8 GPUs) | tokens a request holds besides its "
            "length | requests of 8k |", "|---|---|---|---|---|---|---|"]
    for gpu in GPUS:
        g = get_gpu(gpu)
        for label, par in LAYOUTS.items():
            if par.tp != 8:
                continue
            for kv in ("bf16", "fp8"):
                dep = Deployment(tp=8, ep=par.ep, dp_attention=par.dp_attention, kv_cache_dtype=kv)
                cap, fixed = kv_capacity_tokens(m, g, dep), kv_request_tokens(m, dep)
                rows.append(f"| {gpu} | {served_format(m.weight_format, g.fp4).name} | {label} | {kv} | {cap:,} "
                            f"| {fixed:,} | {cap // (8192 + fixed):,} |")
    return rows


def step_table(model: str) -> tuple[list[str], list[str]]:
    reqs = (1, 16, 64, 256)
    rows = ["| GPU | layout | cost model | " + " | ".join(f"R={r}: 1 / 6 tokens" for r in reqs) + " |",
            "|---|---|---|" + "---|" * len(reqs)]
    sources = []
    for gpu in GPUS:
        for label, par in LAYOUTS.items():
            if par.tp == 8 and not par.dp_attention and model != "deepseek-v4-flash":
                continue
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                cost = get_cost_model(gpu, model, parallel=par, kv_dtype_bytes=1.0)
            kind = "measured" if cost.source.startswith("measured") else \
                "projection" if cost.source.startswith("projected") else "roofline"
            cells = []
            for r in reqs:
                ms = [1e3 * cost.step_s(StepWork(decode_reqs=r, verify_tokens=r * w, decode_context_tokens=r * 4096))
                      for w in (1, 6)]
                cells.append(f"{ms[0]:.2f} / {ms[1]:.2f}")
            rows.append(f"| {gpu} | {label} | {kind} | " + " | ".join(cells) + " |")
            sources.append(f"- {cost.source}")
    return rows, sources


def compare_table(requests: int) -> list[str]:
    from dspark_sim.sweep import sweep

    scenario = load_scenario(REPO / "examples" / "v4_flash_b300.yaml")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rows = sweep(scenario, ["none", "mtp1", "dspark"], [1, 16, 64, 256], num_requests=requests or None)
    by = {(r["method"], r["concurrency"]): r for r in rows}
    out = ["| concurrency | none tok/s/GPU | MTP-1 tok/s/GPU | DSpark tok/s/GPU | DSpark vs MTP-1 | DSpark tok/s/user "
           "| accept length (MTP-1 / DSpark) | verify tokens / request |", "|---|---|---|---|---|---|---|---|"]
    for c in (1, 16, 64, 256):
        n, m, d = by["none", c], by["mtp1", c], by["dspark", c]
        gain = d["output_throughput_per_gpu"] / m["output_throughput_per_gpu"] - 1
        out.append(f"| {c} | {n['output_throughput_per_gpu']:,.0f} | {m['output_throughput_per_gpu']:,.0f} | "
                   f"{d['output_throughput_per_gpu']:,.0f} | {gain:+.1%} | {d['mean_tok_per_s_per_user']:.0f} | "
                   f"{m['mean_accept_length']:.2f} / {d['mean_accept_length']:.2f} | "
                   f"{d['mean_verify_tokens_per_request']:.2f} |")
    return out


def measured_sections() -> list[str]:
    path = REPO / "profiles" / "h200" / "slice_scaling.json"
    out = ["## Slice scaling, measured", ""]
    if not path.is_file():
        return out + ["Not measured yet: `profiles/h200/slice_scaling.json` is written by "
                      "`python benchmarks/fit_profiles.py` (`dspark-profile fit`) from the raw files of "
                      "`benchmarks/h200_moe_visit.sh` (one H200 call).", ""]
    data = json.loads(path.read_text())["models"]
    out += ["Scaled from two slices against the same model timed whole on one H200 (verify points both "
            "timed; relative error of the scaled step time):", "",
            "| model | slices | layers | points | median | p90 | max | median by requests | measured |",
            "|---|---|---|---|---|---|---|---|---|"]
    for name, e in sorted(data.items()):
        if not e["points"]:
            continue
        by = ", ".join(f"R={r}: {100 * v:.1f} %" for r, v in e["by_reqs"].items())
        out.append(f"| {name} | {e['slices']} | {e['layers']} | {e['points']} | {100 * e['median']:.1f} % | "
                   f"{100 * e['p90']:.1f} % | {100 * e['max']:.1f} % | {by} | {e['date']} |")
    return out + [""]


def held_out_rows() -> list[str]:
    from dspark_sim.cost.profile_format import load_profile as load

    out = ["## MoE profiles: held-out error", ""]
    found = [p for p in (REPO / "profiles" / "h200").glob("*.json") if p.stem in MOE_MODELS]
    if not found:
        return out + ["No MoE profile measured yet (see above).", ""]
    out += ["| model | source | verify k-fold median / p90 / max | verify by level median / p90 / max | points |",
            "|---|---|---|---|---|"]
    for path in sorted(found):
        p = load(path)
        cells = [f"{100 * h.median_rel_err:.1f} / {100 * h.p90_rel_err:.1f} / {100 * h.max_rel_err:.1f} %"
                 if h else "-" for h in (p.held_out.get("verify"), p.held_out.get("verify@reqs"))]
        out.append(f"| {p.model} | {p.source} | {cells[0]} | {cells[1]} | {p.held_out['all'].num_points} |")
    return out + [""]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=0,
                    help="requests per compare point (default: six times the concurrency, as compare does)")
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "moe.md")
    args = ap.parse_args(argv)
    steps, sources = step_table("deepseek-v4-flash")
    qsteps, qsources = step_table("qwen3-30b-a3b")
    text = "\n".join([
        "# MoE and DeepSeek-V4 costs", "",
        f"Generated by `python benchmarks/moe_costs.py` on {datetime.date.today().isoformat()}; do not edit.", "",
        (REPO / "docs" / "moe_method.md").read_text().strip(), "",
        "## The models", "", *models_table(), "",
        "## Experts a step reads", "", "Expected distinct experts per MoE layer for T tokens in the step:", "",
        *experts_table(), "",
        "## KV capacity of one 8-GPU node: DeepSeek-V4-Flash", "", *capacity_table(), "",
        "## Step time by GPU and layout (ms; context 4,096; FP8 KV)", "",
        "DeepSeek-V4-Flash, decode steps of R requests verifying 1 or 6 tokens each:", "", *steps, "",
        "Qwen3-30B-A3B, the same steps:", "", *qsteps, "", "Cost models, as each labels itself:", "",
        *sorted(set(sources + qsources)), "",
        "## DSpark against DeepSeek-V4's MTP-1 (8 x B300, `examples/v4_flash_b300.yaml`)", "",
        "Closed loop at each concurrency; acceptance: the V4-Flash DSpark preset (engine report, DSPARK.md "
        "section 6) and, for MTP-1, DeepSeek-V3's MTP figures (no V4 MTP figure is published); costs as labelled "
        "above (block 5 drafter: three MoE layers).", "", *compare_table(args.requests), "",
        *measured_sections(), *held_out_rows()])
    args.out.write_text(text + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
