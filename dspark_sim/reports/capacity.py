"""``docs/capacity.md``'s worked example from its committed answer (``benchmarks/capacity_example.py``)."""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
JSON = ROOT / "docs" / "bench" / "capacity_example.json"


def block_text(data: dict) -> str:
    """The example as docs/capacity.md shows it: the command and what it prints."""
    from dspark_sim.capacity.report import answer_text

    command = "dspark-sim capacity " + " ".join(data["args"])
    return (f"Made by `python benchmarks/capacity_example.py` at commit {data['commit']} on {data['date']} "
            f"(`{JSON.relative_to(ROOT)}`):\n\n```\n$ {command}\n{answer_text(data['capacity'])}\n```")
