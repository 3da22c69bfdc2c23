"""The GPUs: the catalogue's specs, and the SM clocks held under sustained load
(``benchmarks/sustained_clocks.py`` on a GPU), as doc blocks."""
from __future__ import annotations

import datetime as dt
import json
import statistics
from pathlib import Path


def _smi(path: Path) -> list:
    rows = []
    for line in path.read_text().splitlines():
        f = [x.strip() for x in line.split(",")]
        if len(f) < 5 or not f[1].endswith("MHz"):
            continue
        t = dt.datetime.strptime(f[0], "%Y/%m/%d %H:%M:%S.%f").replace(tzinfo=dt.timezone.utc).timestamp()
        rows.append((t, int(f[1].split()[0]), float(f[2].split()[0]), f[4]))
    return rows


def table(data: dict, smi: list) -> list[str]:
    """Per shape: the first calls' step time and the last second's, the SM clock and power then."""
    lines = ["| method | kind | size | first ms | last-second ms | slower | SM clock first / last (MHz) | "
             "power last (W) | capped samples |", "|---|---|---|---|---|---|---|---|---|"]
    for c in data["shapes"]:
        calls = c["calls"]
        first = statistics.median(x[1] for x in calls[:8]) * 1e3
        last = statistics.median(x[1] for x in calls if x[0] > data["provenance"]["hold_s"] - 1.0) * 1e3
        s0 = [r for r in smi if c["start_unix"] <= r[0] <= c["start_unix"] + 0.3]
        s1 = [r for r in smi if c["end_unix"] - 1.0 <= r[0] <= c["end_unix"]]
        during = [r for r in smi if c["start_unix"] <= r[0] <= c["end_unix"]]
        capped = sum(int(r[3], 16) & 0x4 != 0 for r in during)
        size = f"{c['reqs']} reqs, {c['tokens']} tokens" if "reqs" in c else f"chunk {c['chunk']}"
        clk = lambda rs: f"{statistics.mean(r[1] for r in rs):.0f}" if rs else "-"  # noqa: E731
        pw = f"{statistics.mean(r[2] for r in s1):.0f}" if s1 else "-"
        lines.append(f"| {c['method']} | {c['kind']} | {size} | {first:.3f} | {last:.3f} | {last / first - 1:+.1%} | "
                     f"{clk(s0)} / {clk(s1)} | {pw} | {capped} of {len(during)} |")
    return lines


def block_text(path: Path) -> str:
    """docs/profiles.md's block: the table with where it came from."""
    data = json.loads(path.read_text())
    p = data["provenance"]
    head = (f"Measured {p['date']} on {p['gpu']} ({p['gpu_uuid']}; driver {p['driver']}, torch {p['torch']}, "
            f"triton {p['triton']}; tree {p.get('tree', '?')}); {p['model']}, {p['weights']}; each shape held "
            f"{p['hold_s']} s after {p['rest_s']} s idle; SM clock and power from nvidia-smi every 50 ms; capped: "
            "samples with the software power cap active (event reason 0x4). Made by `python "
            "benchmarks/sustained_clocks.py --run` (table: `python benchmarks/sustained_clocks.py`).")
    return head + "\n\n" + "\n".join(table(data, _smi(path.with_name(p["smi_log"]))))


def gpu_spec_block(gpus=("h200", "h100", "b200", "b300", "a100")) -> str:
    """The spec-sheet numbers projections scale by, from the catalog (dense rates), with citations."""
    from dspark_sim.catalog import get_gpu

    lines = ["Made from `dspark_sim/catalog/gpus.py`.", "", "| GPU | HBM bandwidth | dense bf16 | citation |",
             "|---|---|---|---|"]
    for name in gpus:
        g = get_gpu(name)
        lines.append(f"| {name} | {g.hbm_bytes_per_s / 1e12:g} TB/s | {g.bf16_flops / 1e12:,.4g} TFLOP/s | {g.source} |")
    return "\n".join(lines)
