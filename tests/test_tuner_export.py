"""Exports: every file parses and carries the chosen trial; SGLang's tables pass SGLang's
checks; dspark.yaml replays through `dspark-sim run` to the metrics the tuner scored."""
from __future__ import annotations

import json
import math

import optuna
import pytest
import yaml
from test_tuner_fixtures import run_tiny, sqlite_url

from dspark_sim.cli import main as sim_main
from dspark_sim.tuner.cli import main as tune_main
from dspark_sim.tuner.objective import RECORDED


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """A tiny DSpark study with every graph-tier ladder allowed; returns (tmp, url, winner trial)."""
    tmp = tmp_path_factory.mktemp("export")
    run_tiny(tmp, "exp", trials=6)
    url = sqlite_url(tmp)
    study = optuna.load_study(study_name="exp", storage=url)
    winner = study.user_attrs["winner"]
    return tmp, url, study.trials[winner["trial"]]


def _export(tmp, url, trial, fmt: str):
    out = tmp / f"{fmt}-{trial.number}"
    assert tune_main(["export", "--study", "exp", "--trial", str(trial.number), "--format", fmt,
                      "--storage", url, "--out", str(out)]) == 0
    return out


def _is_int(v) -> bool:
    return type(v) is int  # msgspec decodes list[int] strictly: no bools, no floats


def _is_num(v) -> bool:
    return type(v) in (int, float) and math.isfinite(v)


def check_sglang_sps(d: dict) -> None:
    """The checks of SGLang ``dspark_sps_table.py`` (SpsCostTable / SpsAdditiveCostTable.__post_init__)."""
    if "bias_seconds" in d:  # load_sps_table_from_path picks the additive table on this key
        assert _is_num(d["bias_seconds"]) and d["bias_seconds"] > 0
        for probes, values in (("bs_probes", "alpha_seconds"), ("m_probes", "theta_seconds")):
            assert d[probes] and all(map(_is_int, d[probes])) and all(map(_is_num, d[values]))
            assert d[probes] == sorted(set(d[probes]))
            assert len(d[probes]) == len(d[values])
    else:
        assert d["sample_batch_tokens"] and all(map(_is_int, d["sample_batch_tokens"]))
        assert d["sample_batch_tokens"] == sorted(set(d["sample_batch_tokens"]))
        assert len(d["sample_steps_per_sec"]) == len(d["sample_batch_tokens"])
        assert all(_is_num(v) and v > 0 for v in d["sample_steps_per_sec"])
        assert _is_int(d["max_batch_tokens"]) and d["max_batch_tokens"] >= d["sample_batch_tokens"][-1]


def check_sglang_sts(d: dict, gamma: int) -> None:
    """``DSparkStsCalibration.__post_init__`` plus the worker's one-temperature-per-position rule."""
    temps = d["temperatures"]
    assert temps and all(_is_num(t) and t > 0 for t in temps)
    assert len(temps) == gamma
    assert isinstance(d.get("dataset", ""), str) and _is_int(d.get("num_samples", 0))
    for key in ("ece_before", "ece_after"):
        assert all(map(_is_num, d.get(key, [])))


def test_sglang_yaml_and_tables(tuned):
    tmp, url, trial = tuned
    out = _export(tmp, url, trial, "sglang")
    spec, dep = trial.user_attrs["config"]["speculation"], trial.user_attrs["config"]["deployment"]
    flags = yaml.safe_load((out / "sglang.yaml").read_text())
    assert all("_" not in k and isinstance(v, (str, int, float, bool)) for k, v in flags.items())  # flat
    assert flags["speculative-algorithm"] == "DSPARK"
    assert flags["speculative-dspark-block-size"] == spec["block_size"]
    assert flags["max-running-requests"] == dep["max_running_requests"]
    assert flags["chunked-prefill-size"] == dep["chunked_prefill_tokens"]
    assert flags["model-path"] == "Qwen/Qwen3-8B" and flags["tp-size"] == 1
    assert flags.get("speculative-dspark-align-verify-tokens-to-graph-tier", False) == \
        spec.get("pad_to_graph_tier", False)
    sps = json.loads(open(flags["speculative-dspark-sps-table-path"]).read())
    sts = json.loads(open(flags["speculative-dspark-confidence-sts-path"]).read())
    check_sglang_sps(sps)
    check_sglang_sts(sts, spec["block_size"])
    if "lag_steps" in spec:
        assert f"SGLANG_DSPARK_CONFIDENCE_RELAY_LAG_STEPS={spec['lag_steps']}" in (out / "sglang.yaml").read_text()


def test_sps_floor_table_rules_catch_bad_tables():
    good = {"sample_batch_tokens": [1, 8], "sample_steps_per_sec": [100.0, 90.0], "max_batch_tokens": 8}
    check_sglang_sps(good)
    for bad in ({**good, "sample_batch_tokens": [8, 1]}, {**good, "max_batch_tokens": 4},
                {**good, "sample_steps_per_sec": [1.0]}, {**good, "sample_batch_tokens": [1.0, 8]}):
        with pytest.raises(AssertionError):
            check_sglang_sps(bad)


def test_vllm_yaml(tuned):
    tmp, url, trial = tuned
    args = yaml.safe_load((_export(tmp, url, trial, "vllm") / "vllm.yaml").read_text())
    config = trial.user_attrs["config"]
    assert args["speculative-config"] == {"method": "dspark", "enable_adaptive_verification": True,
                                          "num_speculative_tokens": config["speculation"]["block_size"]}
    assert args["max-num-seqs"] == config["deployment"]["max_running_requests"]
    assert args["long-prefill-token-threshold"] == config["deployment"]["chunked_prefill_tokens"]
    assert args["model"] == "Qwen/Qwen3-8B" and args["max-num-batched-tokens"] == 2048


def test_trtllm_yaml(tuned):
    tmp, url, trial = tuned
    text = (_export(tmp, url, trial, "trtllm") / "trtllm.yaml").read_text()
    args = yaml.safe_load(text)
    gamma = trial.user_attrs["config"]["speculation"]["block_size"]
    assert args["speculative_config"] == {"decoding_type": "DSpark", "max_draft_len": gamma, "block_size": gamma}
    assert args["max_batch_size"] == trial.user_attrs["config"]["deployment"]["max_running_requests"]
    assert "confidence_sps_table_path" in text  # documented, commented: not an upstream field yet


def test_dspark_yaml_replays_to_the_scored_metrics(tuned, tmp_path):
    tmp, url, trial = tuned
    out = _export(tmp, url, trial, "dspark")
    raw = yaml.safe_load((out / "dspark.yaml").read_text())
    assert raw["speculation"]["sps_table"] == "sps_table.json"  # relative to dspark.yaml
    assert (out / "sps_table.json").is_file() and (out / "sts.json").is_file()
    assert sim_main(["run", str(out / "dspark.yaml"), "--out", str(tmp_path / "run"), "--no-plots", "--quiet"]) == 0
    replay = json.loads((tmp_path / "run" / "summary.json").read_text())
    scored = next(s for s in trial.user_attrs["per_seed"] if s["seed"] == raw["seed"])
    for key in RECORDED:
        if key in replay and scored[key] is not None:
            assert replay[key] == pytest.approx(scored[key], rel=1e-12), key


def test_export_defaults_to_the_confirmed_winner(tuned, tmp_path):
    tmp, url, trial = tuned
    assert tune_main(["export", "--study", "exp", "--format", "vllm", "--storage", url,
                      "--out", str(tmp_path / "w")]) == 0
    assert f"trial {trial.number} " in (tmp_path / "w" / "vllm.yaml").read_text()


def test_export_unknown_trial_is_one_line(tuned, capsys):
    tmp, url, _ = tuned
    assert tune_main(["export", "--study", "exp", "--trial", "999", "--format", "vllm", "--storage", url]) == 2
    assert "--trial=999" in capsys.readouterr().err
