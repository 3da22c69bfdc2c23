"""The decoder's throughput by method and batch (``benchmarks/bench_decoder.py --run`` on a
GPU): its tables, the two targets with their measured ratios, and the doc block."""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
JSON = ROOT / "profiles" / "h200" / "decoder_bench.json"


def table(data: dict) -> str:
    """Markdown tables: tok/s/user and throughput by method and batch, then the checks."""
    rows = [r for r in data["rows"] if "error" not in r]
    methods = list(dict.fromkeys(r["method"] for r in data["rows"]))
    batches = sorted({r["reqs"] for r in rows})
    get = {(r["method"], r["reqs"]): r for r in rows}
    lines = []
    for title, key, fmt in (("tok/s/user", "tok_per_s_per_user", "{:.1f}"),
                            ("throughput, tok/s", "tok_per_s", "{:.0f}"),
                            ("tokens per step per user", "tokens_per_step_per_user", "{:.2f}"),
                            ("step ms (median)", "step_ms", "{:.2f}")):
        lines += [f"**{title}**", "", "| method | " + " | ".join(f"R={b}" for b in batches) + " |",
                  "|---|" + "---|" * len(batches)]
        for m in methods:
            cells = [fmt.format(get[(m, b)][key]) if (m, b) in get else "-" for b in batches]
            lines.append(f"| {m} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += checks(get)
    errors = [r for r in data["rows"] if "error" in r]
    lines += [f"- error: {r['method']} R={r['reqs']}: {r['error']}" for r in errors]
    return "\n".join(lines)


SYNTHETIC_NOTE = ("Acceptance is synthetic (drawn from the simulator's acceptance model, the Qwen3 MTP rows "
                  "from the DeepSeek-V3 MTP preset it borrows): the tokens per step, and the tok/s and speed-ups "
                  "they give, rest on that model; only the step times are measured.")


def checks(get: dict) -> list[str]:
    """The two targets of issue 6, with their measured ratios."""
    out = []
    a, b = get.get(("dspark", 1)), get.get(("none", 1))
    if a and b:
        ratio = a["tok_per_s_per_user"] / b["tok_per_s_per_user"]
        out.append(f"- DSpark tok/s/user at batch 1 = {ratio:.2f}x no speculation "
                   f"(target >= 3x): {'met' if ratio >= 3 else 'MISSED'} (step times measured, acceptance synthetic)")
    a, b = get.get(("dspark", 256)), get.get(("dspark-full", 256))
    if a and b:
        ratio = a["tok_per_s"] / b["tok_per_s"]
        out.append(f"- DSpark throughput at batch 256 = {ratio:.2f}x the full-block verify "
                   f"(target >= 1x): {'met' if ratio >= 1 else 'MISSED'} (step times measured, acceptance synthetic)")
    return out


def block_text(data: dict) -> str:
    """The doc block: what was measured where, and the tables."""
    prov = data["provenance"]
    head = (f"Step times measured {prov.get('date')} on {prov.get('gpu')} ({prov.get('sm_count')} SMs, driver "
            f"{prov.get('driver')}, CUDA {prov.get('cuda')}, torch {prov.get('torch')}, triton "
            f"{prov.get('triton')}); {prov.get('model')}, {prov.get('weights')}, acceptance "
            f"{prov.get('acceptance')}, {prov.get('context_tokens')} cached tokens per request, "
            f"temperature {prov.get('temperature')}; SM clocks before/after: "
            f"{prov.get('sm_clocks_before')} / {prov.get('sm_clocks_after')}. {SYNTHETIC_NOTE}")
    return f"{head}\n\n{table(data)}"
