"""Shared test set-up: kernels run on the CPU through Triton's interpreter; skips are counted and named.

Tests of the decoder and the kernels need the ``[gpu]`` extra (torch, triton) and are
skipped without it; the summary names every skip. With ``DSPARK_TEST_REQUIRE_GPU_EXTRA=1``
(as CI sets it) a skip for a missing torch or triton fails the run.
"""
import os
import sys
from collections import defaultdict
from pathlib import Path

import pytest
import yaml

# Without a GPU, Triton kernels run in its interpreter (must be set before triton loads).
os.environ.setdefault("TRITON_INTERPRET", "1")
# One intra-op thread a process (read when torch loads): pytest -n 2 on two cores would
# otherwise run four OpenMP threads whose barriers spin against each other, which slows
# the decoder's many small CPU ops several times over.
os.environ.setdefault("OMP_NUM_THREADS", "1")

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

GPU_EXTRA = ("torch", "triton")
REQUIRE_GPU_EXTRA = "DSPARK_TEST_REQUIRE_GPU_EXTRA"


def _reason(report) -> str:
    longrepr = report.longrepr
    text = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    return text.removeprefix("Skipped: ")


def _missing_extra(report) -> bool:
    return any(f"could not import '{name}'" in _reason(report) for name in GPU_EXTRA)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """One line per skip reason: how many were skipped and which (modules skipped whole count once)."""
    skipped = terminalreporter.stats.get("skipped", [])
    if not skipped:
        return
    by_reason = defaultdict(list)
    for report in skipped:
        by_reason[_reason(report)].append(report.nodeid or str(report.fspath))
    terminalreporter.write_sep("-", f"{len(skipped)} skipped")
    for reason, ids in sorted(by_reason.items()):
        terminalreporter.write_line(f"skipped {len(ids)} ({reason}): {', '.join(sorted(ids))}")


def pytest_sessionfinish(session, exitstatus):
    """Fail the run when the [gpu] extra is required and tests were skipped for want of it."""
    if os.environ.get(REQUIRE_GPU_EXTRA) != "1" or hasattr(session.config, "workerinput"):
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    missing = [r for r in (reporter.stats.get("skipped", []) if reporter else []) if _missing_extra(r)]
    if missing:
        reporter.write_line(f"{REQUIRE_GPU_EXTRA}=1: {len(missing)} skipped for a missing torch or triton: "
                            + ", ".join(sorted(r.nodeid or str(r.fspath) for r in missing)), red=True)
        session.exitstatus = 1
