"""`dspark-sim calibrate`, the STS fit and the metrics it reports."""
from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

import numpy as np
import pytest

from dspark_sim.acceptance import AcceptanceConfig, AcceptanceModel, get_preset, metrics, paper
from dspark_sim.commands.calibrate import register
from dspark_sim.metrics.outdir import MARKER
from dspark_sim.acceptance.replay import serve_full_blocks
from dspark_sim.errors import InputError

SGLANG_STS_KEYS = {"temperatures", "dataset", "num_samples", "ece_before", "ece_after"}


def calibrate(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="dspark-sim")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["calibrate", *argv])
    return args.func(args)


def synthetic_sts_log(temps, n: int = 40000, seed: int = 0):
    """Raw logits that are calibrated after dividing by ``temps``, and the accepted drafts they imply."""
    rng = np.random.default_rng(seed)
    q = 1 / (1 + np.exp(-rng.normal(1.5, 1.5, (n, len(temps)))))
    accepted = np.logical_and.accumulate(rng.random(q.shape) < q, axis=1).sum(axis=1)
    return np.log(q / (1 - q)) * np.asarray(temps), accepted


def write_csv(path: Path, header: list[str], rows) -> Path:
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def test_ece_and_auc_basics():
    label = np.array([0, 0, 1, 1])
    assert metrics.auc(np.array([0.1, 0.2, 0.8, 0.9]), label) == 1.0
    assert metrics.auc(np.array([0.5, 0.5, 0.5, 0.5]), label) == 0.5
    assert metrics.auc(np.array([0.9, 0.8, 0.2, 0.1]), label) == 0.0
    assert np.isnan(metrics.auc(np.ones(3), np.ones(3)))
    assert metrics.ece(np.array([0.25, 0.25, 0.75, 0.75]), np.array([0, 1, 1, 1])) == pytest.approx(0.25)
    pred = np.random.default_rng(0).random(200000)
    assert metrics.ece(pred, np.random.default_rng(1).random(200000) < pred) < 0.005


def test_fit_sts_recovers_known_temperatures():
    temps = np.array([1.8, 1.3, 0.8, 1.5])
    logits, accepted = synthetic_sts_log(temps)
    fitted = metrics.fit_sts(logits, accepted)
    np.testing.assert_allclose(fitted, temps, rtol=0.08)
    calibrated = 1 / (1 + np.exp(-logits / fitted))
    assert metrics.ece_by_position(calibrated, accepted).max() < 0.01


def test_log_jsonl_logits_gives_sglang_sts_json(tmp_path):
    temps = [2.0, 1.5, 1.2]
    logits, accepted = synthetic_sts_log(temps, n=40000, seed=3)
    log = tmp_path / "steps.jsonl"
    log.write_text("".join(json.dumps({"logits": z.tolist(), "accept_len": int(a) + 1}) + "\n"
                           for z, a in zip(logits, accepted)))
    assert calibrate("--log", str(log), "--out", str(tmp_path / "out"), "--name", "mine") == 0
    sts = json.loads((tmp_path / "out" / "sts.json").read_text())
    assert set(sts) == SGLANG_STS_KEYS and sts["dataset"] == "mine" and sts["num_samples"] == 40000
    np.testing.assert_allclose(sts["temperatures"], temps, rtol=0.1)
    assert max(sts["ece_after"]) < 0.01 < min(sts["ece_before"])
    assert not [p for p in (tmp_path / "out").iterdir() if p.name.startswith(".") and p.name != MARKER]  # no temp files


def test_log_from_the_model_recovers_its_preset(tmp_path, capsys):
    truth = get_preset("dspark", "qwen3-8b", "chat")
    model = AcceptanceModel.from_presets([truth], AcceptanceConfig(calibration="raw"))
    log = serve_full_blocks(model, np.zeros(1200, dtype=np.int64), 128, 7, np.random.default_rng(9))
    path = write_csv(tmp_path / "log.csv", [f"c{k}" for k in range(1, 8)] + ["accepted"],
                     ([f"{c:.9g}" for c in conf] + [a] for conf, a in zip(log.conf, log.accepted)))
    assert calibrate("--log", str(path), "--domain", "chat", "--out", str(tmp_path / "out"), "--plot") == 0
    assert "ECE before" in capsys.readouterr().out
    assert (tmp_path / "out" / "reliability.png").stat().st_size > 10000
    sts = json.loads((tmp_path / "out" / "sts.json").read_text())
    assert max(sts["ece_after"]) <= 0.015 and min(sts["ece_before"]) >= 0.03
    np.testing.assert_allclose(sts["temperatures"][0], truth.sts_temperatures[0], rtol=0.1)
    cfg = AcceptanceConfig(preset_file=str(tmp_path / "out" / "preset.json"))
    fitted = AcceptanceModel(cfg, "qwen3-8b").presets[2]
    np.testing.assert_allclose(fitted.mu[:7], truth.mu[:7], atol=0.3)
    np.testing.assert_allclose(fitted.conf_noise[:4], truth.conf_noise[:4], rtol=0.15)


def test_table_of_accept_lengths_gives_a_preset_that_reproduces_them(tmp_path):
    table = write_csv(tmp_path / "lens.csv", ["dataset", "accept_len", "domain"],
                      [["gsm8k", 5.0, ""], ["myapp", 4.2, "code"], ["chat", 3.0, ""], ["alpaca", 3.2, ""]])
    assert calibrate("--table", str(table), "--drafter", "dflash", "--target", "qwen3-8b",
                     "--out", str(tmp_path / "out")) == 0
    assert set(json.loads((tmp_path / "out" / "sts.json").read_text())) == SGLANG_STS_KEYS
    model = AcceptanceModel(AcceptanceConfig(drafter="dflash", preset_file=str(tmp_path / "out" / "preset.json")),
                            "qwen3-8b")
    log = serve_full_blocks(model, np.arange(2400) % 3, 256, 7, np.random.default_rng(4))
    for domain, expected in enumerate([5.0, 4.2, 3.1]):
        assert log.accept_len(domain) == pytest.approx(expected, rel=0.03)


def test_yaml_acceptance_by_position_for_one_domain(tmp_path):
    table = tmp_path / "v4.yaml"
    table.write_text(f"accept_rate:\n  math: {list(paper.V4_FLASH_ACCEPT)}\n")
    assert calibrate("--table", str(table), "--out", str(tmp_path / "out")) == 0
    doc = json.loads((tmp_path / "out" / "preset.json").read_text())
    assert doc["header"]["generated_by"] == "dspark-sim calibrate"
    by_domain = {p["domain"]: p for p in doc["presets"]}
    assert by_domain["code"]["mu"] == list(get_preset("dspark", "qwen3-8b", "code").mu)
    model = AcceptanceModel(AcceptanceConfig(preset_file=str(tmp_path / "out" / "preset.json")), "qwen3-8b")
    log = serve_full_blocks(model, np.zeros(2000, dtype=np.int64), 256, 7, np.random.default_rng(5))
    np.testing.assert_allclose((log.accepted[:, None] > np.arange(7)).mean(axis=0), paper.V4_FLASH_ACCEPT,
                               atol=0.012)


def _log_rows(n: int = 150, block_size: int = 3):
    return [[0.9] * block_size + [1] for _ in range(n)]


BAD_INPUTS = [
    ("log", "steps.txt", "c1,accepted\n0.5,1\n", "a log must be"),
    ("log", "empty.csv", "", "no data rows"),
    ("log", "few.csv", "c1,accepted\n" + "0.5,1\n" * 10, "at least"),
    ("log", "noacc.csv", "c1,c2\n" + "0.5,0.5\n" * 150, "exactly one of accepted"),
    ("log", "toomany.csv", "c1,c2,accepted\n" + "0.5,0.5,1\n" * 149 + "0.5,0.5,3\n", "0..2"),
    ("log", "range.csv", "c1,accepted\n" + "0.5,1\n" * 149 + "1.5,1\n", "in [0, 1]"),
    ("log", "text.csv", "c1,accepted\n" + "0.5,1\n" * 149 + "high,1\n", "not numbers"),
    ("log", "both.csv", "c1,logit1,accepted\n" + "0.5,0.1,1\n" * 150, "either confidences"),
    ("log", "ragged.jsonl", '{"confidences": [0.5, 0.5], "accepted": 1}\n' * 149
     + '{"confidences": [0.5], "accepted": 1}\n', "for 2 positions"),
    ("log", "broken.jsonl", '{"confidences": [0.5], "accepted": 1}\n' * 149 + "{oops\n", "not valid JSON"),
    ("table", "unknown.csv", "dataset,accept_len\nmyapp,3.0\n", "give its domain"),
    ("table", "short.csv", "dataset,accept_len\ngsm8k,0.9\n", "accepted length"),
    ("table", "rising.csv", "position,accept_rate\n1,0.5\n2,0.6\n", "cannot rise"),
    ("table", "gap.csv", "position,accept_rate\n1,0.5\n3,0.4\n", "without gaps"),
    ("table", "cols.csv", "name,value\na,1\n", "need columns"),
    ("table", "baddomain.csv", "dataset,accept_len,domain\nx,3.0,poetry\n", "unknown domain"),
    ("table", "key.yaml", "accept_length: {gsm8k: 5}\n", "unknown key"),
    ("table", "list.yaml", "- 1\n- 2\n", "must be a mapping"),
    ("table", "rates.yaml", "accept_rate: [0.5, 1.2]\n", "in (0, 1)"),
    ("table", "table.json", "{}", "must be .csv"),
]


@pytest.mark.parametrize("kind,name,text,why", BAD_INPUTS, ids=[b[1] for b in BAD_INPUTS])
def test_bad_input_is_one_line_input_error_naming_the_file(tmp_path, kind, name, text, why):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(InputError) as err:
        calibrate(f"--{kind}", str(path), "--out", str(tmp_path / "out"))
    message = str(err.value)
    assert why in message and name in message and "\n" not in message
    assert not (tmp_path / "out").exists()


def test_missing_file_is_input_error(tmp_path):
    with pytest.raises(InputError, match="cannot read"):
        calibrate("--log", str(tmp_path / "absent.csv"))


def test_table_and_log_are_exclusive(capsys):
    with pytest.raises(SystemExit):
        calibrate("--table", "a.csv", "--log", "b.csv")
