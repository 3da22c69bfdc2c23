"""The mixed-step term: decode rows beside a prompt chunk, fitted on probe points only."""
from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest

from dspark_sim.cost import ProfileCost, StepWork, StepWorks
from dspark_sim.cost.profile import shipped_profile_path
from dspark_sim.cost.profile_format import load_profile
from dspark_sim.errors import InputError
from dspark_sim.profiling import mixed

PROFILE = load_profile(shipped_profile_path("h200", "qwen3-8b"))


def _probe(path, per_row_tile: float, board: float = 1.0, launches: tuple[float, float] | None = None) -> None:
    """Probe points priced by the shipped fit with ``per_row_tile`` (its own term zeroed), on a
    board ``board`` times as fast as the profile's GPU (every step's time divided by it);
    ``launches``: each step's launch time, (eager, graph)."""
    truth = replace(PROFILE.target, mixed_s_per_row_tile=per_row_tile)
    points = []
    for reqs in (0, 16, 64, 256):
        ctx = (0, 0) if not reqs else (reqs * 900, 6000)
        for chunk, cached in [(0, 0), (512, 0), (2048, 4096), (8192, 0)]:
            if reqs or chunk:
                gpu = float(mixed.model_gpu_s(truth, [reqs], [chunk], [cached], [ctx[0]], [ctx[1]])[0]) / board
                points.append({"reqs": reqs, "chunk": chunk, "cached": cached, "context_sum": ctx[0],
                               "context_max": ctx[1], "gpu_s": gpu})
                if launches is not None:
                    eager = chunk > 0 and chunk + reqs > PROFILE.target.prefill_graph_tokens
                    points[-1]["launch_s"] = launches[0] if eager else launches[1]
    path.write_text(json.dumps({"points": points}))


def test_the_term_is_recovered_from_mixed_steps_and_held_out_levels_are_exact(tmp_path):
    _probe(tmp_path / "p.json", 1.5e-7)
    fit, report = mixed.with_mixed_term(PROFILE.target, tmp_path / "p.json")
    assert fit.mixed_s_per_row_tile == pytest.approx(1.5e-7, rel=1e-6)
    for axis in ("reqs", "chunk"):
        assert report["held_out"][axis]["with"]["max"] < 1e-6
        assert report["held_out"][axis]["without"]["mean_signed"] < -0.005  # the term is missed without it
    assert {p["reqs"] for p in report["points"]} == {16, 64, 256}  # mixed steps only


def test_a_faster_board_still_yields_the_term_its_halves_cancel(tmp_path):
    """On a board 12 % faster than the profile's every step is priced over, the mixed ones too: a
    term judged by whole steps' prices would be none. The interaction, what a mixed step costs over
    its halves as measured, keeps the term (about as much faster), and its held-out levels are
    predicted better than without it while the steps' prices are not."""
    _probe(tmp_path / "p.json", 3e-7, board=1.12)
    fit, report = mixed.with_mixed_term(PROFILE.target, tmp_path / "p.json")
    assert fit.mixed_s_per_row_tile == pytest.approx(3e-7 / 1.12, rel=0.15)
    for axis in ("reqs", "chunk"):
        e = report["held_out"][axis]
        assert e["interaction_with"]["median"] < 0.5 * e["interaction_without"]["median"]
        assert e["with"]["mean_signed"] > e["without"]["mean_signed"] > 0.05  # priced over either way
    rows = mixed.interactions(replace(PROFILE.target, mixed_s_per_row_tile=0.0), mixed.read_probe(tmp_path / "p.json"))
    x, whole = rows["tiles"] / rows["step_s"], 1.0 - rows["base_s"] / rows["step_s"]
    assert float(x @ whole) < 0  # fitted on whole prices the coefficient would be clamped to none


def test_no_interaction_fits_no_term(tmp_path):
    _probe(tmp_path / "p.json", 0.0)
    fit, _ = mixed.with_mixed_term(PROFILE.target, tmp_path / "p.json")
    assert fit.mixed_s_per_row_tile == pytest.approx(0.0, abs=1e-15)


def test_the_term_prices_only_steps_with_decode_rows_and_a_chunk():
    cost = ProfileCost(replace(PROFILE, target=replace(PROFILE.target, mixed_s_per_row_tile=0.0)))
    with_term = ProfileCost(replace(PROFILE, target=replace(PROFILE.target, mixed_s_per_row_tile=1e-7)))
    decode = StepWork(decode_reqs=64, verify_tokens=64, decode_context_tokens=64_000)
    prompt = StepWork(prefill_tokens=2048, prefill_reqs=1, prefill_attn_tokens2=2048 * 1024)
    both = StepWork(64, 64, 64_000, 2048, 1, 2048 * 1024)
    assert with_term.step_s(decode) == cost.step_s(decode) and with_term.step_s(prompt) == cost.step_s(prompt)
    tiles = 64 * 2048 / PROFILE.target.prefill_tile
    assert with_term.breakdown(both)["attn_s"] - cost.breakdown(both)["attn_s"] == pytest.approx(1e-7 * tiles)


def test_a_probe_without_its_points_is_refused(tmp_path):
    (tmp_path / "p.json").write_text(json.dumps({"points": [{"reqs": -1}]}))
    with pytest.raises(InputError, match="points"):
        mixed.with_mixed_term(PROFILE.target, tmp_path / "p.json")


def test_steps_served_with_a_drafter_are_not_fitted_as_target_only_steps(tmp_path):
    _probe(tmp_path / "p.json", 1.5e-7)
    probe = json.loads((tmp_path / "p.json").read_text())
    (tmp_path / "p.json").write_text(json.dumps({**probe, "provenance": {"method": "dspark"}}))
    with pytest.raises(InputError, match=r"provenance\.method.*dspark"):
        mixed.with_mixed_term(PROFILE.target, tmp_path / "p.json")


def test_post_only_refits_the_term_of_a_profile_from_its_probe_and_keeps_the_rest(tmp_path):
    from dspark_sim.profiling.cli import fit, fit_parser

    (tmp_path / "out" / "h200").mkdir(parents=True)
    (tmp_path / "raw").mkdir()
    PROFILE.save(tmp_path / "out" / "h200" / "qwen3-8b.json")
    _probe(tmp_path / "raw" / "mixed_qwen3-8b.json", 1e-7, launches=(0.02, 0.003))
    assert fit(fit_parser().parse_args(["--post-only", "--out-dir", str(tmp_path / "out"),
                                        "--raw-dir", str(tmp_path / "raw")])) == 0
    got = load_profile(tmp_path / "out" / "h200" / "qwen3-8b.json")
    assert got.target.mixed_s_per_row_tile == pytest.approx(1e-7, rel=1e-6)
    assert got.target.launch_eager_s == 0.02  # the eager steps' launch; the graph steps' is left out
    assert replace(got.target, mixed_s_per_row_tile=0.0, launch_eager_s=0.0) == \
        replace(PROFILE.target, mixed_s_per_row_tile=0.0, launch_eager_s=0.0)
    assert {"mixed@reqs", "mixed@chunk"} <= set(got.held_out)
    projected = load_profile(tmp_path / "out" / "h100" / "qwen3-8b.json")
    assert 0 < projected.target.mixed_s_per_row_tile  # scaled as a compute term
    assert projected.target.launch_eager_s == 0.02  # host time: kept under projection


def test_the_longest_chunk_sets_the_rows_tiles_and_the_arrays_agree():
    t = replace(PROFILE.target, mixed_s_per_row_tile=1e-7)
    cost = ProfileCost(replace(PROFILE, target=t))
    # one 2048-token chunk beside three of 64: every decode row gets the long chunk's tiles
    mean = StepWork(64, 64, 64_000, 2240, 4, 2048 * 1024 + 3 * 64 * 32.0)
    longest = replace(mean, prefill_longest=2048)
    got = cost.breakdown(longest)["attn_s"] - cost.breakdown(mean)["attn_s"]
    assert got == pytest.approx(1e-7 * 64 * (2048 / t.prefill_tile - math.ceil(2240 / 4 / t.prefill_tile)))
    works = StepWorks.of([mean, longest])
    assert works.at(1) == longest and works.at(0).prefill_longest == 0
    assert cost.breakdown_array(works)["attn_s"].tolist() == [cost.breakdown(mean)["attn_s"],
                                                              cost.breakdown(longest)["attn_s"]]


def test_an_engine_leaves_the_decoders_mixed_step_term_out_and_says_so():
    from dspark_sim.catalog import get_gpu, get_model
    from dspark_sim.cost.parallel import Parallel
    from dspark_sim.cost.profile import profile_cost

    profile = replace(PROFILE, target=replace(PROFILE.target, mixed_s_per_row_tile=1e-7))
    spec, gpu = get_model("qwen3-8b"), get_gpu("h200")
    both = StepWork(64, 64, 64_000, 2048, 1, 2048 * 1024, prefill_longest=2048)
    decoder = profile_cost(profile, spec, gpu, Parallel(1))
    engine = profile_cost(profile, spec, gpu, Parallel(1), decoder_host=False)
    tiles = 64 * 2048 / PROFILE.target.prefill_tile
    assert decoder.breakdown(both)["attn_s"] - engine.breakdown(both)["attn_s"] == pytest.approx(1e-7 * tiles)
    assert decoder.provenance()["terms"]["mixed_steps"]["kind"] == "measured"
    assert engine.provenance()["terms"]["mixed_steps"]["kind"] == "left out"
    # the eager launch is the decoder's loop too: left out under another engine
    eager = StepWork(prefill_tokens=2048, prefill_reqs=1)
    assert decoder.launch_s(eager) == PROFILE.target.launch_eager_s > 0 and engine.launch_s(eager) == 0.0
    assert decoder.launch_s(StepWork(64, 64, 64_000)) == 0.0  # a graph replay's launch is left out
    assert decoder.provenance()["terms"]["eager_launch"]["kind"] == "measured"
    assert engine.provenance()["terms"]["eager_launch"]["kind"] == "left out"
