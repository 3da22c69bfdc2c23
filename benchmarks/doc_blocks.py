"""The generated tables in the docs, re-derived from the committed data they were made from.

    python benchmarks/doc_blocks.py check     # each block against what its data gives now
    python benchmarks/doc_blocks.py write     # rewrite every block from its data

The blocks and pages, and what makes each, are :mod:`dspark_sim.reports.registry`
(``tests/test_doc_blocks.py`` fails when one is stale).
"""
from __future__ import annotations

import argparse
import sys

from dspark_sim.reports import registry


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("command", choices=("check", "write"))
    args = p.parse_args(argv)
    if args.command == "write":
        registry.write()
        print(f"wrote {len(registry.BLOCKS)} blocks")
        return 0
    bad = registry.stale()
    for name in bad:
        print(f"stale: {name} (python benchmarks/doc_blocks.py write)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
