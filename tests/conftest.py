"""Shared test set-up: kernels run on the CPU through Triton's interpreter."""
import os
import sys
from pathlib import Path

import pytest
import yaml

# Without a GPU, Triton kernels run in its interpreter (must be set before triton loads).
os.environ.setdefault("TRITON_INTERPRET", "1")

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"


@pytest.fixture
def write_scenario(tmp_path):
    """Write a scenario mapping to a YAML file in the test's own temp dir; return its path."""

    def write(data: dict, name: str = "scenario.yaml") -> Path:
        path = tmp_path / name
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return path

    return write


def synthetic_scenario(num_requests=50, rate_per_s=1.0, prompt=500, output=50, **over) -> dict:
    """A small synthetic scenario with constant lengths (hand-checkable)."""
    data = {
        "name": "test",
        "workload": {"synthetic": {"num_requests": num_requests, "rate_per_s": rate_per_s,
                                   "arrival": "poisson",
                                   "prompt_tokens": {"dist": "constant", "mean": prompt},
                                   "output_tokens": {"dist": "constant", "mean": output}},
                     "domain": "math"},
        "model": "qwen3-8b", "gpu": "h200",
        "deployment": {"replicas": 1, "tp": 1, "max_running_requests": 256, "max_batched_tokens": 8192},
        "speculation": {"method": "none"},
        "slo": {"ttft_ms": 2000, "tpot_ms": 50},
        "seed": 0,
    }
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    return data


sys.path.insert(0, str(Path(__file__).parent))
