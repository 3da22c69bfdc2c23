"""What benchmarks write: result files written whole, and generated blocks in the docs (the
text between ``<!-- tag:begin -->`` and ``<!-- tag:end -->``)."""
from __future__ import annotations

from pathlib import Path


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
