"""Every generated table in the docs is what its committed data gives now (benchmarks/doc_blocks.py)."""
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_doc_blocks_are_not_stale():
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "doc_blocks.py"), "check"],
                          capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]


def test_a_changed_block_is_caught(tmp_path, monkeypatch):
    """A table edited by hand (or made from other data) is reported stale."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import doc_blocks

    doc = tmp_path / "docs" / "decoder.md"
    doc.parent.mkdir()
    text = doc_blocks._bench_decoder()
    doc.write_text(f"x\n<!-- bench_decoder:begin -->\n{text}\n<!-- bench_decoder:end -->\n")
    monkeypatch.setattr(doc_blocks, "REPO", tmp_path)
    monkeypatch.setattr(doc_blocks, "BLOCKS", {("docs/decoder.md", "bench_decoder"): doc_blocks._bench_decoder})
    monkeypatch.setattr(doc_blocks, "FILES", {})
    assert doc_blocks.stale() == []
    doc.write_text(doc.read_text().replace("| none |", "| none (typed) |", 1))
    assert doc_blocks.stale() == ["docs/decoder.md:bench_decoder"]
