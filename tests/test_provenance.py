"""Provenance: every output says what its cost model and acceptance rest on, and a missing
host term is filled by a labelled substitute, never priced at zero silently."""
from __future__ import annotations

import json
import warnings
from dataclasses import replace

import pytest
from conftest import synthetic_scenario

from dspark_sim.cli import main
from dspark_sim.cost import DraftWork, StepWork, get_cost_model, substitute
from dspark_sim.cost.profile import ProfileCost, load_profile, shipped_profile_path
from dspark_sim.cost.substitute import RATIO_REQS, fill_host_terms, host_date
from dspark_sim.cost.host_terms import HostFit
from dspark_sim.provenance import basis, provenance_line, scenario_provenance
from dspark_sim.scenario import Scenario

DSPARK = {"method": "dspark", "block_size": 7}


def _scenario(**over) -> Scenario:
    return Scenario.from_dict(synthetic_scenario(num_requests=8, rate_per_s=50.0, prompt=200, output=20, **over))


def _block_step(reqs: int = 8) -> StepWork:
    return StepWork(decode_reqs=reqs, verify_tokens=8 * reqs, decode_context_tokens=300 * reqs,
                    draft=DraftWork("block", reqs, 7, 300 * reqs), running_reqs=reqs)


def test_measured_run_has_no_caveats():
    block = scenario_provenance(_scenario(speculation=DSPARK))
    cost = block["cost_model"]
    assert cost["kind"] == "profile" and cost["projected"] is None and cost["measured"]["gpu"] == "h200"
    assert all(cost["terms"][t]["kind"] == "measured" for t in block["uses"])
    assert block["uses"] == ["target", "draft_block", "host_block", "sched"]
    assert block["acceptance"]["kind"] == "preset" and block["caveats"] == []
    assert provenance_line([block]) is None and basis(block) == "measured h200"


def test_projected_14b_dspark_run_says_so_and_prices_the_missing_term():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        block = scenario_provenance(_scenario(model="qwen3-14b", gpu="b300", speculation=DSPARK))
        from dspark_sim.cost.scenario import scenario_cost
        cost = scenario_cost(_scenario(model="qwen3-14b", gpu="b300", speculation=DSPARK))
    terms = block["cost_model"]["terms"]
    assert terms["target"]["kind"] == "projected" and terms["draft_block"]["kind"] == "projected"
    # the 14B's DSpark host term is measured; its scheduling gap is not (a sibling's, labelled)
    assert terms["host_block"]["kind"] == "measured" and terms["sched"]["kind"] == "substituted"
    line = provenance_line([block])
    assert "projected from h200" in line and "sched substituted" in line and "qwen3-8b" in line
    assert basis(block) == "projected from h200 +" and block["cost_model"]["engine"] == "decoder project"
    assert any("sched" in str(w.message) for w in caught)
    # the substitute is priced, not zero
    assert load_profile(shipped_profile_path("b300", "qwen3-14b")).schedule is None
    assert cost.host_s(_block_step(RATIO_REQS)) > 0 and cost._schedule is not None


def _sibling(model: str, day: str, layers: int, **terms_s: tuple[float, float]):
    """One entry of the sibling table the substitute reads: host terms as (bias, per request) seconds."""
    return (model, day, layers, {k: HostFit(k, b, r) for k, (b, r) in terms_s.items()}, None)


def test_substitute_uses_the_ratio_of_siblings_measured_the_same_day(monkeypatch):
    shipped = load_profile(shipped_profile_path("h200", "qwen3-4b"))
    profile = replace(shipped, host={k: v for k, v in shipped.host.items() if k != "block"})
    day = host_date(shipped.provenance, shipped.measured_date)
    same = _sibling("qwen3-32b", day, 64, none=(1e-4, 2e-6), block=(4e-4, 9e-6))
    older = _sibling("qwen3-8b", "2000-01-01", 36, none=(1e-4, 1e-6), block=(2e-3, 1e-5))
    monkeypatch.setattr(substitute, "_siblings", lambda gpu: (older, same))
    filled, labels = fill_host_terms(profile)
    assert "block" not in profile.host and "block" in filled.host
    # the sibling timed the same day (the same decoder) gives the ratio, not the nearer-sized older one
    ratio = same[3]["block"].seconds(RATIO_REQS) / same[3]["none"].seconds(RATIO_REQS)
    got = filled.host["block"].seconds(RATIO_REQS) / profile.host["none"].seconds(RATIO_REQS)
    assert got == pytest.approx(ratio) and ratio != pytest.approx(1.0)
    assert "qwen3-32b" in labels["host_block"] and "qwen3-8b" not in labels["host_block"]
    # a measured term is never replaced
    assert filled.host["none"] == profile.host["none"]
    # a same-day sibling whose base term is 0 s (host time hidden behind the GPU) gives no
    # ratio: its term is copied, labelled so
    hidden = _sibling("qwen3-32b", day, 64, none=(0.0, 0.0), block=(4e-4, 9e-6))
    monkeypatch.setattr(substitute, "_siblings", lambda gpu: (older, hidden))
    filled, labels = fill_host_terms(profile)
    assert filled.host["block"] == hidden[3]["block"] and labels["host_block"].startswith("copied from qwen3-32b")


def test_a_term_no_sibling_has_is_reported_missing(tmp_path):
    profile = load_profile(shipped_profile_path("h200", "qwen3-14b"))
    lonely = replace(profile, gpu="b200", host={}, schedule=None, projection=None,
                     gpu_spec=load_profile(shipped_profile_path("b200", "qwen3-14b")).gpu_spec)
    path = tmp_path / "b200_qwen3-14b.json"
    lonely.save(path)
    # b200 has no measured sibling profile: nothing to substitute from
    cost = get_cost_model("b200", "qwen3-14b", profile=path)
    assert isinstance(cost, ProfileCost)
    terms = cost.provenance()["terms"]
    assert terms["host_block"]["kind"] == "missing" and terms["sched"]["kind"] == "missing"


def test_borrowed_acceptance_and_tp_and_roofline_are_caveats():
    mtp = scenario_provenance(_scenario(speculation={"method": "static", "drafter": "mtp", "block_size": 3}))
    assert mtp["acceptance"]["kind"] == "substituted" and "deepseek-v3" in mtp["acceptance"]["detail"]
    assert any(c.startswith("acceptance substituted") for c in mtp["caveats"])
    tp2 = scenario_provenance(_scenario(deployment={"tp": 2}))
    assert tp2["cost_model"]["tp"] == {"size": 2, "measured": False,
                                       "detail": "measured at tp=1; tp=2 by sharding ratios, communication modelled"}
    assert any("tp=2" in c for c in tp2["caveats"]) and tp2["cost_model"]["terms"]["comm"]["kind"] == "modelled"
    # the link model's latencies are assumptions, and the one-line summary says so
    assert any(c.startswith("comm modelled") and "assumed" in c for c in tp2["caveats"])
    assert "all-reduce latency 12 us" in provenance_line([tp2])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        roof = scenario_provenance(_scenario(model="qwen3-235b-a22b", deployment={"tp": 8}))
    assert roof["cost_model"]["kind"] == "roofline" and basis(roof) == "roofline"
    assert "roofline" in provenance_line([roof])


def test_run_writes_provenance_beside_the_record_and_prints_one_line(tmp_path, write_scenario, capsys):
    data = synthetic_scenario(num_requests=6, rate_per_s=50.0, prompt=200, output=20, gpu="b300",
                              speculation=DSPARK)
    out = tmp_path / "run"
    assert main(["run", str(write_scenario(data)), "--out", str(out), "--no-plots", "--quiet"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    sidecar = json.loads((out / "provenance.json").read_text())
    assert summary["provenance"] == sidecar
    assert sidecar["cost_model"]["projected"]["from"] == "h200"
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("provenance:")]
    assert len(lines) == 1 and "b300/qwen3-8b profile projected from h200" in lines[0]


def test_a_sibling_whose_base_term_is_zero_gives_no_ratio():
    """The 14B's none and chain host terms are 0 s: a ratio to them is undefined, so a term
    missing from a profile measured the same day is copied from a sibling instead."""
    fourteen = load_profile(shipped_profile_path("h200", "qwen3-14b"))
    assert fourteen.host["none"].seconds(RATIO_REQS) == 0 and fourteen.host["chain"].seconds(RATIO_REQS) == 0
    shipped = load_profile(shipped_profile_path("h200", "qwen3-8b"))
    assert host_date(shipped.provenance, "") == host_date(fourteen.provenance, "")
    profile = replace(shipped, host={k: v for k, v in shipped.host.items() if k != "block"})
    filled, labels = fill_host_terms(profile)
    assert labels["host_block"].startswith("copied from")
    assert filled.host["block"].seconds(RATIO_REQS) > 0


def test_a_profile_whose_prefill_alone_was_timed_again_keeps_its_host_terms_day():
    """The host terms' day is that of the latest run that timed whole steps or the loop's gaps,
    not the latest run's (a later prefill-only run), nor the measured date without runs."""
    steps = {"date": "2026-11-29T15:33:10+00:00", "skipped": {"verify": [], "step": [[1]]}}
    prefill = {"date": "2026-12-01T23:45:00+00:00", "skipped": {"prefill": []}, "merged_from": [steps]}
    assert host_date(prefill, "2026-12-01") == "2026-11-29"
    assert host_date({**steps, "skipped": {"sched": []}, "merged_from": [prefill]}, "x") == "2026-11-29"
    assert host_date({"date": "2026-12-01", "skipped": {"prefill": []}}, "2026-12-01") == "2026-12-01"
    assert host_date(None, "2026-11-30") == "2026-11-30"
