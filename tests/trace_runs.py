"""A hand-made trace simulated on the decoder engine, read back as rows: the step-level tests' runner."""
from __future__ import annotations

import csv

import numpy as np
import yaml

from dspark_sim.run import run_scenario
from dspark_sim.scenario import load_scenario
from dspark_sim.validation.cases import write_trace


def rows(path) -> list[dict]:
    """A record CSV's rows, numbers as floats (text columns left out)."""
    with open(path) as f:
        return [{k: float(v) for k, v in row.items() if k not in ("domain", "status", "reject_reason")}
                for row in csv.DictReader(f)]


def run_trace(tmp_path, name: str, requests, overlap: bool, speculation=None, **deployment):
    """``requests``: (arrival_s, prompt, output) each, Qwen3-8B on one H200 under the decoder engine
    (``overlap``), ``deployment`` keys over 16 places and mixed batching; (requests by id, steps)."""
    d = tmp_path / name
    d.mkdir()
    arrival, prompt, output = (np.array(col) for col in zip(*requests))
    write_trace(d / "trace.csv", arrival, prompt, output)
    data = {"name": name, "model": "qwen3-8b", "gpu": "h200", "seed": 0,
            "workload": {"trace": "trace.csv", "format": "azure", "domain": "chat"},
            "deployment": {"max_running_requests": 16, "max_batched_tokens": 8192, "batching": "mixed", **deployment},
            "speculation": speculation or {"method": "none"}, "engine": {"name": "decoder", "overlap": overlap}}
    (d / "scenario.yaml").write_text(yaml.safe_dump(data))
    run_scenario(load_scenario(d / "scenario.yaml"), d / "out", plots=False, show_progress=False)
    reqs = sorted(rows(d / "out" / "requests.csv"), key=lambda r: r["request_id"])
    return reqs, rows(d / "out" / "steps.csv")
