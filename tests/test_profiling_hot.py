"""The power-limit term's fit on prompt steps timed back to back against timed as the profiler
times them: a known ratio recovered, held out by chunk size, bad cells refused."""
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
               held_out={k: v for k, v in PROFILE.held_out.items() if k != "hot@chunk"})
SHIPPED = Path(__file__).resolve().parents[1] / "profiles" / "h200" / "prefill_clocks.json"


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


def test_the_shipped_profile_carries_the_term_fitted_on_the_shipped_cells():
    fitted, report = with_hot_term(BARE, SHIPPED)
    assert fitted.target.hot_ratio == PROFILE.target.hot_ratio > 0
    assert report["shapes"] == 10 and report["gpu_uuid"].startswith("GPU-fb021b3e")


@pytest.mark.parametrize("text", ["[1, 2]", "{not json"])
def test_a_probe_that_is_not_a_json_object_is_one_line(tmp_path, text):
    path = tmp_path / "clocks.json"
    path.write_text(text)
    with pytest.raises(InputError) as e:
        with_hot_term(BARE, path)
    assert "clocks.json" in str(e.value) and "\n" not in str(e.value)
