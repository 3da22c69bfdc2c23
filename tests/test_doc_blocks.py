"""Every generated table in the docs is what its committed data gives now (dspark_sim/reports/registry.py,
run by benchmarks/doc_blocks.py)."""
import json
import subprocess
import sys
from pathlib import Path

from dspark_sim.reports import frontier, registry

REPO = Path(__file__).resolve().parents[1]


def test_doc_blocks_are_not_stale():
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "doc_blocks.py"), "check"],
                          capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]


def test_a_changed_block_is_caught(tmp_path, monkeypatch):
    """A table edited by hand (or made from other data) is reported stale."""
    doc = tmp_path / "docs" / "decoder.md"
    doc.parent.mkdir()
    text = registry.bench_decoder()
    doc.write_text(f"x\n<!-- bench_decoder:begin -->\n{text}\n<!-- bench_decoder:end -->\n")
    monkeypatch.setattr(registry, "ROOT", tmp_path)
    monkeypatch.setattr(registry, "BLOCKS", {("docs/decoder.md", "bench_decoder"): registry.bench_decoder})
    monkeypatch.setattr(registry, "FILES", {})
    assert registry.stale() == []
    doc.write_text(doc.read_text().replace("| none |", "| none (typed) |", 1))
    assert registry.stale() == ["docs/decoder.md:bench_decoder"]


def test_a_timing_page_is_made_from_its_json(tmp_path, monkeypatch):
    """A timing benchmark's page (docs/bench/*.md) is re-derived from the JSON committed beside it:
    a figure changed in the data, or typed into the page, makes it stale."""
    bench = tmp_path / "docs" / "bench"
    bench.mkdir(parents=True)
    data = (REPO / "docs" / "bench" / "sim.json").read_text()
    (bench / "sim.json").write_text(data)
    monkeypatch.setattr(registry, "ROOT", tmp_path)
    monkeypatch.setattr(registry, "BLOCKS", {})
    monkeypatch.setattr(registry, "FILES", {"docs/bench/sim.md": registry.bench_page("sim")})
    registry.write()
    assert registry.stale() == []
    page = (bench / "sim.md").read_text()
    wall = json.loads(data)["rows"][0]["wall_s"]
    assert f"{wall:.2f}" in page
    (bench / "sim.md").write_text(page.replace(f"{wall:.2f}", f"{wall / 2:.2f}", 1))
    assert registry.stale() == ["docs/bench/sim.md"]
    registry.write()
    (bench / "sim.json").write_text(data.replace(f'"wall_s": {wall}', f'"wall_s": {wall + 1}', 1))
    assert registry.stale() == ["docs/bench/sim.md"]


def test_the_frontier_page_is_made_from_its_json(tmp_path, monkeypatch):
    """docs/dspark_frontier.md is re-derived from docs/bench/dspark_frontier.json: a throughput changed
    in the data makes the page stale, and the page names the cost model and acceptance it rests on."""
    data = json.loads(frontier.JSON.read_text())
    page = frontier.markdown(data)
    assert data["cost_model"]["source"] in page and "substituted" in page
    row = data["domains"]["math"][-1]
    assert f"{row['output_throughput_per_gpu']:.0f}" in page
    (tmp_path / "docs" / "bench").mkdir(parents=True)
    (tmp_path / "docs" / "dspark_frontier.md").write_text(page)
    row["output_throughput_per_gpu"] *= 1.5
    copy = tmp_path / "docs" / "bench" / "dspark_frontier.json"
    copy.write_text(json.dumps(data))
    monkeypatch.setattr(frontier, "JSON", copy)
    monkeypatch.setattr(registry, "ROOT", tmp_path)
    monkeypatch.setattr(registry, "BLOCKS", {})
    monkeypatch.setattr(registry, "FILES", {"docs/dspark_frontier.md": registry.frontier})
    assert registry.stale() == ["docs/dspark_frontier.md"]
