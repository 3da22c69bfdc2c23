"""MoE and DeepSeek-V4 costs: writes docs/bench/moe_costs.json, from which docs/moe.md is made.

    python benchmarks/moe_costs.py [--requests N]     # then `python benchmarks/doc_blocks.py write`

The catalog against the published totals, what a step reads under each layout, KV
capacity of an 8-GPU node, step times by GPU and layout (each labelled with the cost
model it came from: a measured profile, a projection of one, or the roofline), DSpark
against DeepSeek-V4's own MTP-1 on 8 B300s, and, once an H200 has timed them
(benchmarks/h200_moe_visit.sh, then `dspark-profile fit` through benchmarks/fit_profiles.py), the slice-scaling
error and the held-out errors of the MoE profiles. The figures go to the JSON with the command,
commit, date and machine; :func:`dspark_sim.reports.moe.markdown` makes the page from that file alone
(``benchmarks/doc_blocks.py``, checked by ``tests/test_doc_blocks.py``).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

from outputs import code_commit, machine, write_result

from dspark_sim.catalog import get_gpu, get_model, served_format
from dspark_sim.cost import StepWork, get_cost_model
from dspark_sim.cost.moe import Routing, expected_experts
from dspark_sim.cost.parallel import Parallel
from dspark_sim.reports.moe import COMPARE_CONC, JSON, STEP_REQS, TOKENS
from dspark_sim.serving.kv import kv_capacity_tokens, kv_request_tokens
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


def models_rows() -> list[dict]:
    """Each MoE model's computed sizes beside its maker's published totals."""
    rows = []
    for name in MOE_MODELS:
        m = get_model(name)
        total, active, with_embed = PUBLISHED[name]
        rows.append({"model": name, "params": m.param_count, "params_published": total,
                     "active": m.active_param_count - (0 if with_embed else m.vocab_size * m.hidden_size),
                     "active_published": active, "kv_bytes_per_token": m.kv_bytes_per_token(),
                     "kv_bytes_per_request": m.kv_bytes_per_request(), "checkpoint": m.weight_format,
                     "weight_bytes": m.weight_bytes_as(m.checkpoint_format)})
    return rows


def experts_rows() -> list[dict]:
    rows = []
    for name in ("qwen3-30b-a3b", "deepseek-v4-flash"):
        m = get_model(name)
        for skew in (0.0, 1.0):
            rows.append({"model": name, "num_experts": m.num_experts, "top_k": m.experts_per_token, "skew": skew,
                         "experts": [expected_experts(m.num_experts, m.experts_per_token, t, Routing(skew))
                                     for t in TOKENS]})
    return rows


def capacity_rows() -> list[dict]:
    m = get_model("deepseek-v4-flash")
    rows = []
    for gpu in GPUS:
        g = get_gpu(gpu)
        for label, par in LAYOUTS.items():
            if par.tp != 8:
                continue
            for kv in ("bf16", "fp8"):
                dep = Deployment(tp=8, ep=par.ep, dp_attention=par.dp_attention, kv_cache_dtype=kv)
                rows.append({"gpu": gpu, "served": served_format(m.weight_format, g.fp4).name, "layout": label,
                             "kv_dtype": kv, "kv_tokens": kv_capacity_tokens(m, g, dep),
                             "fixed_tokens": kv_request_tokens(m, dep)})
    return rows


def step_rows(model: str) -> list[dict]:
    """Decode step times (ms) at R requests verifying 1 and 6 tokens, per GPU and layout, each with
    the cost model's own label."""
    rows = []
    for gpu in GPUS:
        for label, par in LAYOUTS.items():
            if par.tp == 8 and not par.dp_attention and model != "deepseek-v4-flash":
                continue
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                cost = get_cost_model(gpu, model, parallel=par, kv_dtype_bytes=1.0)
            ms = [[1e3 * cost.step_s(StepWork(decode_reqs=r, verify_tokens=r * w, decode_context_tokens=r * 4096))
                   for w in (1, 6)] for r in STEP_REQS]
            rows.append({"gpu": gpu, "layout": label, "source": cost.source, "ms": ms})
    return rows


def compare_rows(requests: int) -> list[dict]:
    from dspark_sim.sweep import sweep

    scenario = load_scenario(REPO / "examples" / "v4_flash_b300.yaml")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return sweep(scenario, ["none", "mtp1", "dspark"], list(COMPARE_CONC), num_requests=requests or None)


def measured_data() -> dict:
    """The slice-scaling errors and the MoE profiles' held-out errors, from the committed files."""
    from dspark_sim.cost.profile_format import load_profile as load

    path = REPO / "profiles" / "h200" / "slice_scaling.json"
    held = []
    for prof in sorted(p for p in (REPO / "profiles" / "h200").glob("*.json") if p.stem in MOE_MODELS):
        p = load(prof)
        held.append({"model": p.model, "source": p.source, "points": p.held_out["all"].num_points,
                     **{key: None if h is None else [h.median_rel_err, h.p90_rel_err, h.max_rel_err]
                        for key, h in (("kfold", p.held_out.get("verify")), ("by_level", p.held_out.get("verify@reqs")))}})
    return {"slice_scaling": json.loads(path.read_text())["models"] if path.is_file() else None, "held_out": held}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=0,
                    help="requests per compare point (default: six times the concurrency, as compare does)")
    args = ap.parse_args(argv)
    data = {"command": " ".join(["python benchmarks/moe_costs.py", *(sys.argv[1:] if argv is None else argv)]),
            "commit": code_commit("dspark_sim", "profiles", "examples"),
            "date": time.strftime("%Y-%m-%d", time.gmtime()), "machine": machine(),
            "models": models_rows(), "experts": experts_rows(), "capacity": capacity_rows(),
            "steps": {m: step_rows(m) for m in ("deepseek-v4-flash", "qwen3-30b-a3b")},
            "compare": compare_rows(args.requests), "measured": measured_data()}
    write_result(JSON, data)
    print(f"wrote {JSON.relative_to(REPO)}; `python benchmarks/doc_blocks.py write` makes docs/moe.md from it")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
