"""The power-limit term's fit on prompt steps timed back to back against timed as the profiler
times them, and on another GPU's mixed steps held: a known ratio recovered, the mean over the
GPUs, held out by chunk size and by GPU, bad cells refused."""
import json
from dataclasses import replace
from pathlib import Path

import pytest

from dspark_sim.cost import get_cost_model
from dspark_sim.cost.base import StepWork
from dspark_sim.cost.shapes import SCALAR
from dspark_sim.errors import InputError
from dspark_sim.profiling.hot import with_hot_term

PROFILE = get_cost_model("h200", "qwen3-8b", warn=False).profile
BARE = replace(PROFILE, target=replace(PROFILE.target, hot_ratio=0.0, hot_window_s=0.0, hot_duty0=0.0),
               held_out={k: v for k, v in PROFILE.held_out.items() if not k.startswith("hot@")})
SHIPPED = Path(__file__).resolve().parents[1] / "profiles" / "h200" / "prefill_clocks.json"
SHIPPED_MIXED = SHIPPED.parent / "raw" / "after_mixed_qwen3-8b.json"


def _probe(path: Path, ratio: float = 0.05, model: str = "qwen3-8b") -> Path:
    """Cells priced by the profile: back to back ``ratio`` slower on the linear layers, at the
    profile's idle and longer as priced."""
    cells = []
    for rnd in range(2):
        for chunk, cached in ((4096, 0), (2048, 2048), (1024, 4096), (512, 0)):
            work = StepWork(prefill_tokens=chunk, prefill_reqs=1, prefill_attn_tokens2=chunk * (cached + chunk / 2))
            over, linear, per_req, attn = BARE.target.parts(0, 0, chunk, 0, work.prefill_attn_tokens2, 1, SCALAR)
            base = over + linear + per_req + attn
            for idle, s in ((0.0, base + ratio * linear), (1.0, base), (3.0, base)):
                cells.append({"round": rnd, "chunk": chunk, "cached": cached, "idle": idle, "step_s": s})
    path.write_text(json.dumps({"provenance": {"model": model, "gpu_uuid": "GPU-x"}, "cells": cells}))
    return path


def test_the_fit_recovers_the_ratio_and_the_profiles_duty(tmp_path):
    fitted, report = with_hot_term(BARE, _probe(tmp_path / "clocks.json"))
    t = fitted.target
    assert t.hot_ratio == pytest.approx(0.05, rel=1e-9)
    assert t.hot_duty0 == 0.5  # the profiler idled as long as each call: half the time busy
    assert t.hot_window_s == 1.0
    assert fitted.held_out["hot@chunk"].median_rel_err < 1e-9
    assert report["held_out"]["without"]["median"] > 0.02  # the term matters on these steps
    assert report["held_out"]["cooler"]["max"] < 1e-12  # longer idle: the profile's price


def test_another_models_cells_leave_the_profile_alone(tmp_path):
    assert with_hot_term(BARE, _probe(tmp_path / "c.json", model="qwen3-4b")) == (BARE, None)


@pytest.mark.parametrize("cell, key", [({"step_s": -1.0}, "cells[0].step_s"), ({"chunk": "x"}, "cells[0].chunk"),
                                       ({"idle": None}, "cells[0].idle")])
def test_a_bad_cell_is_one_line_naming_the_file_and_key(tmp_path, cell, key):
    path = _probe(tmp_path / "clocks.json")
    probe = json.loads(path.read_text())
    probe["cells"][0].update(cell)
    path.write_text(json.dumps(probe))
    with pytest.raises(InputError, match=key.replace("[", r"\[").replace("]", r"\]")) as e:
        with_hot_term(BARE, path)
    assert "clocks.json" in str(e.value)


def _mixed(path: Path, ratio: float, model: str = "qwen3-8b", **bad) -> Path:
    """Another GPU's held mixed steps: the chunk's linear seconds as priced, ``ratio`` slower hot."""
    points = []
    for reqs, cool in ((64, 0.12), (128, 0.13), (192, 0.14)):
        linear = BARE.target.parts(0, 0, 4096, 0, 4096 * 2048, 1, SCALAR)[1]
        points.append({"part": "after", "hold": "mixed", "kind": "none", "reqs": reqs, "chunk": 4096,
                       "held_cool_s": cool, "held_hot_s": cool + ratio * linear, "hot_s": 0.01, "cool_s": 0.01})
    points[0].update(bad)
    path.write_text(json.dumps({"provenance": {"model": model, "gpu_uuid": "GPU-y"}, "points": points}))
    return path


def test_another_gpus_mixed_steps_join_as_the_mean_and_are_held_out_by_gpu(tmp_path):
    fitted, report = with_hot_term(BARE, _probe(tmp_path / "clocks.json", 0.04), (_mixed(tmp_path / "m.json", 0.08),))
    assert fitted.target.hot_ratio == pytest.approx(0.06, rel=1e-9)
    assert [h["gpu_uuid"] for h in report["hosts"]] == ["GPU-x", "GPU-y"]
    assert [h["ratio"] for h in report["hosts"]] == pytest.approx([0.04, 0.08], rel=1e-9)
    by_host = report["by_host"]  # each GPU priced with the other's ratio: off by the difference
    assert by_host["with"]["max"] > 0.005 and fitted.held_out["hot@host"].num_points == 8 + 3
    alone, _ = with_hot_term(BARE, _probe(tmp_path / "c2.json", 0.04), (_mixed(tmp_path / "o.json", 0.08, "qwen3-4b"),))
    assert alone.target.hot_ratio == pytest.approx(0.04, rel=1e-9) and "hot@host" not in alone.held_out


def test_a_bad_mixed_step_names_its_file_and_key(tmp_path):
    with pytest.raises(InputError, match=r"points\[0\]\.held_hot_s") as e:
        with_hot_term(BARE, _probe(tmp_path / "clocks.json"), (_mixed(tmp_path / "m.json", 0.05, held_hot_s=-1.0),))
    assert "m.json" in str(e.value)


def test_the_shipped_profile_carries_the_term_fitted_on_the_shipped_cells():
    fitted, report = with_hot_term(BARE, SHIPPED, (SHIPPED_MIXED,))
    assert fitted.target.hot_ratio == PROFILE.target.hot_ratio > 0
    assert report["shapes"] == 10 and report["gpu_uuid"].startswith("GPU-fb021b3e")
    assert [h["gpu_uuid"][:12] for h in report["hosts"]] == ["GPU-fb021b3e", "GPU-faeedfaf"]


@pytest.mark.parametrize("text", ["[1, 2]", "{not json"])
def test_a_probe_that_is_not_a_json_object_is_one_line(tmp_path, text):
    path = tmp_path / "clocks.json"
    path.write_text(text)
    with pytest.raises(InputError) as e:
        with_hot_term(BARE, path)
    assert "clocks.json" in str(e.value) and "\n" not in str(e.value)
