"""Same scenario and seed, separate processes: byte-identical summary.json, requests.csv and steps.csv.

Each run is a fresh ``python -m dspark_sim.cli`` with its own PYTHONHASHSEED, so
nothing may depend on set or dict-of-object ordering, object ids or wall time.
"""
import os
import subprocess
import sys

import pytest
from conftest import EXAMPLES, synthetic_scenario

OUTPUTS = ("summary.json", "requests.csv", "steps.csv")


def _cli(args, hash_seed: int) -> None:
    env = {**os.environ, "PYTHONHASHSEED": str(hash_seed)}
    proc = subprocess.run([sys.executable, "-m", "dspark_sim.cli", *args], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr


def _scenarios():
    mixed = synthetic_scenario(num_requests=300, rate_per_s=40.0,
                               deployment={"replicas": 2, "router": "least_outstanding"},
                               speculation={"method": "dspark"}, seed=7)
    mixed["workload"]["synthetic"].update(arrival="gamma", cv=2.0,
                                          prompt_tokens={"dist": "lognormal", "mean": 800, "sigma": 1.0},
                                          output_tokens={"dist": "lognormal", "mean": 120, "sigma": 0.8})
    mixed["workload"]["domain"] = {"math": 0.3, "code": 0.3, "chat": 0.4}
    trace = synthetic_scenario(speculation={"method": "static", "drafter": "mtp", "block_size": 3})
    trace["workload"] = {"trace": str(EXAMPLES / "traces" / "azure_llm_2023_code.csv"), "time_scale": 20.0,
                         "max_requests": 400, "domain": "code"}
    return {"synthetic-dspark-2-replicas": mixed, "azure-trace-mtp3": trace}


@pytest.mark.parametrize("name", sorted(_scenarios()))
def test_two_processes_write_identical_files(write_scenario, tmp_path, name):
    path = write_scenario(_scenarios()[name])
    for run, hash_seed in (("a", 1), ("b", 2)):
        _cli(["run", str(path), "--out", str(tmp_path / run), "--quiet", "--no-plots"], hash_seed)
    for file in OUTPUTS:
        a, b = (tmp_path / "a" / file).read_bytes(), (tmp_path / "b" / file).read_bytes()
        assert a == b, f"{file} differs between processes"
    assert len((tmp_path / "a" / "requests.csv").read_text().splitlines()) > 100


def test_another_seed_changes_the_requests(write_scenario, tmp_path):
    path = write_scenario(_scenarios()["synthetic-dspark-2-replicas"])
    _cli(["run", str(path), "--out", str(tmp_path / "a"), "--quiet", "--no-plots"], 1)
    _cli(["run", str(path), "--out", str(tmp_path / "b"), "--quiet", "--no-plots", "--seed", "8"], 1)
    assert (tmp_path / "a" / "requests.csv").read_bytes() != (tmp_path / "b" / "requests.csv").read_bytes()


def test_capacity_search_is_identical_across_processes(write_scenario, tmp_path):
    path = write_scenario(synthetic_scenario(num_requests=120, rate_per_s=4.0, prompt=500, output=60))
    flags = ["--gpus", "h200", "--methods", "dspark", "--tp", "1", "--max-requests", "120", "--precision", "0.1",
             "--quiet", "--no-plots"]
    for run, hash_seed in (("a", 3), ("b", 4)):
        _cli(["capacity", str(path), "--slo-tpot-ms", "25", "--out", str(tmp_path / run), *flags], hash_seed)
    assert (tmp_path / "a" / "capacity.json").read_bytes() == (tmp_path / "b" / "capacity.json").read_bytes()
