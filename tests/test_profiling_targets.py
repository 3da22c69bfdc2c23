"""The held-out table's targets line names exactly the errors above the fit's targets."""
from dataclasses import replace
from pathlib import Path

from dspark_sim.cost.profile_format import HeldOut
from dspark_sim.profiling.pipeline import measured_profiles, targets_text

REPO = Path(__file__).resolve().parents[1]
TERMS = ["verify", "prefill", "draft_block", "draft_chain", "step", "sched"]
AXES = ["@reqs", "@context", "@chunk", "@cached", "@largest"]


def test_targets_line_names_every_miss_of_the_shipped_profiles_and_nothing_else():
    profiles = measured_profiles(REPO / "profiles")
    text = targets_text(profiles, TERMS, AXES)
    kfold, levels = text.split("Leave-one-level-out")
    for p in profiles:
        for term in [*TERMS, "all"]:
            h = p.held_out.get(term)
            if h is not None:
                named = f"{p.model} {term} (" in kfold
                assert named == (h.median_rel_err > 0.03 or h.p90_rel_err > 0.08), (p.model, term)
        for key, h in p.held_out.items():
            if "@" in key:
                assert (f"{p.model} {key} (" in levels) == (h.p90_rel_err > 0.08), (p.model, key)


def test_a_profile_within_targets_gives_none():
    (p,) = [q for q in measured_profiles(REPO / "profiles") if q.model == "qwen3-8b"]
    good = HeldOut(0.01, 0.02, 0.05, 100)
    q = replace(p, held_out={key: good for key in p.held_out})
    assert targets_text([q], TERMS, AXES).count("none") == 2
