"""The sweeps' report: levels against their goals, the best method at each load, decoder runs
read from a device call's archives."""
import tarfile
from pathlib import Path

import pytest

from dspark_sim.run import run_scenario
from dspark_sim.scenario import load_scenario
from dspark_sim.validation import spread, sweep_page, sweep_report

SWEEPS = Path(__file__).resolve().parents[1] / "profiles" / "h200" / "validation" / "sweeps"


def _row(trace, method, errs, real=None):
    fam, level, batching = sweep_report.level_of(trace)
    metrics = {k: {"real": (real or {}).get(k, 100.0), "sim": (real or {}).get(k, 100.0) * (1 + e), "rel_error": e}
               for k, e in errs.items()}
    return {"case": f"{trace}__{method}", "trace": trace, "method": method, "family": fam, "level": level,
            "batching": batching, "metrics": metrics, "real_run": "v"}


def test_a_level_meets_its_goals_only_when_the_median_the_p90_and_the_mean_signed_error_do():
    errs = {"none": (0.01, -0.02, 0.05), "mtp3": (-0.01, 0.03, -0.04), "dspark": (0.0, -0.01, -0.01)}
    keys = ("output_throughput", "p50_tpot_ms", "mean_ttft_ms")
    rows = [_row("sw-chat-090", m, dict(zip(keys, e))) for m, e in errs.items()]
    assert sweep_report.level_summary(rows)["0.9"]["met"]
    # every point leaning +2.5 % on throughput: median and p90 within 3 % / 6 %, the mean signed not
    lean = [_row("sw-chat-150", m, {**dict(zip(keys, e)), "output_throughput": 0.025}) for m, e in errs.items()]
    s = sweep_report.level_summary(lean)["1.5"]
    assert s["metrics"]["output_throughput"]["mean_signed"] == pytest.approx(0.025) and not s["met"]


def test_the_best_method_must_agree_where_the_real_margin_is_wide():
    e2e = {"none": 1000.0, "mtp3": 900.0, "dspark": 880.0}  # dspark best by 2.3 %: no verdict needed
    rows = [_row("sw-long-120-mixed", m, {"mean_e2el_ms": 0.0}, {"mean_e2el_ms": v}) for m, v in e2e.items()]
    [best] = [b for b in sweep_report.best_methods(rows) if b["by"] == "mean_e2el_ms"]
    assert best["real"] == best["sim"] == "dspark" and not best["decides"]
    rows[0]["metrics"]["mean_e2el_ms"]["sim"] = 800.0  # the simulator has none fastest
    e2e["dspark"] = 800.0
    rows[2]["metrics"]["mean_e2el_ms"]["real"] = 800.0  # real: dspark by 12.5 %
    [best] = [b for b in sweep_report.best_methods(rows) if b["by"] == "mean_e2el_ms"]
    assert best["decides"] and best["real"] == "dspark" and not best["agree"]


def test_a_visit_of_archives_is_compared_case_by_case(tmp_path):
    """Two sweep cases served by the simulator stand in for a device call's archive: unpacked,
    replayed and summarised by level, every case's error near zero (the same model both sides)."""
    runs = tmp_path / "sweepA"
    for case in ("sw-chat-030-mixed__none", "sw-chat-150-mixed__none"):
        run_scenario(load_scenario(SWEEPS / f"{case}.yaml"), runs / case, plots=False, show_progress=False)
    (runs / "sps_dspark.json").write_bytes((SWEEPS / "sps_dspark.json").read_bytes())
    visit = tmp_path / "visit99"
    visit.mkdir()
    with tarfile.open(visit / "sweepA.tgz", "w:gz") as tar:
        tar.add(runs, arcname="sweepA")
    data = sweep_report.report(SWEEPS, [visit])
    assert [r["case"] for r in data["cases"]] == ["sw-chat-030-mixed__none", "sw-chat-150-mixed__none"]
    assert set(data["levels"]) == {"0.3", "1.5"}
    for level in data["levels"].values():
        assert abs(level["metrics"]["output_throughput"]["mean_signed"]) < 0.01
    # every step 1 % slower: past saturation the queue grows faster, the TTFT by more than 1 %
    carried = data["carry"]["1.5"]
    assert carried["mean_ttft_ms"]["median"] > 1.0 and carried["output_throughput"]["median"] < 0
    text = sweep_page.markdown(data, "made by hand", tmp_path)
    assert "| 1.5x | 1 |" in text and "## The best method at each load" in text
    assert "## What the goals ask of step prices" in text


def test_the_decoder_against_itself_pairs_only_runs_of_two_visits():
    keys = ("output_throughput", "p50_tpot_ms", "mean_ttft_ms")
    head = [_row("sw-chat-120-mixed", m, dict.fromkeys(keys, 0.0), dict.fromkeys(keys, 100.0))
            for m in ("none", "dspark")]
    other = [_row("sw-chat-120-mixed", m, dict.fromkeys(keys, 0.0), dict.fromkeys(keys, v))
             for m, v in (("none", 104.0), ("dspark", 98.0))]
    for r in other:
        r["real_run"] = "w"
    other[1]["real_run"] = "v"  # the same visit's run on both sides: no pair
    cells = spread.host_to_host(head, other)["1.2"]
    assert cells["mean_ttft_ms"]["points"] == 1
    assert cells["mean_ttft_ms"]["mean_signed"] == pytest.approx(0.04)


def test_one_step_time_change_for_both_hosts_is_the_overlap_of_what_each_asks():
    keys = ("output_throughput", "p50_tpot_ms", "mean_ttft_ms")
    carry = {"output_throughput": -1.0, "p50_tpot_ms": 1.0, "mean_ttft_ms": 4.0}  # % per 1 % of step time

    def rows(ttft):
        out = [_row("sw-chat-150", m, {**dict.fromkeys(keys, 0.0), "mean_ttft_ms": ttft}) for m in ("none", "dspark")]
        for r in out:
            r["scaled"] = {k: r["metrics"][k]["sim"] * (1 + spread.STEP * c) for k, c in carry.items()}
        return out

    def scale(head, other):
        return spread.uniform_scale(rows(head), rows(other), 0.02)["1.5"]

    # the headline 6 % low in TTFT asks for steps 1-2 % slower (TPOT caps it at 2 %); the other host,
    # right, for -0.5 to +0.5 %
    s = scale(-0.06, 0.0)
    assert s["headline"] == pytest.approx([0.04 / 4 / 0.94, 0.02])
    assert s["replicate"] == pytest.approx([-0.005, 0.005]) and s["both"] is None
    s = scale(-0.04, -0.02)  # overlapping asks: a change meets both
    assert s["both"] == pytest.approx([0.02 / 4 / 0.96, 0.04 / 4 / 0.98])
    # a throughput error the carry cannot reach without breaking TTFT: no change on that host
    far = rows(0.0)
    for r in far:
        r["metrics"]["output_throughput"]["rel_error"] = 0.10
    assert spread.uniform_scale(far, rows(0.0), 0.02)["1.5"]["headline"] is None
