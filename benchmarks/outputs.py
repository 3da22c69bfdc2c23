"""What benchmarks write: result files written whole, and generated blocks in the docs (the
text between ``<!-- tag:begin -->`` and ``<!-- tag:end -->``)."""
from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path

from dspark_sim.reports.blocks import read_block, write_block  # noqa: F401  (the scripts' import)

REPO = Path(__file__).resolve().parents[1]


def write_result(path, data: dict) -> None:
    """The result so far as JSON, written whole (a run cut short keeps what it measured);
    nothing when ``path`` is None."""
    if path:
        from dspark_sim.cost.jsonio import write_json_atomic
        write_json_atomic(path, data)


def code_commit(*paths: str) -> str:
    """The repository's git revision, with ``+changes`` where the work tree differs from it under
    ``paths`` (the code a benchmark's figures depend on)."""
    def git(*cmd: str) -> str:
        return subprocess.run(["git", "-C", str(REPO), *cmd], capture_output=True, text=True).stdout.strip()

    return git("rev-parse", "--short", "HEAD") + ("+changes" if git("status", "--porcelain", "--", *paths) else "")


def machine() -> str:
    """The machine a benchmark ran on, in words (architecture, CPUs, Python, OS)."""
    return f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, {platform.system()}"
