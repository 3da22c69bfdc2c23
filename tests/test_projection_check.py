"""A projected profile against the profiler's points on the GPU it was projected to."""
import json
import shutil
from pathlib import Path

from dspark_sim.cost.profile_format import load_profile
from dspark_sim.profiling import projection_check

PROFILES = Path(__file__).resolve().parents[1] / "profiles"
MODEL = "qwen3-14b"


def test_the_measured_gpus_own_points_price_close_to_its_profile():
    raw = json.loads((PROFILES / "h200" / "raw" / f"raw_{MODEL}.json").read_text())
    cells = projection_check.summary(projection_check.priced_points(raw, load_profile(PROFILES / "h200" / f"{MODEL}.json")))
    assert {"verify", "prefill", "step"} <= set(cells)
    assert cells["verify"]["median"] < 0.05 and cells["prefill"]["median"] < 0.05


def test_points_filed_under_a_slower_gpu_show_the_projection_far_off(tmp_path):
    """The H200's own points filed as if measured on an H100: the projection to the H100 (less HBM
    bandwidth) prices the memory-bound decode points well over them, and the block says so."""
    (tmp_path / "h200").mkdir()
    shutil.copy(PROFILES / "h200" / f"{MODEL}.json", tmp_path / "h200")
    (tmp_path / "h100" / "raw").mkdir(parents=True)
    shutil.copy(PROFILES / "h200" / "raw" / f"raw_{MODEL}.json", tmp_path / "h100" / "raw")
    [result] = projection_check.check_all(tmp_path)
    assert result["gpu"] == "h100" and "projected from h200" in result["source"]
    assert result["sections"]["verify"]["median_signed"] > 0.2
    text = projection_check.block_text(tmp_path)
    assert f"| {MODEL} | h100 (" in text


def test_without_a_raw_file_of_another_gpu_the_block_says_not_measured(tmp_path):
    assert projection_check.block_text(tmp_path).startswith("Not measured yet")


def test_a_raw_file_that_is_not_json_is_named(tmp_path):
    import pytest

    from dspark_sim.errors import InputError

    (tmp_path / "h200").mkdir()
    shutil.copy(PROFILES / "h200" / f"{MODEL}.json", tmp_path / "h200")
    (tmp_path / "h100" / "raw").mkdir(parents=True)
    (tmp_path / "h100" / "raw" / f"raw_{MODEL}.json").write_text("{not json")
    with pytest.raises(InputError, match=f"raw_{MODEL}.json"):
        projection_check.check_all(tmp_path)
