"""Exports: every file parses and carries the chosen trial; SGLang's tables pass SGLang's
checks; dspark.yaml replays through `dspark-sim run` to the metrics the tuner scored."""
from __future__ import annotations

import json
import math
import os
import stat

import optuna
import pytest
import yaml
from test_tuner_fixtures import run_tiny, sqlite_url, tiny_scenario

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


def check_sglang_sts(d: dict, block_size: int) -> None:
    """``DSparkStsCalibration.__post_init__`` plus the worker's one-temperature-per-position rule."""
    temps = d["temperatures"]
    assert temps and all(_is_num(t) and t > 0 for t in temps)
    assert len(temps) == block_size
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
    block_size, cap = config["speculation"]["block_size"], config["deployment"]["max_running_requests"]
    # the drafter is named: without `model` vLLM would relabel the target as a DeepSeek-V4 drafter
    assert args["speculative-config"] == {"method": "dspark", "model": "deepseek-ai/dspark_qwen3_8b_block7",
                                          "num_speculative_tokens": block_size, "enable_adaptive_verification": True}
    assert args["max-num-seqs"] == cap
    assert args["max-cudagraph-capture-size"] == cap * (block_size + 1)  # R full windows stay in a graph
    assert "long-prefill-token-threshold" not in args  # a per-request cap, not the step's
    assert args["model"] == "Qwen/Qwen3-8B" and args["max-num-batched-tokens"] == 2048
    text = (tmp / f"vllm-{trial.number}" / "vllm.yaml").read_text()
    assert "tuned for SGLang 0.5.23" in text and "--engine vllm" in text  # the study held SGLang's knobs


def test_trtllm_yaml(tuned):
    tmp, url, trial = tuned
    args = yaml.safe_load((_export(tmp, url, trial, "trtllm") / "trtllm.yaml").read_text())
    block_size = trial.user_attrs["config"]["speculation"]["block_size"]
    cap = trial.user_attrs["config"]["deployment"]["max_running_requests"]
    assert args["speculative_config"] == {"decoding_type": "DSpark", "max_draft_len": block_size,
                                          "block_size": block_size,
                                          "speculative_model": "deepseek-ai/dspark_qwen3_8b_block7"}
    assert args["max_batch_size"] == cap and args["cuda_graph_config"]["max_batch_size"] == cap


def test_export_adds_formats_with_readable_modes(tuned, tmp_path):
    """Each export adds its files next to the others; files 0644, folders 0755 (umask 022)."""
    tmp, url, trial = tuned
    out = tmp_path / "deploy"
    old = os.umask(0o022)
    try:
        for fmt in ("sglang", "vllm", "trtllm", "dspark"):
            assert tune_main(["export", "--study", "exp", "--trial", str(trial.number), "--format", fmt,
                              "--storage", url, "--out", str(out)]) == 0
    finally:
        os.umask(old)
    names = {p.name for p in out.iterdir()}
    assert {"sglang.yaml", "vllm.yaml", "trtllm.yaml", "dspark.yaml", "sps_table.json", "sts.json"} <= names
    for path in out.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o644, path
    assert stat.S_IMODE(out.stat().st_mode) == 0o755


def test_tuned_output_directory_is_world_readable(tuned):
    tmp, _, _ = tuned
    out = tmp / "out"
    assert stat.S_IMODE(out.stat().st_mode) & 0o055 == 0o055
    assert stat.S_IMODE((out / "sps_table.json").stat().st_mode) & 0o044 == 0o044


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


def test_a_study_stored_in_older_names_keeps_loading_and_exports_block_size(tuned, tmp_path):
    """A study stored before the tuner said block_size: its space's num_draft_tokens knob and a
    schedule trial's rules {max_batch_size, num_draft_tokens} load, and the export names block_size."""
    from dspark_sim.tuner.report import knobs
    from dspark_sim.tuner.tune import stored_settings

    tmp, url, trial = tuned
    settings = json.loads(json.dumps(optuna.load_study(study_name="exp", storage=url).user_attrs["settings"]))
    settings["space"]["static"] = {"num_draft_tokens": {"low": 1, "high": 4, "log": False}}
    old = optuna.create_study(study_name="old", storage=url, directions=["maximize"])
    old.set_user_attr("settings", settings)
    rules = [{"max_batch_size": 8, "num_draft_tokens": 3}, {"max_batch_size": None, "num_draft_tokens": 1}]
    config = {**trial.user_attrs["config"], "speculation": {"method": "schedule", "drafter": "mtp", "block_size": 3,
                                                            "schedule": rules}}
    old.add_trial(optuna.trial.create_trial(value=trial.values[0], user_attrs={
        **trial.user_attrs, "method": "schedule", "config": config}))
    assert stored_settings(url, "old").space.knob("static", "block_size").high == 4
    assert "block_size=3@8/1@inf" in knobs(config)
    out = tmp_path / "old"
    assert tune_main(["export", "--study", "old", "--trial", "0", "--format", "dspark", "--storage", url,
                      "--out", str(out)]) == 0
    text = (out / "dspark.yaml").read_text()
    assert "num_draft_tokens" not in text
    assert yaml.safe_load(text)["speculation"]["schedule"] == [{"max_batch_size": 8, "block_size": 3},
                                                               {"max_batch_size": None, "block_size": 1}]
    assert sim_main(["run", str(out / "dspark.yaml"), "--out", str(tmp_path / "run"), "--no-plots", "--quiet"]) == 0


def test_export_defaults_to_the_confirmed_winner(tuned, tmp_path):
    tmp, url, trial = tuned
    assert tune_main(["export", "--study", "exp", "--format", "vllm", "--storage", url,
                      "--out", str(tmp_path / "w")]) == 0
    assert f"trial {trial.number} " in (tmp_path / "w" / "vllm.yaml").read_text()


def test_export_unknown_trial_is_one_line(tuned, capsys):
    tmp, url, _ = tuned
    assert tune_main(["export", "--study", "exp", "--trial", "999", "--format", "vllm", "--storage", url]) == 2
    assert "--trial=999" in capsys.readouterr().err


def test_unmet_slo_names_the_binding_constraint_and_marks_every_export(tmp_path):
    """No trial can meet p99 TPOT <= 0.01 ms: the report says which constraint binds and the
    nearest SLO a trial meets; every export carries the warning instead of posing as a fit."""
    out = run_tiny(tmp_path, "miss", "--slo-tpot-ms", "0.01")
    report = (out / "report.md").read_text()
    assert "does NOT meet the SLO" in report and "Binding: p99 TPOT" in report
    nearest = float(report.split("Nearest SLO a trial meets")[1].split("p99 TPOT <= ")[1].split(" ms")[0].replace(",", ""))
    study = optuna.load_study(study_name="miss", storage=sqlite_url(tmp_path))
    worst = [t.user_attrs["worst"]["p99_tpot_ms"] for t in study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))]
    assert nearest == pytest.approx(min(worst), abs=0.05)  # the best tail any trial reached
    for name in ("sglang.yaml", "vllm.yaml", "trtllm.yaml", "dspark.yaml"):
        assert "WARNING: this configuration does NOT meet the SLO" in (out / name).read_text(), name


def test_latency_bound_study_probes_the_smallest_request_cap_first(tmp_path):
    run_tiny(tmp_path, "probe")
    first = optuna.load_study(study_name="probe", storage=sqlite_url(tmp_path)).trials[0]
    assert first.params["max_running_requests"] == 4  # the tiny space's low end
    assert first.params["chunked_prefill_tokens"] == 2048  # its largest chunk


@pytest.mark.parametrize("value,why", [("no such id", "Hugging Face id"), ("./missing-ckpt", "path not found")])
def test_bad_drafter_is_one_line(tmp_path, capsys, value, why):
    assert tune_main(["--scenario", str(tiny_scenario(tmp_path)), "--drafter", value,
                      "--storage", sqlite_url(tmp_path), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--drafter" in err and why in err
