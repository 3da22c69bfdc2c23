"""The shared-prefix term: its price in the decode attention, and its fit on the served-step
probe's points (recovered from steps priced with a known ratio, held out by request level)."""
import json
from dataclasses import replace

import numpy as np
import pytest

from dspark_sim.cost import get_cost_model
from dspark_sim.cost.shapes import EXACT, SCALAR
from dspark_sim.errors import InputError
from dspark_sim.profiling.shared import with_shared_term

PROFILE = get_cost_model("h200", "qwen3-8b", warn=False).profile
BARE = replace(PROFILE, target=replace(PROFILE.target, shared_widths=(), shared_ratio=()))


def _probe(target, path, ratios={1: 0.5, 8: 0.2}):
    """Points priced by ``target`` with ``ratios`` by window width: R requests of 2,560 tokens in
    G groups sharing 2,048 (G = 0: none shared)."""
    points = []
    for kind, width in (("none", 1), ("block", 8)):
        priced = replace(target, shared_widths=(float(width),), shared_ratio=(ratios[width],))
        for reqs in (64, 128, 224):
            for groups in (0, 32, 8, 1):
                shared = (reqs - groups) * 2048 if groups else 0
                s = sum(priced.parts(reqs, reqs * width, 0, reqs * 2560, 0, 0, SCALAR, 2560, shared))
                points.append({"part": "shared", "kind": kind, "reqs": reqs, "groups": groups, "context": 2560,
                               "shared_tokens": shared, "verify_tokens": reqs * width, "verify_s": s})
    path.write_text(json.dumps({"points": points + [{"part": "eager", "reqs": 64}]}))
    return path


def test_the_fit_recovers_the_ratio_of_each_window_width(tmp_path):
    fitted, report = with_shared_term(BARE, _probe(BARE.target, tmp_path / "served.json"))
    assert report["shared_widths"] == (1.0, 8.0)
    assert report["shared_ratio"] == pytest.approx((0.5, 0.2), rel=1e-6)
    assert fitted.held_out["shared@reqs"].median_rel_err < 1e-6
    assert report["held_out"]["without"]["median"] > 0.05  # the term matters on these steps


def test_the_shared_reads_cheapen_the_stream_only_and_scalar_and_array_prices_agree():
    t = PROFILE.target
    assert t.shared_ratio and t.shared_widths
    plain = t.decode_attn(128, 128, 128 * 3000, SCALAR, 6000)
    shared = t.decode_attn(128, 128, 128 * 3000, SCALAR, 6000, shared=100_000)
    assert 0 < shared < plain
    assert t.decode_attn(128, 128, 128 * 3000, SCALAR, 6000, shared=0) == plain
    reqs = np.array([128, 128, 64]); verify = np.array([128, 1024, 256]); ctx = np.array([384_000, 384_000, 90_000])
    longest, rows = np.array([6000, 6000, 3000]), np.array([100_000, 0, 7])
    arrays = t.decode_attn(reqs, verify, ctx, EXACT, longest, shared=rows)
    assert arrays.tolist() == [t.decode_attn(*a, SCALAR, m, shared=s) for a, m, s in
                               zip(zip(reqs.tolist(), verify.tolist(), ctx.tolist()), longest.tolist(), rows.tolist())]


def test_a_profile_without_the_term_prices_shared_reads_as_any(tmp_path):
    t = BARE.target
    assert t.decode_attn(128, 128, 384_000, SCALAR, 6000, shared=100_000) == t.decode_attn(128, 128, 384_000, SCALAR, 6000)


def test_bad_probe_points_name_the_file_and_key(tmp_path):
    path = tmp_path / "served.json"
    path.write_text(json.dumps({"points": [{"part": "shared", "kind": "none", "reqs": 64, "groups": 0, "context": 2560,
                                            "shared_tokens": -1, "verify_tokens": 64, "verify_s": 0.01}]}))
    with pytest.raises(InputError, match="shared_tokens"):
        with_shared_term(BARE, path)
    path.write_text(json.dumps({"points": [{"part": "shared", "reqs": 64}]}))
    with pytest.raises(InputError, match="kind"):
        with_shared_term(BARE, path)
    path.write_text("{not json")
    with pytest.raises(InputError, match="served.json"):
        with_shared_term(BARE, path)
