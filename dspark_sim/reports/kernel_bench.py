"""docs/kernels.md's "kernels alone" block, made from ``profiles/h200/kernel_bench.json``.

``benchmarks/bench_kernels.py`` writes that file on a GPU (one run's ``kernel_bench.json``;
the committed one joins two runs, each row naming its run); :func:`block_text` renders the
runs, the accept and scheduler tables, the correctness lines and the targets from it alone,
so ``benchmarks/doc_blocks.py`` re-derives the block and nothing in it is typed by hand.
No torch here: the docs test runs without a GPU.
"""
from __future__ import annotations

import statistics

# targets of the kernels (definitions, not results)
COPY_TARGET_PCT, COPY_TARGET_ROWS = 80, 256
SCHEDULE_TARGET_US, SCHEDULE_TARGET_SHAPE = 15, (256, 7)
SPEEDUP_TARGET = 5


def fmt(x, spec: str) -> str:
    """``x`` formatted by ``spec``, or "-" where it is missing."""
    return "-" if x is None else format(x, spec)


def _span(values, spec: str = ".0f") -> str:
    lo, hi = min(values), max(values)
    return f"{lo:{spec}}" if f"{lo:{spec}}" == f"{hi:{spec}}" else f"{lo:{spec}}-{hi:{spec}}"


def runs_text(data: dict) -> str:
    """Card, software, date and copy bandwidth of each run, and which rows come from it."""
    used = {name: sorted({r["kernel"] for r in data["accept"] + data["schedule"] if r["run"] == name})
            for name in data["runs"]}
    parts = []
    for name, run in data["runs"].items():
        p = run["provenance"]
        parts.append(f"{name}: {p['device_name']}, driver {p['driver']}, CUDA {p['cuda']}, torch {p['torch']}, "
                     f"triton {p['triton']}, {p['date']}, copy bandwidth {run['copy']['gbps']:.0f} GB/s "
                     f"(1 GiB device-to-device, bytes read + written), `{data['commands'][name]}`; rows in the "
                     f"tables below: {', '.join(used[name]) or 'none'}.")
    return "\n".join(f"- {p}" for p in parts)


def accept_table(rows: list[dict]) -> list[str]:
    """Sampling and greedy side by side, one line per (V, block_size, R)."""
    by = {(r["V"], r["block_size"], r["R"], r["variant"]): r for r in rows}
    shapes = list(dict.fromkeys((r["V"], r["block_size"], r["R"]) for r in rows))
    cols = "graph us | {0} do_bench us | % copy | x torch | x compiled"
    out = [f"| V | block_size | R | rows | sampling {cols.format('sampling')} | greedy {cols.format('greedy')} |",
           "|---|---|---|---|" + "---|" * 10]
    for V, block_size, R in shapes:
        cells = []
        for variant in ("sampling", "greedy"):
            r = by.get((V, block_size, R, variant))
            if r is None or "error" in r:
                cells += ["-"] * 5
                continue
            cells += [fmt(r["kernel_graph_us"], ".1f"), f"{r['kernel_us']:.0f}", f"{r['pct_of_copy']:.0f}",
                      fmt(r.get("speedup_vs_torch"), ".1f"), fmt(r.get("speedup_vs_compiled"), ".1f")]
        out.append(f"| {V} | {block_size} | {R} | {R * (block_size + 1)} | " + " | ".join(cells) + " |")
    return out


def schedule_table(rows: list[dict]) -> list[str]:
    out = [("| mode | block_size | R | kernel graph us | kernel do_bench us | torch graph us | torch do_bench us | "
           "compiled do_bench us | x torch | x compiled | = reference |"), "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        mode = r["mode"] + (" + lag" if r["lag"] else "")
        if "error" in r:
            out.append(f"| {mode} | {r['block_size']} | {r['R']} | error: {r['error'][:80]} |" + " |" * 7)
            continue
        out.append(f"| {mode} | {r['block_size']} | {r['R']} | {fmt(r['kernel_graph_us'], '.1f')} | {r['kernel_us']:.1f} | "
                   f"{fmt(r.get('torch_graph_us'), '.0f')} | {r['torch_us']:.0f} | {fmt(r.get('compiled_us'), '.0f')} | "
                   f"{r['speedup_vs_torch']:.1f} | {fmt(r.get('speedup_vs_compiled'), '.1f')} | "
                   f"{'yes' if r['matches_reference'] else 'no'} |")
    return out


def accept_checks(data: dict) -> str:
    """Outputs against the torch baseline, the host share of do_bench, and the native GPU tests."""
    ok = [r for r in data["accept"] if "error" not in r]
    lines = []
    for variant in ("greedy", "sampling"):
        rows = [r for r in ok if r["variant"] == variant]
        bad = [r["mismatched_requests_vs_torch"] for r in rows]
        lines.append(f"{variant}: outputs differ from the torch baseline in {sum(bad)} of "
                     f"{sum(r['R'] for r in rows)} requests ({_span(bad)} per shape, "
                     f"{sum(b for r, b in zip(rows, bad) if r['R'] == 1)} at R = 1)")
    host = [r["kernel_us"] - r["kernel_graph_us"] for r in ok if r["kernel_graph_us"] is not None]
    tests = {name: run["gpu_tests"]["summary"] for name, run in data["runs"].items() if run.get("gpu_tests")}
    return (f"On the card, {'; '.join(lines)}. do_bench minus graph time (the wrapper's host cost) over the "
            f"accept rows: median {statistics.median(host):.0f} us, {_span(host)} us. Native GPU run of "
            f"`tests/test_kernels_accept.py`: " + ("; ".join(f"{n}: {s}" for n, s in tests.items()) or "none") + ".")


def schedule_checks(rows: list[dict]) -> str:
    ok = [r for r in rows if "error" not in r]
    matched = sum(r["matches_reference"] for r in ok)
    theta = max(abs(r["theta"] / r["theta_ref"] - 1) for r in ok)
    return (f"{matched} of {len(rows)} scheduled batches matched the loop reference exactly (lengths and K); "
            f"Theta within {theta:.1e} (relative) of the reference's.")


def _copy_cells(rows: list[dict]) -> tuple[str, bool, bool]:
    """The copy-bandwidth shares of the large rows in words, whether all and whether any reach the target."""
    big = [r for r in rows if "error" not in r and r["rows"] >= COPY_TARGET_ROWS]
    parts = []
    for variant in ("greedy", "sampling"):
        spans = [f"{_span([r['pct_of_copy'] for r in big if r['variant'] == variant and r['rows'] == n])} % at {n}"
                 for n in sorted({r["rows"] for r in big})
                 if any(r["variant"] == variant and r["rows"] == n for r in big)]
        parts.append(f"{variant.capitalize()}: " + ", ".join(spans) + " rows.")
    return " ".join(parts), all(r["pct_of_copy"] >= COPY_TARGET_PCT for r in big), \
        any(r["pct_of_copy"] >= COPY_TARGET_PCT for r in big)


def targets_table(data: dict) -> list[str]:
    """Each target and what the rows say of it."""
    text, all_met, some = _copy_cells(data["accept"])
    R, block_size = SCHEDULE_TARGET_SHAPE
    prod = [r for r in data["schedule"] if r["mode"] == "production" and not r["lag"] and "error" not in r]
    row = next(r for r in prod if (r["R"], r["block_size"]) == (R, block_size))
    small = [r["kernel_graph_us"] for r in prod if r["R"] < R and r["kernel_graph_us"] is not None]
    graph_ratio = row["torch_graph_us"] / row["kernel_graph_us"] if row.get("torch_graph_us") else None
    fast = row["kernel_graph_us"] <= SCHEDULE_TARGET_US
    speed = row["speedup_vs_torch"] >= SPEEDUP_TARGET
    return ["| target | reached |", "|---|---|",
            (f"| accept >= {COPY_TARGET_PCT} % of copy bandwidth once R (block_size + 1) >= {COPY_TARGET_ROWS} rows | "
            f"**{'met' if all_met else 'partly' if some else 'missed'}.** {text} |"),
            (f"| schedule_verify <= {SCHEDULE_TARGET_US} us at R = {R}, block_size = {block_size} | "
            f"**{'met' if fast else 'missed'}:** {row['kernel_graph_us']:.1f} us GPU time (graph), "
            f"{row['kernel_us']:.1f} us do_bench. R < {R} takes {_span(small, '.1f')} us (graph). |"),
            (f"| schedule_verify >= {SPEEDUP_TARGET}x faster than the torch reference | "
            f"**{'met' if speed else 'missed'}:** at R = {R}, block_size = {block_size}: {row['speedup_vs_torch']:.0f}x "
            f"(do_bench, eager torch), {fmt(row.get('speedup_vs_compiled'), '.1f')}x over `torch.compile`, "
            f"{fmt(graph_ratio, '.1f')}x graph against graph. |")]


def block_text(data: dict) -> str:
    """The block: runs, accept table and checks, scheduler table and check, targets."""
    return "\n".join([("Made from `profiles/h200/kernel_bench.json` (`python benchmarks/doc_blocks.py write`); "
                      "its runs, and which rows each gave:"), "", runs_text(data), "",
                      "### accept", "", *accept_table(data["accept"]), "", accept_checks(data), "",
                      "### schedule_verify", "", *schedule_table(data["schedule"]), "",
                      schedule_checks(data["schedule"]), "", "### Targets", "", *targets_table(data)])
