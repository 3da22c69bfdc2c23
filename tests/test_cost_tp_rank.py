"""A profile measured per rank of a tensor-parallel replica: taken whole at its tp (collectives
added from the link model), scaled elsewhere, and labelled so."""
import pytest

from dspark_sim.catalog import get_gpu, get_model
from dspark_sim.cost import ProfileCost, RooflineCost, StepWork, get_cost_model, load_profile
from dspark_sim.cost.profile_format import GpuRef, Profile, TargetFit
from dspark_sim.cost.profile import shipped_profile_path

GPU = get_gpu("h100")
TARGET = TargetFit(bias_s=4e-4, req_s=3e-6, weights_s=1.2e-2, flop_s_per_token=2.8e-5, logits_s_per_token=2e-6,
                   sharpness=6.0, kv_s_per_token=4e-8, kv_req_s_per_token=1.2e-7, kv_sharpness=3.0,
                   attn_s_per_pair=1.5e-9, prefill_host_s=8e-3, host_sharpness=12.0)
WORK = StepWork(decode_reqs=64, verify_tokens=64, decode_context_tokens=64 * 1024)


def _rank_profile(tp: int = 4) -> Profile:
    return Profile(gpu="h100", model="llama-3.1-70b", source="known", measured_date="2026-12-02",
                   gpu_spec=GpuRef("h100", GPU.hbm_bytes_per_s, GPU.bf16_flops, GPU.source), target=TARGET,
                   draft={}, held_out={}, held_out_method="none", provenance={}, tp=tp)


def test_a_rank_profile_is_taken_whole_at_its_tp_with_the_link_models_collectives(tmp_path):
    path = tmp_path / "llama-3.1-70b.json"
    _rank_profile().save(path)
    assert load_profile(path).tp == 4
    bare = ProfileCost(load_profile(path)).breakdown(WORK)  # the rank's own GPU work, no collectives
    at4 = get_cost_model("h100", "llama-3.1-70b", tp=4, profile=path, warn=False)
    parts = at4.breakdown(WORK)
    for name in ("overhead_s", "linear_s", "per_req_s", "attn_s"):
        assert parts[name] == pytest.approx(bare[name])
    roof = RooflineCost(get_model("llama-3.1-70b"), GPU, 4).breakdown(WORK)["comm_s"]
    assert bare["comm_s"] == 0 and parts["comm_s"] == pytest.approx(roof) and roof > 0
    assert "measured per rank at tp=4" in at4.source and "all-reduce latency 12 us (assumed)" in at4.source
    block = at4.provenance()["tp"]
    assert block["measured"] and block["from"] == "one rank of tp=4"
    assert at4.provenance()["terms"]["comm"]["kind"] == "modelled"


@pytest.mark.parametrize("tp,ratio", [(8, 0.5), (2, 2.0)])
def test_a_rank_profile_scales_to_another_tp_by_the_split(tmp_path, tp, ratio):
    path = tmp_path / "llama-3.1-70b.json"
    _rank_profile().save(path)
    at4 = get_cost_model("h100", "llama-3.1-70b", tp=4, profile=path, warn=False).breakdown(WORK)
    other = get_cost_model("h100", "llama-3.1-70b", tp=tp, profile=path, warn=False)
    parts = other.breakdown(WORK)
    # by the ratio of the splits, to the norms every rank keeps whole
    assert parts["linear_s"] == pytest.approx(at4["linear_s"] * ratio, rel=1e-3)
    assert parts["overhead_s"] == at4["overhead_s"]
    assert "scaled from one rank of tp=4 to tp=" in other.source
    assert not other.provenance()["tp"]["measured"]


def test_the_shipped_70b_profiles_are_one_rank_of_tp4_and_projected_from_the_h200():
    measured = load_profile(shipped_profile_path("h200", "llama-3.1-70b"))
    assert measured.tp == 4 and measured.projection is None
    assert measured.provenance["method"] == "none" and measured.provenance["tp"] == 4
    h100 = load_profile(shipped_profile_path("h100", "llama-3.1-70b"))
    assert h100.tp == 4 and h100.source.startswith("projected from h200, measured ")
    cost = get_cost_model("h100", "llama-3.1-70b", tp=4, warn=False)
    assert isinstance(cost, ProfileCost) and cost.provenance()["tp"]["measured"]
