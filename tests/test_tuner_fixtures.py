"""Shared helpers of the tuner tests (no tests here): a tiny scenario and a tiny tune."""
from __future__ import annotations

from pathlib import Path

import optuna
import yaml

from dspark_sim.tuner.cli import main as tune_main

TINY = {
    "name": "tiny",
    "workload": {"synthetic": {"num_requests": 24, "rate_per_s": 400.0, "arrival": "poisson",
                               "prompt_tokens": {"dist": "constant", "mean": 300},
                               "output_tokens": {"dist": "constant", "mean": 40}},
                 "domain": "math"},
    "model": "qwen3-8b", "gpu": "a100",
    "deployment": {"replicas": 1, "tp": 1, "max_running_requests": 64, "max_batched_tokens": 2048},
    "speculation": {"method": "dspark", "block_size": 5},
    "slo": {"tpot_ms": 40},
    "seed": 0,
}

# A small space so a few trials cover it and one simulation stays ~20 ms. The A100 has no
# measured profile: the tests cost steps with the roofline, which profile updates leave alone.
TINY_SPACE = {"deployment": {"max_running_requests": {"low": 4, "high": 32, "log": True},
                             "chunked_prefill_tokens": [512, 2048]}}


def tiny_scenario(tmp_path: Path, **over) -> Path:
    """Write the tiny scenario (keys in ``over`` replace its sections) and a tiny space next to it."""
    data = {**TINY, **over}
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    (tmp_path / "space.yaml").write_text(yaml.safe_dump(TINY_SPACE))
    return path


def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'study.db'}"


def tune_args(tmp_path: Path, study: str, *extra: str, trials: int = 4, baselines: str = "") -> list[str]:
    """`dspark-tune` arguments for a quiet tiny run into ``tmp_path``."""
    return ["--scenario", str(tiny_scenario(tmp_path)), "--space", str(tmp_path / "space.yaml"),
            "--trials", str(trials), "--baseline-trials", "3", "--baselines", baselines,
            "--storage", sqlite_url(tmp_path), "--study", study, "--out", str(tmp_path / "out"),
            "--quiet", *extra]


def run_tiny(tmp_path: Path, study: str = "tiny", *extra: str, **kw) -> Path:
    """Run a tiny tune in this process; returns its output directory."""
    assert tune_main(tune_args(tmp_path, study, *extra, **kw)) == 0
    return tmp_path / "out"


def complete_trials(url: str, study: str) -> list[optuna.trial.FrozenTrial]:
    s = optuna.load_study(study_name=study, storage=url)
    return s.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
