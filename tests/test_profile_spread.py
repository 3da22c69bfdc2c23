"""The spread term: decode steps of long-tailed contexts, fitted on the profiler's spread rows."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest

from dspark_sim.cost import ProfileCost, StepWork
from dspark_sim.cost.profile import shipped_profile_path
from dspark_sim.cost.profile_format import load_profile
from dspark_sim.cost.shapes import SCALAR
from dspark_sim.errors import InputError
from dspark_sim.profiling import spread

PROFILE = load_profile(shipped_profile_path("h200", "qwen3-8b"))
BASE = replace(PROFILE, target=replace(PROFILE.target, spread_ratio=0.0, spread_slots=0.0))


def _rows(ratio: float, slots: float) -> list[dict]:
    """Spread rows priced by the shipped fit with the term at (ratio, slots)."""
    truth = replace(BASE.target, spread_ratio=ratio, spread_slots=slots)
    rows = []
    for reqs in (16, 32, 64, 128, 256):
        for per_req in (1, 4):
            ctx, longest = 900, 900 + 20 * reqs
            step = sum(truth.parts(reqs, reqs * per_req, 0, reqs * ctx, 0, 0, SCALAR, max_ctx=longest))
            rows.append({"reqs": reqs, "tokens": reqs * per_req, "context": ctx, "max_context": longest,
                         "step_s": step, "uniform_s": step})
    return rows


def test_the_term_is_recovered_from_spread_rows_and_held_out_levels_are_close():
    got, report = spread.with_spread_term(BASE, {"spread": _rows(0.4, 64.0)})
    assert got.target.spread_ratio == pytest.approx(0.4, rel=1e-6) and got.target.spread_slots == 64.0
    assert report["held_out"]["without"]["mean_signed"] < -0.005  # the term is missed without it
    assert report["held_out"]["with"]["median"] < 1e-6
    assert "spread@reqs" in got.held_out


def test_equal_contexts_or_no_spread_rows_price_nothing_more():
    with_term = ProfileCost(replace(BASE, target=replace(BASE.target, spread_ratio=0.5, spread_slots=64.0)))
    cost = ProfileCost(BASE)
    equal = StepWork(decode_reqs=256, verify_tokens=256, decode_context_tokens=256 * 900, decode_max_context=900)
    tailed = StepWork(decode_reqs=256, verify_tokens=256, decode_context_tokens=256 * 900, decode_max_context=5000)
    few = StepWork(decode_reqs=16, verify_tokens=16, decode_context_tokens=16 * 900, decode_max_context=5000)
    assert with_term.step_s(equal) == cost.step_s(equal)
    assert with_term.step_s(few) == cost.step_s(few)  # 16 x 4 splits: all run at once
    assert with_term.step_s(tailed) > cost.step_s(tailed)
    same, report = spread.with_spread_term(BASE, {"verify": []})
    assert same is BASE and report is None


def test_bad_spread_rows_are_refused_naming_the_row():
    with pytest.raises(InputError, match=r"spread\[0\]\.max_context"):
        spread.with_spread_term(BASE, {"spread": [{"reqs": 4, "tokens": 4, "context": 9, "max_context": -1,
                                                   "step_s": 1.0}]}, file="raw_x.json")


def test_post_only_fits_the_spread_term_from_the_raw_profile_and_keeps_the_rest(tmp_path):
    from dspark_sim.profiling.cli import fit, fit_parser

    (tmp_path / "out" / "h200").mkdir(parents=True)
    (tmp_path / "raw").mkdir()
    BASE.save(tmp_path / "out" / "h200" / "qwen3-8b.json")
    (tmp_path / "raw" / "raw_qwen3-8b.json").write_text(json.dumps({"spread": _rows(0.3, 32.0)}))
    assert fit(fit_parser().parse_args(["--post-only", "--out-dir", str(tmp_path / "out"),
                                        "--raw-dir", str(tmp_path / "raw")])) == 0
    got = load_profile(tmp_path / "out" / "h200" / "qwen3-8b.json")
    assert got.target.spread_ratio == pytest.approx(0.3, rel=1e-6) and got.target.spread_slots == 32.0
    assert replace(got.target, spread_ratio=0.0, spread_slots=0.0) == BASE.target
    projected = load_profile(tmp_path / "out" / "b300" / "qwen3-8b.json")
    assert projected.target.spread_ratio == got.target.spread_ratio  # a ratio: projections keep it
