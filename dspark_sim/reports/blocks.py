"""A generated block in a markdown file: the text between ``<!-- tag:begin -->`` and
``<!-- tag:end -->``."""
from __future__ import annotations

from pathlib import Path

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
