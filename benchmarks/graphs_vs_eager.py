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
import sys
from pathlib import Path

from dspark_sim.reports.graphs_vs_eager import block_text



def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="qwen3-8b")
    p.add_argument("--doc", help="write the table between markers into this Markdown file")
    args = p.parse_args(argv)
    text = block_text(args.model)
    print(text)
    if args.doc:
        from outputs import write_block

        write_block(Path(args.doc), "graphs_vs_eager", text)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    sys.exit(main())
