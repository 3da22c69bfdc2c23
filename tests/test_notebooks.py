"""The planner notebooks: stored without outputs, public API only, and each runs top to bottom.

Policy (docs/notebooks.md): notebooks are committed with outputs stripped, so a
diff shows code, never numbers that went stale. Each notebook is executed
headless with nbclient, every cell as shipped, in a temporary copy of
``notebooks/`` and ``examples/``, so a run writes nothing into the repository.
Smaller sizes (fewer requests, trials) are set in a cell inserted after the
parameters cell, as papermill inserts its values.
"""
from __future__ import annotations

import ast
import json
import re
import shutil
import sys
from pathlib import Path

import nbclient
import nbformat
import pytest

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = REPO / "notebooks"
SHIPPED = ("01_capacity_planning", "02_policy_frontier", "03_tuning", "04_acceptance_calibration")
KERNEL = "dspark-sim-test"
# The sizes the test runs at (inserted after the parameters cell): every cell runs, on less work.
SMALL = {"01_capacity_planning": {"MAX_REQUESTS": 200, "PRECISION": 0.1},
         "02_policy_frontier": {"CONCURRENCY": [1, 32, 256]},
         "03_tuning": {"TRIALS": 8, "BASELINE_TRIALS": 3},
         "04_acceptance_calibration": {"DEMO_REQUESTS": 300, "SIM_REQUESTS": 96}}
# What each run must leave behind: lines its explanations print, and files under runs/notebooks/<name>/.
KEY_OUTPUT = {
    "01_capacity_planning": (["Recommendation (", "H100: ", "H200: ", "B200: ", "B300: ", "per M output tokens"],
                             ["capacity.json", "capacity.png"]),
    "02_policy_frontier": (["math: at ", "code: at ", "chat: at ", "traffic sold at", "DSpark verifies",
                            "DSpark's gain over"],
                           ["frontier.json", "frontier.png"]),
    "03_tuning": (["DSpark's Pareto front:", "The tuner's pick", ", deploy trial", "Best none baseline",
                   "--- sglang.yaml ---", "Along DSpark's front"],
                  ["study.db", "tune/report.md", "tune/pareto.png", "tune/sglang.yaml", "tune/vllm.yaml",
                   "tune/trtllm.yaml", "tune/dspark.yaml"]),
    "04_acceptance_calibration": (["request-steps", "ECE raw", "Your drafter's raw confidence", "Plan with your numbers"],
                                  ["demo_log.csv", "sts.json", "preset.json", "reliability.png"]),
}


def _read(name: str):
    return nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)


def _code(nb) -> list[str]:
    return [c.source for c in nb.cells if c.cell_type == "code"]


def test_the_shipped_notebooks_are_there():
    assert sorted(p.stem for p in NOTEBOOKS.glob("*.ipynb")) == list(SHIPPED)


@pytest.mark.parametrize("name", SHIPPED)
def test_stored_without_outputs(name):
    nb = _read(name)
    nbformat.validate(nb)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None and set(cell.metadata) <= {"tags"}, (
                f"{name}.ipynb cell {i} holds outputs or run metadata: strip it (docs/notebooks.md)")
    assert nb.metadata.kernelspec.name == "python3"


@pytest.mark.parametrize("name", SHIPPED)
def test_starts_with_the_cells_to_change(name):
    """A "Change these" heading, then the first two code cells (markdown notes between them)."""
    nb = _read(name)
    heading = next(i for i, c in enumerate(nb.cells) if c.cell_type == "markdown" and "## Change these" in c.source)
    code = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    assert heading < code[0] < code[1]
    assert [c.cell_type for c in nb.cells[heading + 1:code[1]]].count("code") == 1
    # papermill injects its values after the first cell tagged "parameters": the second of the two
    assert [i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", [])] == [code[1]]


@pytest.mark.parametrize("name", SHIPPED)
def test_public_api_only(name):
    """No module, name or attribute starting with an underscore (dunders aside)."""
    def private(text: str) -> bool:
        return any(part.startswith("_") and not part.startswith("__") for part in text.split("."))

    for source in _code(_read(name)):
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ImportFrom):
                assert not private(node.module or ""), node.module
                assert not [a.name for a in node.names if private(a.name)], ast.unparse(node)
            elif isinstance(node, ast.Import):
                assert not [a.name for a in node.names if private(a.name)], ast.unparse(node)
            elif isinstance(node, ast.Attribute):
                assert not private(node.attr), ast.unparse(node)


@pytest.fixture
def kernel_name(tmp_path, monkeypatch):
    """A kernel spec for this very interpreter, so the notebooks run in the test's environment."""
    spec = tmp_path / "jupyter" / "kernels" / KERNEL
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "dspark-sim tests", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "jupyter" / "runtime"))
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    return KERNEL


def _texts(nb) -> str:
    parts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if out.output_type == "stream":
                parts.append(out.text)
            elif "text/plain" in out.get("data", {}):
                parts.append(out.data["text/plain"])
    return "".join(parts)


def _pngs(nb) -> int:
    return sum("image/png" in out.get("data", {}) for c in nb.cells for out in c.get("outputs", []))


@pytest.mark.parametrize("name", SHIPPED)
def test_runs_top_to_bottom(name, tmp_path, kernel_name):
    work = tmp_path / "repo"
    shutil.copytree(REPO / "examples", work / "examples")
    (work / "notebooks").mkdir()
    shutil.copy(NOTEBOOKS / f"{name}.ipynb", work / "notebooks")
    nb = nbformat.read(work / "notebooks" / f"{name}.ipynb", as_version=4)
    params = next(i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", []))
    for key in SMALL[name]:
        assert re.search(rf"^{key} = ", nb.cells[params].source, re.MULTILINE), f"{name}: no parameter {key}"
    nb.cells.insert(params + 1, nbformat.v4.new_code_cell("\n".join(f"{k} = {v!r}" for k, v in SMALL[name].items())))

    # the timeout only keeps a hung kernel from holding the suite; speed is not asserted here
    nbclient.NotebookClient(nb, kernel_name=kernel_name, timeout=600,
                            resources={"metadata": {"path": str(work / "notebooks")}}).execute()
    text = _texts(nb)
    lines, files = KEY_OUTPUT[name]
    for line in lines:
        assert line in text, f"{name}: no output line with {line!r}"
    assert _pngs(nb) >= 1, f"{name}: no figure displayed"
    runs = work / "runs" / "notebooks" / name
    for f in files:
        assert (runs / f).is_file() and (runs / f).stat().st_size > 0, f"{name}: {f} not written"
    assert not re.search(r"\bnan\b", text, re.IGNORECASE), f"{name}: a computed figure is NaN"
