"""What benchmarks write: result files written whole, and generated blocks in the docs (the
text between ``<!-- tag:begin -->`` and ``<!-- tag:end -->``)."""
from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def write_result(path, data: dict) -> None:
    """The result so far as JSON, written whole (a run cut short keeps what it measured);
    nothing when ``path`` is None."""
    if path:
        from dspark_sim.cost.jsonio import write_json_atomic
        write_json_atomic(path, data)


def write_block(path: Path, tag: str, text: str) -> None:
    """Replace the block between ``<!-- tag:begin -->`` and ``<!-- tag:end -->`` (or append it)."""
    begin, end = f"<!-- {tag}:begin -->", f"<!-- {tag}:end -->"
    doc = path.read_text()
    block = f"{begin}\n{text}\n{end}"
    doc = doc[:doc.index(begin)] + block + doc[doc.index(end) + len(end):] if begin in doc \
        else doc.rstrip("\n") + "\n\n" + block + "\n"
    path.write_text(doc)


def read_block(path: Path, tag: str) -> str | None:
    """The text between ``<!-- tag:begin -->`` and ``<!-- tag:end -->`` of ``path`` (None without markers)."""
    begin, end = f"<!-- {tag}:begin -->", f"<!-- {tag}:end -->"
    doc = Path(path).read_text()
    if begin not in doc or end not in doc:
        return None
    return doc[doc.index(begin) + len(begin):doc.index(end)].strip("\n")


def code_commit(*paths: str) -> str:
    """The repository's git revision, with ``+changes`` where the work tree differs from it under
    ``paths`` (the code a benchmark's figures depend on)."""
    def git(*cmd: str) -> str:
        return subprocess.run(["git", "-C", str(REPO), *cmd], capture_output=True, text=True).stdout.strip()

    return git("rev-parse", "--short", "HEAD") + ("+changes" if git("status", "--porcelain", "--", *paths) else "")


def machine() -> str:
    """The machine a benchmark ran on, in words (architecture, CPUs, Python, OS)."""
    return f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, {platform.system()}"
