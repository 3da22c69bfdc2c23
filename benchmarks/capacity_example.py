"""docs/capacity.md's example: `dspark-sim capacity` on the shipped Azure code trace.

    python benchmarks/capacity_example.py          # run it, write docs/bench/capacity_example.json

Runs the command below and commits its ``capacity.json`` with the command, the commit and the
date beside it; the example block of docs/capacity.md is re-derived from that file by
``benchmarks/doc_blocks.py`` (:func:`dspark_sim.reports.capacity.block_text`), so the page cannot drift from its data.
The search is deterministic and its file holds no wall-clock times: re-running it on the
same commit gives the same table.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from outputs import code_commit, write_result

from dspark_sim.reports.capacity import JSON

REPO = Path(__file__).resolve().parents[1]
ARGS = ["examples/azure_code_h200.yaml", "--price-per-gpu-hour", "h100=2.5,h200=3.5,b200=5.5,b300=7", "--jobs", "2"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.parse_args(argv)  # no options: --help says what it runs
    with tempfile.TemporaryDirectory(prefix="capacity-example-") as tmp:
        cmd = [sys.executable, "-m", "dspark_sim.cli", "capacity", *ARGS, "--out", tmp + "/out", "--no-plots",
               "--quiet"]
        subprocess.run(cmd, check=True, cwd=REPO)
        report = json.loads((Path(tmp) / "out" / "capacity.json").read_text())
    write_result(JSON, {"args": ARGS, "commit": code_commit("dspark_sim", "profiles"),
                        "date": time.strftime("%Y-%m-%d", time.gmtime()), "capacity": report})
    print(f"wrote {JSON.relative_to(REPO)}; `python benchmarks/doc_blocks.py write` updates docs/capacity.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
