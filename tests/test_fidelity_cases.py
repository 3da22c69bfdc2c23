"""The fidelity benchmark's traces: what the decoder served is what the simulator replays."""
import csv
import sys
from pathlib import Path

import numpy as np

from dspark_sim.workload import read_trace

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import fidelity  # noqa: E402


def test_trace_of_a_decoder_run_replays_its_requests(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    rows = [(2, 0.75, 300, 17), (0, 0.0, 1200, 40), (1, 0.125, 64, 5)]
    with open(run / "requests.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["request_id", "arrival_s", "prompt_tokens", "output_tokens"])
        w.writerows(rows)
    assert fidelity.trace_of_run(run, tmp_path / "t.csv") == 3
    [chunk] = list(read_trace(tmp_path / "t.csv", fmt="azure"))
    assert chunk.prompt_tokens.tolist() == [1200, 64, 300]  # in request-id order
    assert chunk.output_tokens.tolist() == [40, 5, 17]
    np.testing.assert_allclose(chunk.arrival_s, [0.0, 0.125, 0.75], atol=1e-6)


def test_synthetic_cases_are_deterministic_and_fit_the_decoder():
    a = fidelity.synthetic(50, 10.0, 3)
    b = fidelity.synthetic(50, 10.0, 3)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    arrival, prompt, output = a
    assert arrival[0] == 0.0 and np.all(np.diff(arrival) >= 0)
    assert (prompt + output).max() <= fidelity.MAX_MODEL_LEN - 16 and output.min() >= 64


def test_compare_simulates_the_requests_a_decoder_run_served(tmp_path):
    """A committed H200 decoder run, compared again: the simulator replays exactly its
    requests, both runs and the plot land under runs/<case>, and the errors are finite."""
    import shutil

    src = fidelity.VALIDATION / "real" / "visit4"
    real = tmp_path / "real"
    shutil.copytree(src / "syn-light__dspark", real / "syn-light__dspark")
    shutil.copy(src / "sps_dspark.json", real / "sps_dspark.json")
    [row] = fidelity.compare([real], tmp_path / "out")
    case = tmp_path / "out" / "runs" / "syn-light__dspark"
    assert row["case"] == "syn-light__dspark" and row["method"] == "dspark"
    assert (case / "sim" / "requests.csv").is_file() and (case / "validate.png").is_file()
    served = (real / "syn-light__dspark" / "requests.csv").read_text().count("\n")
    assert (case / "sim" / "requests.csv").read_text().count("\n") == served
    assert all(np.isfinite(m["rel_error"]) for m in row["metrics"].values())
    summary = fidelity.summarise([row])
    assert summary["output_throughput"]["cases"] == 1
    text = fidelity.markdown([row], summary, {}, "x", ("elsewhere", [row]))
    assert "## Replicate on another machine (`elsewhere`)" in text and text.count("| syn-light__dspark |") == 2
