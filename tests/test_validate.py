"""`dspark-sim validate` on two run directories with known differences."""
import csv
import json

import pytest
from conftest import synthetic_scenario

from dspark_sim.cli import main
from dspark_sim.run import run_scenario
from dspark_sim.scenario import load_scenario


def _scale_column(path, column, factor):
    rows = list(csv.DictReader(path.open()))
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=rows[0].keys())
        w.writeheader()
        for r in rows:
            r[column] = repr(float(r[column]) * factor)
            w.writerow(r)


def test_validate_reports_known_differences(tmp_path, write_scenario, capsys):
    data = synthetic_scenario(num_requests=60, rate_per_s=5.0, prompt=500, output=80,
                              speculation={"method": "dspark"})
    path = write_scenario(data)
    real = tmp_path / "real"
    run_scenario(load_scenario(path), real, plots=False, show_progress=False)
    _scale_column(real / "requests.csv", "ttft_ms", 1.25)   # the "real" engine: 25 % slower first tokens
    _scale_column(real / "steps.csv", "step_s", 0.8)        # and 20 % faster steps
    out = tmp_path / "v"
    assert main(["validate", "--scenario", str(path), "--real", str(real), "--out", str(out), "--json"]) == 0
    rows = {r["metric"]: r for r in json.loads((out / "validate.json").read_text())["rows"]}
    assert rows["mean_ttft_ms"]["rel_error"] == pytest.approx(1 / 1.25 - 1, rel=1e-6)
    assert rows["p99_ttft_ms"]["rel_error"] == pytest.approx(1 / 1.25 - 1, rel=1e-6)
    assert rows["mean_itl_ms"]["rel_error"] == pytest.approx(1 / 0.8 - 1, rel=1e-6)
    assert rows["mean_tpot_ms"]["rel_error"] == pytest.approx(0.0, abs=1e-9)
    assert rows["mean_accept_length"]["rel_error"] == pytest.approx(0.0, abs=1e-12)
    assert rows["output_throughput"]["rel_error"] == pytest.approx(0.0, abs=1e-12)
    assert (out / "validate.png").stat().st_size > 0
    json.loads(capsys.readouterr().out)


def test_validate_missing_column_is_one_line(tmp_path, write_scenario, capsys):
    path = write_scenario(synthetic_scenario(num_requests=5))
    real = tmp_path / "real"
    real.mkdir()
    (real / "requests.csv").write_text("request_id,arrival_s\n0,0.0\n")
    (real / "steps.csv").write_text("step_s\n0.1\n")
    assert main(["validate", "--scenario", str(path), "--real", str(real), "--out", str(tmp_path / "v")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "requests.csv" in err[0] and "output_tokens" in err[0]
    assert not (tmp_path / "v").exists()
