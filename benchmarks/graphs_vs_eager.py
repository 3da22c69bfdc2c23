"""Where CUDA graphs pay: whole decode steps with and without graphs, from the profiler's logs.

    python benchmarks/graphs_vs_eager.py [--model qwen3-8b] [--doc docs/decoder.md]

The profiler (``dspark-profile ... --part step --eager-steps``) times whole
``Decoder.decode`` steps as served, once replaying CUDA graphs and once eagerly,
and prints one line per point (``step ('none', 8, 1024, True) 8.130 ms (12 steps)``).
This reads those lines from the committed logs (``profiles/h200/raw/logs/``; the
raw JSON holds only the runs that finished) and prints, per drafter kind and
running requests R, the median step with graphs, without, and the speed-up.
"""
from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LOGS = REPO / "profiles" / "h200" / "raw" / "logs"
LINE = re.compile(r"^step (\(.*\)) ([0-9.]+) ms \((\d+) steps\)$")
BEGIN, END = "<!-- graphs_vs_eager:begin -->", "<!-- graphs_vs_eager:end -->"


def read_points(model: str) -> tuple[dict, list[Path]]:
    """``{(kind, R, graphs): ms}`` of ``model`` from the profiler logs (a later call wins).

    Step lines name no model: ``logs/calls.json`` lists the models each call profiled, in
    order; a model's lines end at its ``wrote .../raw_<model>.json`` line (or at the end of
    the log, for a run cut off before writing)."""
    calls = json.loads((LOGS / "calls.json").read_text())
    points, used = {}, []
    for name, call in sorted(calls.items()):
        models, block, i = list(call["models"]), {}, 0
        for line in (LOGS / name).read_text().splitlines():
            m = LINE.match(line.strip())
            if m:
                kind, reqs, _, graphs = ast.literal_eval(m.group(1))
                block[(kind, reqs, graphs)] = float(m.group(2))
            elif line.startswith("wrote ") and "raw_" in line:
                if i < len(models) and models[i] == model:
                    points.update(block)
                    used.append(LOGS / name)
                block, i = {}, i + 1
        if block and i < len(models) and models[i] == model:
            points.update(block)
            used.append(LOGS / name)
    return points, list(dict.fromkeys(used))


def table(points: dict) -> str:
    kinds = [k for k in ("none", "chain", "block") if any(p[0] == k for p in points)]
    reqs = sorted({p[1] for p in points})
    lines = ["| drafter | " + " | ".join(f"R={r}" for r in reqs) + " |", "|---|" + "---|" * len(reqs)]
    for kind in kinds:
        cells = []
        for r in reqs:
            g, e = points.get((kind, r, True)), points.get((kind, r, False))
            if g and e:
                cells.append(f"{g:.1f} / {e:.1f} ms ({e / g:.2f}x)")
            else:
                cells.append(f"{g:.1f} / - ms" if g else "-")
        lines.append(f"| {kind} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="qwen3-8b")
    p.add_argument("--doc", help="write the table between markers into this Markdown file")
    args = p.parse_args(argv)
    points, paths = read_points(args.model)
    text = (f"Whole decode steps of {args.model} (context 1,024 tokens a request, temperature 1, "
            "synthetic acceptance), median of 12 steps: with CUDA graphs / eager (eager / graphs). "
            "From `" + "`, `".join(str(x.relative_to(REPO)) for x in paths) + "`; missing cells "
            "were not timed before the call's time ran out.\n\n" + table(points))
    print(text)
    if args.doc:
        doc = Path(args.doc).read_text()
        block = f"{BEGIN}\n{text}\n{END}"
        doc = doc[:doc.index(BEGIN)] + block + doc[doc.index(END) + len(END):] if BEGIN in doc \
            else doc.rstrip("\n") + "\n\n" + block + "\n"
        Path(args.doc).write_text(doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
