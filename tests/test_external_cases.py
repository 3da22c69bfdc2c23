"""The external check's data: every case cites its source, none is a Qwen3-8B measurement, every
case builds a scenario, and the summary counts every case it is given."""
import pytest

from dspark_sim.engines.model import shipped_gpu_work
from dspark_sim.validation import published, published_check, published_page


def test_cases_cite_sources_and_leave_qwen3_8b_out():
    sources, cases = published.load_cases()
    assert len({c["id"] for c in cases}) == len(cases)
    for key, src in sources.items():
        assert src["url"].startswith("https://") and src["repo"] and src["path"]
        assert len(src["commit"] or "") == 40 or src.get("date")  # a repository file at a commit, or a dated post
        assert src["setup"] and src["approximations"]
    for case in cases:
        assert case["source"] in sources and case["role"] in ("calibrate", "check")
        assert case["model"] != "qwen3-8b"
        assert set(case["measured"]) <= published.measured_keys() and case["measured"]


@pytest.mark.parametrize("case", published.load_cases()[1], ids=lambda c: c["id"])
def test_every_case_builds_its_scenario(case):
    scenario = published.case_scenario(case)
    assert scenario.engine.name == case["engine"] and scenario.deployment.tp == case["tp"]
    syn = scenario.workload.synthetic
    # a burst or a client at a concurrency limit is replayed with every request the run sent (its ramp
    # and drain depend on the count)
    cap = case["requests"] if case["rate"] == "inf" or "max_concurrency" in case else published.PACED_REQUESTS
    assert syn.num_requests == min(case["requests"], cap)
    assert scenario.workload.max_concurrency == case.get("max_concurrency")
    if "gpu_memory_fraction" in case:
        assert scenario.deployment.gpu_memory_fraction == case["gpu_memory_fraction"]


def test_summary_counts_each_metric_and_judges_the_target():
    rows = [{"role": "check", "error": {"tpot": e, "ttft": 2 * e}} for e in (0.05, -0.08, 0.3)]
    s = published_check.summary(rows, "check")
    assert s["tpot"]["cases"] == 3 and s["tpot"]["median"] == pytest.approx(0.08)
    assert s["tpot"]["max"] == pytest.approx(0.3) and not s["tpot"]["met"]
    assert "throughput" not in s


def test_every_case_explains_its_gap_in_words():
    """A case's ``gap`` is printed beside the generated errors: words only, the figures come from the table."""
    import re

    for case in published.load_cases()[1]:
        assert case.get("gap"), case["id"]
        assert not re.search(r"\d\s*(%|ms\b|us\b|s\b|tok/s)", case["gap"]), (case["id"], case["gap"])


def test_variants_leave_out_only_the_terms_they_name():
    from dspark_sim.engines.model import EngineTerms

    t = EngineTerms(step_host_s=1e-3, step_host_s_per_req=2e-4, frontend_s=0.01, eager_step_s=5e-3, stream_s=1e-4,
                    source="fitted")
    assert published_check.variant_terms(t, "shipped") == t
    no_step = published_check.variant_terms(t, "no step host time")
    assert (no_step.step_host_s, no_step.step_host_s_per_req, no_step.eager_step_s) == (0, 0, 0)
    assert (no_step.frontend_s, no_step.stream_s) == (t.frontend_s, t.stream_s)
    no_front = published_check.variant_terms(t, "no front end")
    assert (no_front.frontend_s, no_front.stream_s) == (0, 0) and no_front.step_host_s == t.step_host_s
    bare = published_check.variant_terms(t, "no host terms")
    assert all(getattr(bare, k) == 0 for k in ("step_host_s", "step_host_s_per_req", "frontend_s", "stream_s"))
    with pytest.raises(ValueError):
        published_check.variant_terms(t, "no GPU")


def test_diagnose_replays_every_variant_and_splits_the_time(tmp_path, monkeypatch):
    """A small slice of a calibration case: its host terms slow it, so leaving them out speeds
    it up; the page names every variant and the prefill share lies in [0, 1]."""
    case = next(c for c in published.load_cases()[1] if c["id"] == "vllm060-sglang-8b-a100-rps4")
    case = {**case, "requests": 40}
    row = published_check.diagnose_case(case, seeds=(0,))
    assert set(row["variants"]) == set(published_check.VARIANTS)
    tpot = {v: row["variants"][v]["predicted"]["tpot"] for v in published_check.VARIANTS}
    assert tpot["no step host time"] < tpot["shipped"] and tpot["no host terms"] < tpot["shipped"]
    assert 0.0 <= row["split"]["prefill_step_share"] <= 1.0 and 0.0 < row["split"]["busy_share"] <= 1.0
    monkeypatch.setattr(published_page, "DIAG_DOC", tmp_path / "d.md")
    monkeypatch.setattr(published_page, "DIAG_JSON", tmp_path / "d.json")
    published_page.write_diagnose_doc([row], "test", seeds=(0,))
    text = (tmp_path / "d.md").read_text()
    assert all(v in text for v in published_check.VARIANTS) and case["id"] in text


def test_what_if_replays_a_case_with_other_terms():
    """A higher FLOP/s share for Hopper's W4A16 experts prefills a lone V4-Flash prompt sooner: the
    case's TTFT falls, and the question changes nothing shipped."""
    case = next(c for c in published.load_cases()[1] if c["id"] == "cookbook-v4flash-h100-fp4-low-latency-c1")
    shipped = published_check.check_case(case, seeds=(0,))
    [faster] = published_check.what_if([case], {"flops_eff": {"fp4-experts-w4a16": 0.6}}, seeds=(0,))
    assert faster["predicted"]["ttft"] < shipped["predicted"]["ttft"]
    [same] = published_check.what_if([case], {"moe_bw_eff": shipped_gpu_work().moe_bw_eff},
                                     seeds=(0,))
    assert same["predicted"] == shipped["predicted"]


@pytest.mark.parametrize("item", ["flops_eff=0.5", "bogus.v4=1", "moe_bw_eff=x", "moe_bw_eff=7", "layer_s=1e-4"])
def test_what_if_refuses_a_bad_term_in_one_line(item):
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "external.py"
    done = subprocess.run([sys.executable, str(script), "what-if", "--set", item], capture_output=True, text=True)
    assert done.returncode == 2 and done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1 and item in done.stderr and "Traceback" not in done.stderr


def test_a_refit_note_goes_once_its_terms_are_fitted_again_or_gone():
    by = "python benchmarks/external.py calibrate"
    note = f"{by}; layer_s, first_token_s again by {by} --only layer_s first_token_s"
    # first_token_s is no longer a term: refitting layer_s supersedes the whole note
    assert published_check.refit_note(note, ("layer_s",)) == f"{by}; layer_s again by {by} --only layer_s"
    # a note naming a term not fitted now stays
    kept = published_check.refit_note(f"{by}; moe_bw_eff again by {by} --only moe_bw_eff", ("layer_s",))
    assert kept == f"{by}; moe_bw_eff again by {by} --only moe_bw_eff; layer_s again by {by} --only layer_s"
