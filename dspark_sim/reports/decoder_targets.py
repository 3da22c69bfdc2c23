"""The decoder's speed against what the GPU allows: the targets judged on a run's JSON
(``benchmarks/bench_targets.py --run`` makes it on a GPU), its table and doc block, and the
host-to-host spread two GPUs' runs give the answers' intervals.

Targets: no speculation at R = 1 within 1.10x of the weight-read time (weight bytes /
copy bandwidth); at R = 64 within 1.15x of the step's roofline (weights, then the KV
cache, each at the larger of bytes / bandwidth and FLOPs / matrix rate); exposed host
time <= 0.3 ms at R <= 64; DSpark at R = 1 >= 4x no speculation in tok/s per user.
"""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
JSON = ROOT / "profiles" / "h200" / "decoder_targets.json"

def roofline_ms(spec, weights_read: int, reqs: int, context: int, copy_gbps: float, tflops: float) -> float:
    """The step's floor: linear layers (weights read once; 2 FLOPs per weight per token)
    and the KV cache read by attention, each at the larger of bytes / bandwidth and
    FLOPs / matrix rate, one after the other."""
    bw, peak = copy_gbps * 1e9, tflops * 1e12
    linear = max(weights_read / bw, 2 * (weights_read / 2) * reqs / peak)  # bf16: 2 bytes a weight
    kv_token = spec.kv_bytes_per_token()  # bf16
    attn_flops = 4 * reqs * context * spec.num_heads * spec.head_dim * spec.num_layers
    attn = max(reqs * context * kv_token / bw, attn_flops / peak)
    return 1e3 * (linear + attn)


def checks(data: dict, replicate: dict | None = None) -> list[dict]:
    """Each target with its measured value, bound and verdict (``replicate``: the same run on
    another GPU: every overlapped step within 3 % of this one's)."""
    from dspark_sim.catalog import get_model

    get = {(r["method"], r["reqs"], r["overlap"]): r for r in data["rows"] if "error" not in r}
    gbps, tflops = data["copy"]["gbps"], data["gemm"]["tflops"]
    w = data["weights"]
    spec = get_model(data["provenance"]["model"])
    ctx = data["provenance"]["context_tokens"]
    out = []
    one = get.get(("none", 1, True))
    if one:
        floor = w["read_per_step"] / gbps / 1e6
        out.append({"target": "no speculation, R = 1: step / weight-read time", "value": one["step_ms"] / floor,
                    "bound": 1.10, "detail": f"{one['step_ms']:.2f} ms vs {floor:.2f} ms ({w['read_per_step'] / 1e9:.2f} GB "
                                             f"read at {gbps:.0f} GB/s; all weights {w['total'] / 1e9:.2f} GB: "
                                             f"{w['total'] / gbps / 1e6:.2f} ms)"})
    big = get.get(("none", 64, True))
    if big:
        floor = roofline_ms(spec, w["read_per_step"], 64, ctx, gbps, tflops)
        out.append({"target": "no speculation, R = 64: step / roofline", "value": big["step_ms"] / floor,
                    "bound": 1.15, "detail": f"{big['step_ms']:.2f} ms vs {floor:.2f} ms"})
    hosts = [(k, r["exposed_host_ms"]) for k, r in get.items() if k[2] and r.get("exposed_host_ms") is not None]
    if hosts:
        worst = max(hosts, key=lambda x: x[1])
        out.append({"target": "exposed host time per step, R <= 64 (worst method and R)", "value": worst[1],
                    "bound": 0.3, "detail": f"{worst[0][0]} R = {worst[0][1]}: {worst[1]:.3f} ms"})
    ds, no = get.get(("dspark", 1, True)), get.get(("none", 1, True))
    if ds and no:
        ratio = ds["tok_per_s_per_user"] / no["tok_per_s_per_user"]
        out.append({"target": "DSpark / no speculation tok/s/user at R = 1 (math)", "value": ratio, "bound": 4.0,
                    "at_least": True, "detail": f"{ds['tok_per_s_per_user']:.0f} vs {no['tok_per_s_per_user']:.0f}"})
    if replicate is not None:
        other = {(r["method"], r["reqs"], r["overlap"]): r for r in replicate["rows"] if "error" not in r}
        diffs = [(k, 100 * (other[k]["step_ms"] / r["step_ms"] - 1)) for k, r in get.items() if k in other]
        served = [d for d in diffs if d[0][2]]
        if served:
            worst = max(served, key=lambda d: abs(d[1]))
            waited = [abs(d) for k, d in diffs if not k[2]]
            out.append({"target": "overlapped steps on two GPUs: largest difference, %", "value": abs(worst[1]),
                        "bound": 3.0, "detail": f"{worst[0][0]} R = {worst[0][1]}: {worst[1]:+.1f} % (GPU "
                                                f"{replicate['provenance'].get('gpu_uuid')}); steps waited for: up to "
                                                f"{max(waited, default=0):.1f} %"})
    for c in out:
        c["met"] = c["value"] >= c["bound"] if c.get("at_least") else c["value"] <= c["bound"]
    return out


def table(data: dict, replicate: dict | None = None) -> str:
    lines = ["| method | R | overlap | step ms | target forward ms | draft ms | exposed host ms | tok/s/user | tok/s |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in data["rows"]:
        if "error" in r:
            lines.append(f"| {r['method']} | {r['reqs']} | {'yes' if r['overlap'] else 'no'} | {r['error'][:60]} |"
                         + " |" * 5)
            continue
        host = "-" if r.get("exposed_host_ms") is None else f"{r['exposed_host_ms']:.3f}"
        lines.append(f"| {r['method']} | {r['reqs']} | {'yes' if r['overlap'] else 'no'} | {r['step_ms']:.2f} | "
                     f"{r['verify_ms']:.2f} | {r['draft_ms']:.2f} | {host} | {r['tok_per_s_per_user']:.1f} | "
                     f"{r['tok_per_s']:.0f} |")
    lines += ["", "| target | measured | bound | met | detail |", "|---|---|---|---|---|"]
    for c in checks(data, replicate):
        lines.append(f"| {c['target']} | {c['value']:.3f} | {'>=' if c.get('at_least') else '<='} {c['bound']} | "
                     f"{'yes' if c['met'] else 'no'} | {c['detail']} |")
    return "\n".join(lines)


def header(data: dict) -> str:
    p = data["provenance"]
    return (f"Step times measured {p.get('date')} on {p.get('gpu')} (host {p.get('host')}, {p.get('host_cpu')}; GPU "
            f"{p.get('gpu_uuid')}; driver {p.get('driver')}, CUDA {p.get('cuda')}, torch {p.get('torch')}, triton "
            f"{p.get('triton')}); {p.get('model')}, {p.get('weights')}, acceptance {p.get('acceptance')}, "
            f"{p.get('context_tokens')} cached tokens per request; copy {data['copy']['gbps']:.0f} GB/s and bf16 "
            f"matrix rate {data['gemm']['tflops']:.0f} TFLOP/s measured in the same run; SM clocks before/after "
            f"{p.get('sm_clocks_before')} / {p.get('sm_clocks_after')}. Acceptance synthetic (the simulator's "
            f"model): tokens per step and the tok/s they give are not measured.")


def host_spread(data: dict, replicate: dict, data_path: str, replicate_path: str) -> dict:
    """The host-to-host spread the intervals use (``dspark_sim.intervals``): the largest relative
    difference of one overlapped step's time between the two GPUs' runs of this benchmark."""
    get = {(r["method"], r["reqs"], r["overlap"]): r for r in data["rows"] if "error" not in r}
    other = {(r["method"], r["reqs"], r["overlap"]): r for r in replicate["rows"] if "error" not in r}
    diffs = [abs(other[k]["step_ms"] / r["step_ms"] - 1) for k, r in get.items() if k in other and k[2]]
    return {"max_rel_diff": max(diffs), "steps_compared": len(diffs),
            "source": f"largest overlapped step-time difference of {len(diffs)} (method, R) points timed on two "
                      f"{data['provenance'].get('gpu')} hosts ({data_path} against {replicate_path}), "
                      f"made by python benchmarks/bench_targets.py --replicate {replicate_path} --spread FILE"}


def block_text(data: dict, replicate: dict | None) -> str:
    """The doc block: what was measured where, and the table."""
    return header(data) + "\n\n" + table(data, replicate)
