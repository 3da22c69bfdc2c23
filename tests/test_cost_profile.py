"""Measured profiles: file format and its validation, the fit, projection, lookup by name."""
from __future__ import annotations

import copy
import json
import warnings
from dataclasses import replace

import numpy as np
import pytest

from dspark_sim.catalog import get_gpu, get_model
from dspark_sim.cost import (ProfileCost, RooflineCost, StepWork, get_cost_model,
                             load_profile, project_profile)
from dspark_sim.cost.base import CostModel, DraftWork
from dspark_sim.cost.profile import shipped_profile_path
from dspark_sim.cost.profile_format import (DraftFit, GpuRef, HostFit, Profile, TargetFit,
                                            profile_from_json_dict)
from dspark_sim.cost.shapes import (SCALAR, hat_matrix, interp2_array, interp2_clamped, interp_array,
                                    interp_clamped, pad_tokens, pow2_array, pow2_scalar)
from dspark_sim.errors import InputError
from dspark_sim.profiling.fit import TargetModel, fit_profile
from dspark_sim.profiling.rows import target_rows
from dspark_sim.profiling.synthetic import default_grid, synthetic_raw

MODEL, GPU = get_model("qwen3-8b"), get_gpu("h200")
KNOWN_TARGET = TargetFit(bias_s=4e-4, req_s=3e-6, weights_s=4.5e-3, flop_s_per_token=2.8e-5,
                         logits_s_per_token=2e-6, sharpness=6.0, kv_s_per_token=4e-8,
                         kv_req_s_per_token=1.2e-7, kv_sharpness=3.0, attn_s_per_pair=1.5e-9,
                         prefill_host_s=8e-3, host_sharpness=12.0, width_knots=(1.0, 2.0, 4.0, 8.0),
                         kv_width_ratio=(0.0, 0.0, 0.1, 0.4), lat_width_ratio=(0.0, 0.0, 0.0, 0.0))
KNOWN_DRAFTS = {"block": DraftFit("block", 3e-5, 1.2e-5, 9e-4, 3.5e-6, 2e-7, 5.0, 1e-9),
                "chain": DraftFit("chain", 2e-5, 1e-5, 4.5e-4, 4e-6, 1e-7, 4.0, 3e-10)}


@pytest.fixture(scope="module")
def fitted():
    """A profile fitted to roofline timings with 1.5 % noise and a 64-token GEMM staircase."""
    raw = synthetic_raw(RooflineCost(MODEL, GPU), seed=1)
    raw["provenance"]["date"] = "2026-07-01"
    return fit_profile(raw, MODEL, GPU, folds=3)


def _known_profile(fitted):
    return replace(fitted, target=KNOWN_TARGET, draft=KNOWN_DRAFTS)


def _known_profile_bare():
    """The known terms in a profile with no grids (no fit needed)."""
    return Profile(gpu="h200", model="qwen3-8b", source="known", measured_date="2026-07-01",
                   gpu_spec=GpuRef("h200", GPU.hbm_bytes_per_s, GPU.bf16_flops, GPU.source),
                   target=KNOWN_TARGET, draft=KNOWN_DRAFTS, held_out={}, held_out_method="none",
                   provenance={})


def test_fit_recovers_known_parameters(fitted):
    truth = ProfileCost(_known_profile(fitted))
    raw = synthetic_raw(truth, noise=0.005, quantum=1, seed=2)
    got = fit_profile(raw, MODEL, GPU, folds=2)
    t = got.target
    assert t.weights_s == pytest.approx(KNOWN_TARGET.weights_s, rel=0.05)
    assert t.flop_s_per_token == pytest.approx(KNOWN_TARGET.flop_s_per_token, rel=0.05)
    assert t.kv_s_per_token == pytest.approx(KNOWN_TARGET.kv_s_per_token, rel=0.10)
    assert t.kv_width_ratio[-1] == pytest.approx(KNOWN_TARGET.kv_width_ratio[-1], abs=0.08)
    assert t.attn_s_per_pair == pytest.approx(KNOWN_TARGET.attn_s_per_pair, rel=0.15)
    assert t.prefill_host_s == pytest.approx(KNOWN_TARGET.prefill_host_s, rel=0.05)
    assert t.bias_s + t.weights_s == pytest.approx(KNOWN_TARGET.bias_s + KNOWN_TARGET.weights_s, rel=0.02)
    for kind, known in KNOWN_DRAFTS.items():
        d = got.draft[kind]
        # a chain pays launch_s and weights_s once per draft token: only their sum is identified
        got_w, known_w = ((d.weights_s, known.weights_s) if kind == "block"
                          else (d.weights_s + d.launch_s, known.weights_s + known.launch_s))
        assert got_w == pytest.approx(known_w, rel=0.05)
        assert d.flop_s_per_token == pytest.approx(known.flop_s_per_token, rel=0.10)
    assert got.held_out["all"].median_rel_err < 0.01
    # and off the grid, where the physical shape has to carry it
    fit = ProfileCost(got)
    for work in (StepWork(decode_reqs=512, verify_tokens=4096, decode_context_tokens=512 * 4096),
                 StepWork(decode_reqs=3, verify_tokens=21, decode_context_tokens=3 * 30000),
                 StepWork(prefill_tokens=16384, prefill_reqs=1, prefill_attn_tokens2=16384 * 8192.0),
                 StepWork(draft=DraftWork("block", 512, 7, 512 * 2048))):
        assert fit.step_s(work) == pytest.approx(truth.step_s(work), rel=0.03)


def test_held_out_error_meets_the_targets(fitted):
    for section in ("verify", "prefill", "all"):
        assert fitted.held_out[section].median_rel_err <= 0.03
        assert fitted.held_out[section].p90_rel_err <= 0.08
    assert fitted.held_out["all"].num_points == sum(len(v) for v in default_grid().values())


def test_profile_cost_is_the_fitted_formula(fitted):
    cost = ProfileCost(fitted)
    assert isinstance(cost, CostModel)
    rows = target_rows(fitted.grids)
    vec = TargetModel(fitted.target).predict(rows)
    scalar = [cost.step_s(StepWork(decode_reqs=r["reqs"], verify_tokens=r["tokens"],
                                   decode_context_tokens=r["reqs"] * r["context"]))
              for r in fitted.grids["verify"]]
    np.testing.assert_allclose(scalar, vec[:len(scalar)], rtol=1e-12)
    work = StepWork(decode_reqs=96, verify_tokens=400, decode_context_tokens=96 * 3000,
                    prefill_tokens=512, prefill_reqs=1, prefill_attn_tokens2=512 * 1000.0,
                    draft=DraftWork("block", 96, 7, 96 * 3000))
    assert cost.step_s(work) == pytest.approx(sum(cost.breakdown(work).values()), rel=1e-12)
    assert cost.step_s(StepWork()) == 0.0


def test_interpolation_shapes_agree():
    knots, values = [1.0, 4.0, 10.0, 64.0], np.array([0.1, -0.2, 0.05, 0.3])
    x = np.array([0.0, 1.0, 2.5, 4.0, 9.0, 64.0, 1000.0])
    expect = [interp_clamped(knots, values, v) for v in x]
    np.testing.assert_allclose(interp_array(knots, values, x), expect)
    np.testing.assert_allclose(hat_matrix(knots, x) @ values, expect)
    table = [[0.0, 0.2, -0.1], [0.3, 0.1, 0.4]]
    rx, wy = np.array([0.5, 1.0, 1.5, 3.0, 2.0]), np.array([0.0, 2.0, 3.0, 9.0, 5.0])
    np.testing.assert_allclose(interp2_array([1.0, 2.0], [1.0, 4.0, 8.0], table, rx, wy),
                               [interp2_clamped([1.0, 2.0], [1.0, 4.0, 8.0], table, a, b)
                                for a, b in zip(rx, wy)])
    assert interp2_clamped([1.0, 2.0], [1.0, 4.0, 8.0], table, 1.5, 6.0) == pytest.approx(0.15)


@pytest.mark.parametrize("n,tier", [(1, 1), (8, 8), (9, 16), (64, 64), (65, 96), (256, 256),
                                    (257, 384), (300, 384), (2048, 2048), (2049, 2176)])
def test_graph_tokens_pad_to_the_decoders_tiers(n, tier):
    limits, steps = (8.0, 64.0, 256.0), (1.0, 8.0, 32.0, 128.0)
    assert pad_tokens(limits, steps, n) == tier
    assert pad_tokens(limits, steps, np.array([float(n)]))[0] == tier
    assert pad_tokens((), (), n) == n
    assert pow2_scalar(n) == pow2_array(np.array([float(n)]))[0] == 2 ** (n - 1).bit_length()


def test_graph_steps_pad_and_eager_steps_wait_for_the_host():
    fit = replace(KNOWN_TARGET, pad_limits=(8.0, 64.0, 256.0), pad_steps=(1.0, 8.0, 32.0, 128.0))
    cost = ProfileCost(replace(_known_profile_bare(), target=fit))

    def verify(m):
        return cost.step_s(StepWork(decode_reqs=64, verify_tokens=m, decode_context_tokens=64 * 512))
    assert verify(288) == pytest.approx(verify(384), rel=0.01)  # one graph tier, one time
    assert verify(257) > verify(256) * 1.2
    small = StepWork(prefill_tokens=64, prefill_reqs=1, prefill_attn_tokens2=64 * 32.0)
    big = StepWork(prefill_tokens=8192, prefill_reqs=1, prefill_attn_tokens2=8192 * 4096.0)
    no_host = ProfileCost(replace(_known_profile_bare(), target=replace(fit, prefill_host_s=0.0)))
    assert cost.step_s(small) == pytest.approx(fit.prefill_host_s, rel=0.01)  # host-bound
    assert no_host.step_s(small) < 0.8 * fit.prefill_host_s
    assert cost.step_s(big) == pytest.approx(no_host.step_s(big), rel=1e-6)  # GPU-bound
    # a prefill chunk computes no logits, a verify window does, for every token
    assert no_host.breakdown(big)["linear_s"] < ProfileCost(replace(_known_profile_bare(), target=replace(
        fit, prefill_host_s=0.0, pad_steps=(), pad_limits=()))).breakdown(
        StepWork(decode_reqs=1, verify_tokens=8192))["linear_s"]


def test_profile_round_trips(fitted, tmp_path):
    path = tmp_path / "p.json"
    fitted.save(path)
    assert load_profile(path) == fitted
    assert json.loads(path.read_text())["format_version"] == 2


def _broken(fitted, edit):
    d = copy.deepcopy(fitted.to_json_dict())
    edit(d)
    return d


MALFORMED = [
    ("format_version", lambda d: d.pop("format_version"), "not a dspark-sim profile"),
    ("format_version", lambda d: d.update(format_version=99), "supported"),
    ("format_version", lambda d: d.update(format_version=1), "supported"),
    ("target.weights_s", lambda d: d["target"].pop("weights_s"), "missing"),
    ("target.weights_s", lambda d: d["target"].update(weights_s=-1.0), ">= 0"),
    ("target.weights_s", lambda d: d["target"].update(weights_s="fast"), "number"),
    ("target.sharpness", lambda d: d["target"].update(sharpness=True), "number"),
    ("target.m_knots", lambda d: d["target"].update(m_knots=d["target"]["m_knots"][::-1]),
     "strictly increasing"),
    ("target.m_ratio", lambda d: d["target"].update(m_ratio=[0.0]), "length"),
    ("target.speed", lambda d: d["target"].update(speed=1.0), "unknown key"),
    ("target.prefill_req_s", lambda d: d["target"].update(prefill_req_s=1e-4), "unknown key"),
    ("target.kv_ratio[0]", lambda d: d["target"].update(kv_ratio=[r[:-1] for r in d["target"]["kv_ratio"]]),
     "length of width_knots"),
    ("target.kv_ratio", lambda d: d["target"].update(kv_ratio=[]), "one row per kv_r_knots"),
    ("target.pad_steps", lambda d: d["target"].update(pad_limits=[8.0], pad_steps=[1.0]),
     "one more entry"),
    ("target.host_sharpness", lambda d: d["target"].update(host_sharpness=0.5), "[1, 64]"),
    ("draft.block.kind", lambda d: d["draft"]["block"].update(kind="chain"), "must equal its key"),
    ("draft.tree", lambda d: d["draft"].update(tree=d["draft"]["block"]), "unknown key"),
    ("held_out.all.p90_rel_err", lambda d: d["held_out"]["all"].pop("p90_rel_err"), "missing"),
    ("grids.verify[0].step_s", lambda d: d["grids"]["verify"][0].update(step_s=0.0), "> 0"),
    ("grids.draft[0].kind", lambda d: d["grids"]["draft"][0].update(kind="tree"), "one of"),
    ("tp", lambda d: d.update(tp=0), "integer >= 1"),
]


@pytest.mark.parametrize("key,edit,why", MALFORMED, ids=[k for k, _, _ in MALFORMED])
def test_loader_rejects_malformed_profiles(fitted, tmp_path, key, edit, why):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(_broken(fitted, edit)))
    with pytest.raises(InputError, match=why) as err:
        load_profile(path)
    assert err.value.file == str(path)
    assert err.value.key == key
    assert "\n" not in str(err.value)


def test_loader_rejects_non_profiles(tmp_path):
    for text, why in (("[]", "JSON object"), ("{", "not valid JSON")):
        (tmp_path / "x.json").write_text(text)
        with pytest.raises(InputError, match=why):
            load_profile(tmp_path / "x.json")
    with pytest.raises(InputError, match="cannot read"):
        load_profile(tmp_path / "missing.json")


def test_fit_rejects_malformed_raw():
    raw = synthetic_raw(RooflineCost(MODEL, GPU), grid={"verify": [(1, 1, 0)], "draft": [], "prefill": []})
    raw["verify"][0]["step_s"] = -1.0
    with pytest.raises(InputError, match="verify\\[0\\].step_s") as err:
        fit_profile(raw, MODEL, GPU, file="raw_qwen3-8b.json")
    assert err.value.file == "raw_qwen3-8b.json"
    with pytest.raises(InputError, match="at least one"):
        fit_profile({"verify": []}, MODEL, GPU)
    raw["verify"][0]["step_s"] = 1e-3
    raw["provenance"].update(pad_limits=[8], pad_steps=[1])
    with pytest.raises(InputError, match="one more entry") as err:
        fit_profile(raw, MODEL, GPU, file="raw_qwen3-8b.json")
    assert err.value.key == "provenance.pad_steps" and err.value.file == "raw_qwen3-8b.json"


def test_projection_scales_each_term_by_its_resource(fitted, tmp_path):
    b300 = get_gpu("b300")
    proj = project_profile(fitted, b300)
    assert proj.source == "projected from h200, measured 2026-07-01"
    assert proj.gpu == "b300" and proj.grids is None and proj.projection.measured_gpu.name == "h200"
    mem, flops = GPU.hbm_bytes_per_s / b300.hbm_bytes_per_s, GPU.bf16_flops / b300.bf16_flops
    assert proj.projection.memory_ratio == pytest.approx(mem)
    assert proj.target.weights_s == pytest.approx(fitted.target.weights_s * mem)
    assert proj.target.flop_s_per_token == pytest.approx(fitted.target.flop_s_per_token * flops)
    assert proj.target.bias_s == fitted.target.bias_s  # host time does not follow the GPU
    assert proj.target.m_ratio == fitted.target.m_ratio  # measured efficiencies kept
    proj.save(tmp_path / "b300.json")
    assert load_profile(tmp_path / "b300.json") == proj
    again = project_profile(proj, get_gpu("h100"))  # re-projection stays anchored to the h200
    assert again.source == proj.source and again.projection.measured_gpu.name == "h200"
    direct = project_profile(fitted, get_gpu("h100"))
    assert again.target.weights_s == pytest.approx(direct.target.weights_s)


def test_get_cost_model_falls_back_to_the_roofline_with_a_warning():
    assert shipped_profile_path("a100", "qwen3-235b-a22b") is None
    with pytest.warns(UserWarning, match="no measured profile for a100/qwen3-235b-a22b"):
        cost = get_cost_model("a100", "qwen3-235b-a22b", tp=8)
    assert isinstance(cost, RooflineCost)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        get_cost_model("a100", "qwen3-235b-a22b", tp=8, warn=False)
    with pytest.raises(InputError, match="unknown model") as err:  # blames the user's file
        get_cost_model("a100", "gpt-9", file="scenario.yaml", warn=False)
    assert err.value.file == "scenario.yaml"


def test_get_cost_model_reads_a_named_file_and_scales_tp(fitted, tmp_path):
    path = tmp_path / "qwen3-8b.json"
    fitted.save(path)
    one = get_cost_model("h200", "Qwen/Qwen3-8B", profile=path)
    two = get_cost_model("h200", "qwen3-8b", tp=2, profile=path)
    assert isinstance(one, ProfileCost) and two.tp == 2
    work = StepWork(decode_reqs=64, verify_tokens=256, decode_context_tokens=64 * 2048)
    parts1, parts2 = one.breakdown(work), two.breakdown(work)
    assert parts2["linear_s"] == pytest.approx(parts1["linear_s"] / 2)
    assert parts2["overhead_s"] == parts1["overhead_s"] and parts2["comm_s"] > 0
    roof_comm = RooflineCost(MODEL, GPU, 2).breakdown(work)["comm_s"]
    assert parts2["comm_s"] == pytest.approx(roof_comm)
    with pytest.raises(InputError, match="not for model"):
        get_cost_model("h200", "qwen3-4b", profile=path)


def test_shipped_profiles_load_and_need_no_roofline():
    for gpu in ("h200", "b300", "b200", "h100", "a100"):
        for model in ("qwen3-4b", "qwen3-8b", "qwen3-14b", "qwen3-32b", "qwen3-30b-a3b", "llama-3.1-8b",
                      "llama-3.1-70b"):
            path = shipped_profile_path(gpu, model)
            if path is None:
                continue
            profile = load_profile(path)
            assert not profile.provenance.get("synthetic"), f"{path} was fitted to synthetic data"
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                assert isinstance(get_cost_model(gpu, model, warn=True), ProfileCost)
            # only a drafter kind the profiler did not time may fall back on the roofline
            assert all("drafter" in str(w.message) for w in caught), [str(w.message) for w in caught]
            assert (path.parent / f"{model}.sps.json").is_file()
            assert (path.parent / f"{model}.sps_additive.json").is_file()


def test_fit_reads_the_profilers_spellings():
    raw = synthetic_raw(RooflineCost(MODEL, GPU), grid={
        "verify": [(r, r * t, 2048) for r in (1, 8, 64) for t in (1, 4)],
        "draft": [(r, g, "block", 2048) for r in (1, 8, 64) for g in (4, 8)],
        "prefill": [(n, c) for n in (256, 2048) for c in (0, 4096)]})
    for row in raw["draft"]:
        del row["kind"]
    for row in raw["prefill"]:
        row["context"] = row.pop("cached")
    profile = fit_profile(raw, MODEL, GPU, folds=2)
    assert set(profile.draft) == {"block"}
    assert profile.grids["draft"][0]["block_size"] == 4 and profile.grids["prefill"][1]["cached"] == 4096


KNOWN_HOST = {"none": HostFit("none", 2e-3, 1e-5), "block": HostFit("block", 3e-3, 2e-5)}


def test_fit_recovers_the_host_term(fitted):
    """Whole decode steps = graphs (target + drafter) + bias + per-request host time: the fit
    recovers the host terms from what the graph fits leave, and adds them to decode steps only."""
    graphs = ProfileCost(_known_profile(fitted))  # the grids time graph replays: no host term
    whole = ProfileCost(replace(_known_profile(fitted), host=KNOWN_HOST))
    raw = synthetic_raw(graphs, noise=0.003, quantum=1, seed=3)
    raw["step"] = []
    for kind, g in (("none", 0), ("block", 7)):
        for r in (1, 2, 4, 8, 16, 32, 64, 128, 256):
            draft = DraftWork("block", r, g, r * 1024) if g else None
            seconds = whole.step_s(StepWork(r, r * (g + 1), r * 1024, draft=draft))
            raw["step"].append({"kind": kind, "reqs": r, "context": 1024, "graphs": True,
                                "steps": [[r * (g + 1), seconds, 0.0]], "step_s": seconds})
    raw["step"].append({"kind": "none", "reqs": 4, "context": 1024, "graphs": False,
                        "steps": [[4, 1.0, 0.0]], "step_s": 1.0})  # eager: never fitted
    got = fit_profile(raw, MODEL, GPU, folds=2)
    for kind, want in KNOWN_HOST.items():
        assert got.host[kind].bias_s == pytest.approx(want.bias_s, rel=0.15)
        assert got.host[kind].req_s == pytest.approx(want.req_s, rel=0.25)
    assert got.held_out["step"].num_points == 18 and got.held_out["step"].median_rel_err < 0.02
    cost = ProfileCost(got)
    assert cost.breakdown(StepWork(prefill_tokens=100, prefill_reqs=1))["host_s"] == 0.0
    assert cost.breakdown(StepWork(4, 4, 4096))["host_s"] == pytest.approx(got.host["none"].seconds(4))
    block = StepWork(4, 32, 4096, draft=DraftWork("block", 4, 7, 4096))
    assert cost.breakdown(block)["host_s"] == pytest.approx(got.host["block"].seconds(4))
    # a kind with no measured host term (chain here) adds nothing
    assert cost.breakdown(StepWork(4, 16, 4096, draft=DraftWork("chain", 4, 3, 4096)))["host_s"] == 0.0


def test_host_term_is_what_the_graph_fits_leave_not_wall_minus_timers(fitted):
    """The profiler's draft and verify timers start before the host prepares each graph's
    inputs, so wall - draft - verify (a row's host_s) misses that preparation: the host term
    is fitted to what the graph fits leave of the whole steps."""
    graphs = ProfileCost(_known_profile(fitted))
    raw = synthetic_raw(graphs, noise=0.003, quantum=1, seed=4)
    raw["step"] = []
    prep = 8e-4  # host preparation inside the verify timer
    for r in (1, 4, 16, 64, 256):
        gpu = graphs.step_s(StepWork(r, r, r * 1024))
        wall = gpu + KNOWN_HOST["none"].seconds(r)
        raw["step"].append({"kind": "none", "reqs": r, "context": 1024, "graphs": True,
                            "steps": [[r, wall, 0.0, gpu + prep]] * 3, "step_s": wall})
    got = fit_profile(raw, MODEL, GPU, folds=2)
    assert got.host["none"].bias_s == pytest.approx(KNOWN_HOST["none"].bias_s, rel=0.15)
    assert got.grids["step"][0]["host_s"] == pytest.approx(KNOWN_HOST["none"].seconds(1) - prep)


SPLIT = dict(split_target=33.0, max_splits=16.0)  # the decoder on an H200, 8 KV heads


@pytest.mark.parametrize("reqs,splits", [(1, 16), (4, 16), (8, 8), (16, 4), (24, 2), (32, 2), (64, 1), (256, 1)])
def test_decode_attention_splits_follow_the_decoders_plan(reqs, splits):
    from dspark_sim.cost.shapes import ARRAY, SCALAR

    t = replace(KNOWN_TARGET, **SPLIT)
    assert t.splits(reqs, SCALAR) == splits
    assert t.splits(np.array([float(reqs)]), ARRAY)[0] == splits
    assert KNOWN_TARGET.splits(reqs, SCALAR) == 1.0  # older files: no splits


def test_the_longest_request_sets_the_decode_attention_floor():
    """One long request among short ones: the latency floor is its context over its splits;
    unknown (0), the floor is the mean context, as in the uniform grid."""
    t = replace(KNOWN_TARGET, kv_req_s_per_token=1e-6, **SPLIT)
    cost = ProfileCost(replace(_known_profile_bare(), target=t))
    for reqs in (8, 64):
        total = (reqs - 1) * 256 + 8192
        mixed = cost.step_s(StepWork(reqs, reqs, total, decode_max_context=8192))
        mean = cost.step_s(StepWork(reqs, reqs, total))
        assert mean == cost.step_s(StepWork(reqs, reqs, total, decode_max_context=total / reqs))
        assert mixed > mean
    # one program per head at 64 requests: the 8,192-token request adds about 8 ms
    extra = cost.step_s(StepWork(64, 64, 63 * 256 + 8192, decode_max_context=8192)) \
        - cost.step_s(StepWork(64, 64, 64 * 256))
    assert extra == pytest.approx(8192 * 1e-6, rel=0.2)


def test_fit_reads_mixed_rows_and_the_splits_from_the_provenance(fitted):
    truth_target = replace(KNOWN_TARGET, kv_req_s_per_token=1e-6, **SPLIT)
    truth = ProfileCost(replace(_known_profile(fitted), target=truth_target))
    raw = synthetic_raw(truth, noise=0.004, quantum=1, seed=5)
    raw["provenance"]["sm_count"] = 132
    raw["mixed"] = [{"reqs": r, "tokens": r * w, "short_context": 256, "max_context": long,
                     "context": round(((r - 1) * 256 + long) / r),
                     "step_s": truth.step_s(StepWork(r, r * w, (r - 1) * 256 + long, decode_max_context=long))}
                    for long in (256, 2048, 8192) for w in (1, 8) for r in (4, 8, 16, 32, 64, 128, 256)]
    got = fit_profile(raw, MODEL, GPU, folds=2)
    assert got.target.split_target == 33.0 and got.target.max_splits == 16.0
    assert got.target.kv_req_s_per_token == pytest.approx(1e-6, rel=0.25)
    assert sum("max_context" in r for r in got.grids["verify"]) == len(raw["mixed"])
    fit = ProfileCost(got)
    for r, long in ((64, 8192), (16, 4096), (100, 6000)):
        work = StepWork(r, r, (r - 1) * 256 + long, decode_max_context=long)
        assert fit.step_s(work) == pytest.approx(truth.step_s(work), rel=0.05)
    raw["provenance"]["sm_count"] = "many"
    with pytest.raises(InputError, match="provenance.sm_count"):
        fit_profile(raw, MODEL, GPU, folds=2)


def test_fit_reads_spread_rows_as_verify_steps_at_the_spread_and_at_the_mean():
    """A ``spread`` row (lognormal contexts) is two verify rows: the step with its longest
    request, and the same step at the mean context (``uniform_s``)."""
    from dspark_sim.profiling.rows import canonical_rows

    raw = {"verify": [{"reqs": 1, "tokens": 1, "context": 512, "step_s": 0.006}],
           "spread": [{"reqs": 64, "tokens": 256, "mean": 900, "sigma": 0.6, "context": 930,
                       "max_context": 3661, "step_s": 0.0188, "uniform_s": 0.0170}]}
    rows = canonical_rows(raw)["verify"]
    assert rows[1:] == [{"reqs": 64, "tokens": 256, "context": 930, "max_context": 3661, "step_s": 0.0188},
                        {"reqs": 64, "tokens": 256, "context": 930, "step_s": 0.0170}]
    del raw["spread"][0]["reqs"]  # a malformed row: one line naming the key, no traceback
    with pytest.raises(InputError, match=r"verify\[1\]\.reqs"):
        fit_profile(raw, MODEL, GPU, folds=2)


def test_host_terms_round_trip_and_are_validated():
    prof = replace(_known_profile_bare(), host=KNOWN_HOST)
    d = json.loads(json.dumps(prof.to_json_dict()))
    assert profile_from_json_dict(d).host == KNOWN_HOST
    old = {k: v for k, v in d.items() if k != "host"}  # files written before host terms
    assert profile_from_json_dict(old).host == {}
    bad = copy.deepcopy(d)
    bad["host"]["warp"] = {"kind": "warp", "bias_s": 1e-3, "req_s": 0.0}
    with pytest.raises(InputError, match="host.warp"):
        profile_from_json_dict(bad)
    bad = copy.deepcopy(d)
    bad["host"]["none"]["bias_s"] = -1.0
    with pytest.raises(InputError, match="bias_s"):
        profile_from_json_dict(bad)


def test_fit_recovers_the_scheduling_gap_and_the_simulator_adds_it(fitted):
    """The serving loop's gaps between steps (``sched`` rows, every drafter kind) fit
    ``bias + req_s * R``; the cost model adds that gap to every step with tokens, by the
    running requests, and keeps it out of the held-out "all" summary."""
    from dspark_sim.cost.profile_format import ScheduleFit

    raw = synthetic_raw(RooflineCost(MODEL, GPU), seed=1)  # the raw file ``fitted`` was fitted to
    base = fitted
    assert base.schedule is None and "sched" not in base.held_out
    rng = np.random.default_rng(0)
    raw["sched"] = [{"kind": kind, "reqs": r, "step_s": (3e-5 + 4e-6 * r) * (1 + 0.01 * rng.standard_normal()),
                     "steps": [[r, 1e-4]]} for kind in ("none", "chain", "block")
                    for r in (1, 2, 4, 8, 16, 32, 64, 128, 256)]
    got = fit_profile(raw, MODEL, GPU, folds=3)
    assert got.schedule.bias_s == pytest.approx(3e-5, rel=0.1)
    assert got.schedule.req_s == pytest.approx(4e-6, rel=0.05)
    assert got.held_out["sched"].num_points == 27 and got.held_out["sched"].median_rel_err < 0.03
    assert got.held_out["all"] == base.held_out["all"]
    cost = ProfileCost(got)
    work = StepWork(4, 4, 4096, running_reqs=10)
    assert cost.breakdown(work)["sched_s"] == pytest.approx(got.schedule.seconds(10))
    assert cost.step_s(work) == pytest.approx(ProfileCost(base).step_s(work) + got.schedule.seconds(10))
    assert cost.breakdown(StepWork(prefill_tokens=64, prefill_reqs=2))["sched_s"] == \
        pytest.approx(got.schedule.seconds(2))  # running unknown: the step's own requests
    assert cost.breakdown(StepWork())["sched_s"] == 0.0
    # the file keeps it; files written before have none; a negative term is refused
    d = json.loads(json.dumps(got.to_json_dict()))
    assert profile_from_json_dict(d).schedule == got.schedule
    assert profile_from_json_dict({k: v for k, v in d.items() if k != "schedule"}).schedule is None
    d["schedule"]["req_s"] = -1e-6
    with pytest.raises(InputError, match="req_s"):
        profile_from_json_dict(d)
    assert ScheduleFit(1e-4, 0.0).seconds(7) == 1e-4


def test_a_short_chunk_after_a_long_cached_prefix_pays_one_programs_key_stream():
    """The prefill attention is the pairs' compute floored by one program's stream over the
    request's keys; a chunk of one query tile splits its keys as a decode does."""
    fit = replace(KNOWN_TARGET, prefill_host_s=0.0, prefill_kv_s_per_token=1e-6, prefill_sharpness=4.0,
                  prefill_tile=16.0, split_target=33.0, max_splits=16.0)
    cost = ProfileCost(replace(_known_profile_bare(), target=fit))
    old = ProfileCost(replace(_known_profile_bare(), target=replace(fit, prefill_kv_s_per_token=0.0)))

    def chunk(n, cached):
        return StepWork(prefill_tokens=n, prefill_reqs=1, prefill_attn_tokens2=n * (cached + n / 2))
    short = cost.breakdown(chunk(64, 16384))["attn_s"]
    assert short >= 1e-6 * (16384 + 32) and old.breakdown(chunk(64, 16384))["attn_s"] < 0.1 * short
    assert cost.breakdown(chunk(128, 16384))["attn_s"] < 1.1 * short  # the floor, not the pairs
    tile = cost.breakdown(chunk(16, 16384))["attn_s"]
    assert tile == pytest.approx(1e-6 * (16384 + 8) / 16, rel=0.05)  # 16 splits at one request
    long = chunk(8192, 0)  # compute-bound: the floor changes nothing
    assert cost.step_s(long) == pytest.approx(old.step_s(long), rel=1e-3)
    with pytest.raises(InputError, match="prefill_tile"):
        replace(fit, prefill_tile=-1.0)


def test_fit_recovers_the_prefill_key_stream_by_cached_level(fitted):
    """Timings made with a known floor over chunks after 0-16k cached tokens: the fit finds the
    floor, and holding out a whole cached level predicts it within a few percent."""
    from dspark_sim.profiling.levels import level_errors

    truth = replace(KNOWN_TARGET, prefill_kv_s_per_token=1e-6, prefill_sharpness=4.0)
    grid = {**default_grid(), "prefill": [(n, c) for n in (64, 128, 256, 512, 1024, 2048, 4096)
                                          for c in (0, 1024, 2048, 4096, 8192, 16384)]}
    raw = synthetic_raw(ProfileCost(replace(_known_profile(fitted), target=truth)), noise=0.005, quantum=1,
                        seed=3, grid=grid)
    got = fit_profile(raw, MODEL, GPU, folds=2)
    assert got.target.prefill_kv_s_per_token == pytest.approx(1e-6, rel=0.15)
    held = level_errors(raw, MODEL, GPU)
    assert held["prefill@cached"].median_rel_err < 0.02 and held["prefill@cached"].max_rel_err < 0.1


def test_small_prompt_steps_run_a_graph_over_a_power_of_two_tokens():
    """Prompt steps up to prefill_graph_tokens are priced over the next power of two of their
    tokens (at least prefill_graph_min), larger ones over their own; logits stay unpadded."""
    fit = replace(KNOWN_TARGET, prefill_host_s=0.0, pad_limits=(8.0, 64.0, 256.0), pad_steps=(1.0, 8.0, 32.0, 128.0),
                  prefill_graph_tokens=512.0, prefill_graph_min=16.0)
    cost = ProfileCost(replace(_known_profile_bare(), target=fit))
    eager = ProfileCost(replace(_known_profile_bare(), target=replace(fit, prefill_graph_tokens=0.0)))

    def linear(c, n):
        return c.breakdown(StepWork(prefill_tokens=n, prefill_reqs=1, prefill_attn_tokens2=n * n / 2))["linear_s"]
    assert linear(cost, 300) == pytest.approx(linear(eager, 512), rel=1e-9)
    assert linear(cost, 5) == pytest.approx(linear(eager, 16), rel=1e-9)
    assert linear(cost, 600) == linear(eager, 600)
    assert fit.padded_tokens(0, 300, True, SCALAR) == (512, 300) and fit.padded_tokens(24, 0, False, SCALAR)[0] == 24
    with pytest.raises(InputError, match="prefill_graph_min"):
        replace(fit, prefill_graph_min=0.5)
