"""The external check's data: every case cites its source, none is a Qwen3-8B measurement, every
case builds a scenario, and the summary counts every case it is given."""
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import external  # noqa: E402


def test_cases_cite_sources_and_leave_qwen3_8b_out():
    sources, cases = external.load_cases()
    assert len({c["id"] for c in cases}) == len(cases)
    for key, src in sources.items():
        assert src["url"].startswith("https://") and src["repo"] and src["path"] and len(src["commit"]) == 40
        assert src["setup"] and src["approximations"]
    for case in cases:
        assert case["source"] in sources and case["role"] in ("calibrate", "check")
        assert case["model"] != "qwen3-8b"
        assert set(case["measured"]) <= set(external.METRICS.values()) and case["measured"]


@pytest.mark.parametrize("case", external.load_cases()[1], ids=lambda c: c["id"])
def test_every_case_builds_its_scenario(case):
    scenario = external.case_scenario(case)
    assert scenario.engine.name == case["engine"] and scenario.deployment.tp == case["tp"]
    syn = scenario.workload.synthetic
    # a burst is replayed with every request the run sent (its ramp and drain depend on the count)
    cap = case["requests"] if case["rate"] == "inf" else external.PACED_REQUESTS
    assert syn.num_requests == min(case["requests"], cap)
    if "gpu_memory_fraction" in case:
        assert scenario.deployment.gpu_memory_fraction == case["gpu_memory_fraction"]


def test_summary_counts_each_metric_and_judges_the_target():
    rows = [{"role": "check", "error": {"tpot": e, "ttft": 2 * e}} for e in (0.05, -0.08, 0.3)]
    s = external.summary(rows, "check")
    assert s["tpot"]["cases"] == 3 and s["tpot"]["median"] == pytest.approx(0.08)
    assert s["tpot"]["max"] == pytest.approx(0.3) and not s["tpot"]["met"]
    assert "throughput" not in s


def test_every_case_explains_its_gap_in_words():
    """A case's ``gap`` is printed beside the generated errors: words only, the figures come from the table."""
    import re

    for case in external.load_cases()[1]:
        assert case.get("gap"), case["id"]
        assert not re.search(r"\d\s*(%|ms\b|us\b|s\b|tok/s)", case["gap"]), (case["id"], case["gap"])
