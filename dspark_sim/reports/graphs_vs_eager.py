"""Whole decode steps with CUDA graphs against eager, read from the profiler's committed logs
(``profiles/h200/raw/logs``): the table and its doc block."""
from __future__ import annotations

import ast
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LOGS = ROOT / "profiles" / "h200" / "raw" / "logs"


LINE = re.compile(r"^step (\(.*\)) ([0-9.]+) ms \((\d+) steps\)$")


def read_points(model: str) -> tuple[dict, list[Path]]:
    """``{(kind, R, graphs): (ms, log)}`` of ``model`` from the profiler logs (a later call
    wins), and the logs used.

    Step lines name no model: ``logs/calls.json`` lists the models each call profiled, in
    order; a model's lines end at its ``wrote .../raw_<model>.json`` line (or at the end of
    the log, for a run cut off before writing)."""
    calls = json.loads((LOGS / "calls.json").read_text())
    points = {}
    for name, call in sorted(calls.items()):
        models, block, i = list(call["models"]), {}, 0
        for line in (LOGS / name).read_text().splitlines():
            m = LINE.match(line.strip())
            if m:
                kind, reqs, _, graphs = ast.literal_eval(m.group(1))
                block[(kind, reqs, graphs)] = (float(m.group(2)), LOGS / name)
            elif line.startswith("wrote ") and "raw_" in line:
                if i < len(models) and models[i] == model:
                    points.update(block)
                block, i = {}, i + 1
        if block and i < len(models) and models[i] == model:
            points.update(block)
    used = sorted({path for _, path in points.values()})
    return points, used


def table(points: dict, used: list[Path]) -> str:
    """Graphs / eager per (drafter, R); the speed-up only where one call (one decoder) timed
    both, each timing marked with its log's number otherwise."""
    kinds = [k for k in ("none", "chain", "block") if any(p[0] == k for p in points)]
    reqs = sorted({p[1] for p in points})
    tag = {path: f"[{i + 1}]" for i, path in enumerate(used)}
    lines = ["| drafter | " + " | ".join(f"R={r}" for r in reqs) + " |", "|---|" + "---|" * len(reqs)]
    for kind in kinds:
        cells = []
        for r in reqs:
            g, e = points.get((kind, r, True)), points.get((kind, r, False))
            if g and e and g[1] == e[1]:
                cells.append(f"{g[0]:.1f} / {e[0]:.1f} ms ({e[0] / g[0]:.2f}x){tag[g[1]]}")
            else:
                cells.append(" / ".join(f"{t[0]:.1f}{tag[t[1]]}" if t else "-" for t in (g, e)) + " ms")
        lines.append(f"| {kind} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def block_text(model: str) -> str:
    """The doc block: where the timings come from, and the table."""
    points, paths = read_points(model)
    logs = ", ".join(f"[{i + 1}] `{x.relative_to(ROOT)}`" for i, x in enumerate(paths))
    return (f"Whole decode steps of {model} (context 1,024 tokens a request, temperature 1, "
            "synthetic acceptance), median of 12 steps: with CUDA graphs / eager, each from the latest "
            f"profiler call that timed it ({logs}). The speed-up (eager / graphs) is given only where one "
            "call, so one decoder, timed both; a cell whose two timings come from different calls (marked "
            "apart) compares different decoders and has none. A dash: not timed.\n\n" + table(points, paths))
