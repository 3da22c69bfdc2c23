"""The acceptance model against the paper: Table 1, the head's AUC and calibration, DeepSeek figures.

Every check replays requests through AcceptanceModel.step/accept (not the
fitter's code): each request runs to a fixed output length with the whole
block of 7 verified, so the mean accepted length is step-weighted the
way Table 1 (and the simulator) measure it.
"""
from __future__ import annotations

import json
import warnings
import zlib
from functools import lru_cache

import numpy as np
import pytest

from dspark_sim.names import DOMAINS
from dspark_sim.acceptance import (DATASETS, DOMAINS, AcceptanceConfig, AcceptanceModel, get_preset,
                                   metrics, paper)
from dspark_sim.acceptance.preset import MAX_POSITIONS
from dspark_sim.acceptance.replay import serve_full_blocks
from dspark_sim.errors import InputError

GAMMA = 7
REQUESTS_PER_CELL, OUTPUT_TOKENS = 800, 256
# Three Table 1 datasets per replay, one in each domain slot of the model.
GROUPS = [("gsm8k", "mbpp", "mt-bench"), ("math500", "humaneval", "alpaca"), ("aime25", "lcb", "arena-hard"),
          DOMAINS]
CELLS = [(t, d, ds) for (t, d) in paper.TABLE1 for ds in DATASETS]
AUC_POSITIONS = (1, 3, 5, 7)  # where the paper measured; 2, 4, 6 are interpolated


@lru_cache(maxsize=None)
def replay(drafter: str, target: str, group: tuple[str, ...]):
    """Full-block replays with raw and with STS confidences (same seed, so the same acceptance)."""
    presets = [get_preset(drafter, target, name) for name in group]
    domains = np.repeat(np.arange(len(group)), REQUESTS_PER_CELL)
    seed = zlib.crc32(repr((drafter, target, group)).encode())
    raw, sts = (serve_full_blocks(AcceptanceModel.from_presets(presets, AcceptanceConfig(calibration=c)),
                                  domains, OUTPUT_TOKENS, GAMMA, np.random.default_rng(seed))
                for c in ("raw", "sts"))
    np.testing.assert_array_equal(raw.accepted, sts.accepted)
    return raw, sts


def cell(drafter: str, target: str, name: str):
    """(raw conf [n, 7], STS conf [n, 7], accepted [n]) of one Table 1 dataset or domain."""
    group = next(g for g in GROUPS if name in g)
    raw, sts = replay(drafter, target, group)
    rows = raw.domain == group.index(name)
    return raw.conf[rows], sts.conf[rows], raw.accepted[rows]


@pytest.mark.parametrize("target,drafter,dataset", CELLS)
def test_table1_cell_within_3_percent(target, drafter, dataset):
    *_, accepted = cell(drafter, target, dataset)
    expected = paper.TABLE1[(target, drafter)][list(DATASETS).index(dataset)]
    assert 1 + accepted.mean() == pytest.approx(expected, rel=0.03)


@pytest.mark.parametrize("target,drafter", list(paper.TABLE1))
@pytest.mark.parametrize("domain", DOMAINS)
def test_domain_preset_is_the_mean_of_its_datasets(target, drafter, domain):
    *_, accepted = cell(drafter, target, domain)
    values = paper.TABLE1[(target, drafter)]
    expected = np.mean([v for v, ds in zip(values, DATASETS) if DATASETS[ds] == domain])
    assert 1 + accepted.mean() == pytest.approx(expected, rel=0.03)


DSPARK_CELLS = [(t, ds) for (t, d) in paper.TABLE1 if d == "dspark" for ds in list(DATASETS) + list(DOMAINS)]


@pytest.mark.parametrize("target,name", DSPARK_CELLS)
def test_dspark_head_auc_and_calibration(target, name):
    raw, sts, accepted = cell("dspark", target, name)
    target_auc = np.array(paper.AUC_BY_POSITION)
    at = np.array(AUC_POSITIONS) - 1
    for conf in (raw, sts):
        auc = metrics.auc_by_position(conf, accepted)
        assert np.abs(auc[at] - target_auc[at]).max() <= 0.02, auc
    ece_raw = metrics.ece_by_position(raw, accepted)
    assert ece_raw.min() >= 0.03 and ece_raw.max() <= 0.08, ece_raw
    ece_sts = metrics.ece_by_position(sts, accepted)
    assert ece_sts.mean() <= 0.0125 and ece_sts.max() <= 0.0175, ece_sts


@pytest.mark.parametrize("drafter", ["dflash", "eagle3"])
@pytest.mark.parametrize("target", ["qwen3-4b", "qwen3-14b"])
def test_other_drafters_head_is_overconfident_raw_and_calibrated_by_sts(drafter, target):
    for name in ("gsm8k", "humaneval", "arena-hard"):
        raw, sts, accepted = cell(drafter, target, name)
        ece_raw = metrics.ece_by_position(raw, accepted)
        # Late positions in low-acceptance chat: survival is near 0 for most rows, so is the ECE.
        assert 0.02 <= ece_raw.min() and ece_raw.max() <= 0.08
        assert metrics.ece_by_position(sts, accepted).max() <= 0.02


def test_deepseek_v4_flash_per_position_figures():
    """Chat traffic replays the engine report's per-position figures (its production traffic)."""
    model = AcceptanceModel(AcceptanceConfig(drafter="dspark"), "deepseek-v4-flash")
    chat = DOMAINS.index("chat")
    log = serve_full_blocks(model, np.full(3000, chat), OUTPUT_TOKENS, GAMMA, np.random.default_rng(1))
    by_position = (log.accepted[:, None] > np.arange(GAMMA)).mean(axis=0)
    np.testing.assert_allclose(by_position, paper.V4_FLASH_ACCEPT, atol=0.012)
    assert log.accept_len() == pytest.approx(2.91, rel=0.03)


@pytest.mark.parametrize("target", ["deepseek-v4-flash", "deepseek-v4-pro"])
def test_deepseek_v4_accepts_by_domain_as_derived_from_the_published_figures(target):
    """Each domain replays its derived accepted length (paper.v4_accept_lens: V4-Pro's accept
    length about 5 on gsm8k and its verify windows by dataset); math above code above chat."""
    model = AcceptanceModel(AcceptanceConfig(drafter="dspark"), target)
    lens = {}
    for domain in DOMAINS:
        log = serve_full_blocks(model, np.full(3000, DOMAINS.index(domain)), OUTPUT_TOKENS, GAMMA,
                                np.random.default_rng(2))
        lens[domain] = log.accept_len()
        assert lens[domain] == pytest.approx(paper.v4_accept_lens()[(target, domain)], rel=0.03)
    assert lens["math"] > lens["code"] > lens["chat"]
    from dspark_sim.acceptance.preset import builtin

    assert builtin().resolve_target("dspark", target) == target  # V4-Pro no longer borrows Flash's


def test_deepseek_v3_mtp_second_token_acceptance():
    model = AcceptanceModel(AcceptanceConfig(drafter="mtp"), "deepseek-v3")
    log = serve_full_blocks(model, np.arange(3000) % 3, 128, 3, np.random.default_rng(2))
    assert 0.85 <= (log.accepted >= 1).mean() <= 0.90
    assert np.all(np.diff(get_preset("mtp", "deepseek-v3", "chat").mu) < 0)


def _model(**cfg) -> AcceptanceModel:
    return AcceptanceModel(AcceptanceConfig(**cfg), "qwen3-8b")


def test_step_shapes_and_ranges_for_every_gamma():
    model, rng = _model(), np.random.default_rng(0)
    domains = np.arange(256) % 3
    difficulty = model.new_requests(domains, rng)
    assert difficulty.dtype == np.float64 and difficulty.shape == (256,)
    for block_size in range(1, MAX_POSITIONS + 1):
        p, conf = model.step(difficulty, domains.astype(np.int8), block_size, rng)
        assert p.shape == conf.shape == (256, block_size) and p.flags.c_contiguous and conf.flags.c_contiguous
        assert np.all((p >= 0) & (p <= 1)) and np.all((conf >= 0) & (conf <= 1))
        accepted = model.accept(p, np.full(256, block_size), rng)
        assert accepted.dtype == np.int64 and accepted.min() >= 0 and accepted.max() <= block_size


def test_mu_past_position_seven_never_rises():
    for drafter, target in [("eagle3", "qwen3-4b"), ("dflash", "qwen3-14b"), ("dspark", "deepseek-v4-flash")]:
        for domain in DOMAINS:
            mu = np.array(get_preset(drafter, target, domain).mu)
            assert len(mu) == MAX_POSITIONS and np.all(np.diff(mu[paper.FIT_POSITIONS - 1:]) <= 0)


def test_accept_is_sequential_and_capped():
    model, rng = _model(), np.random.default_rng(0)
    p = np.array([[1.0, 1.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0], [0.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0]])
    np.testing.assert_array_equal(model.accept(p, np.array([4, 2, 4, 0]), rng), [2, 2, 0, 0])
    np.testing.assert_array_equal(model.accept(p, 3, rng), [2, 3, 0, 3])


def test_same_seed_same_draws_bit_for_bit():
    def run(seed: int):
        model, rng = _model(), np.random.default_rng(seed)
        domains = np.arange(64) % 3
        d = model.new_requests(domains, rng)
        out = []
        for block_size in (7, 3, 16):
            p, c = model.step(d, domains, block_size, rng)
            out += [p, c, model.accept(p, np.full(64, block_size // 2), rng)]
        return out

    for a, b in zip(run(5), run(5)):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(run(5)[0], run(6)[0])


def test_raw_and_sts_share_the_truth():
    rng_a, rng_b = np.random.default_rng(3), np.random.default_rng(3)
    d, dom = np.zeros(128), np.arange(128) % 3
    p_sts, c_sts = _model().step(d, dom, 7, rng_a)
    p_raw, c_raw = _model(calibration="raw").step(d, dom, 7, rng_b)
    np.testing.assert_array_equal(p_sts, p_raw)
    assert c_raw.mean() > c_sts.mean()  # raw is over-confident


def test_fixed_accept_prob_baseline():
    model, rng = _model(fixed_accept_prob=0.6), np.random.default_rng(0)
    dom = np.zeros(20000, dtype=np.int64)
    p, conf = model.step(model.new_requests(dom, rng), dom, 4, rng)
    assert np.all(p == 0.6) and np.all(conf == 0.6)
    assert model.accept(p, 4, rng).mean() == pytest.approx(sum(0.6 ** k for k in range(1, 5)), rel=0.02)


def test_overrides_difficulty_sigma_and_auc():
    rng = np.random.default_rng(0)
    wide = _model(difficulty_sigma=2.0).new_requests(np.zeros(20000, dtype=np.int64), rng)
    assert wide.std() == pytest.approx(2.0, rel=0.05)
    model = AcceptanceModel(AcceptanceConfig(calibration="raw", auc=(0.7,)), "qwen3-8b")
    log = serve_full_blocks(model, np.full(1500, 2), 128, GAMMA, rng)
    assert metrics.auc(log.conf[:, 0], log.accepted >= 1) == pytest.approx(0.7, abs=0.03)


def test_dataset_pins_one_table1_cell():
    model = _model(dataset="gsm8k")
    assert all(p.dataset == "gsm8k" for p in model.presets)


@pytest.mark.parametrize("target,expected", [("qwen3-32b", "qwen3-14b"), ("Qwen/Qwen3-30B-A3B", "qwen3-14b"),
                                             ("llama-3.1-8b", "qwen3-8b"), ("deepseek-v3", "deepseek-v4-flash")])
def test_unknown_target_resolves_to_nearest_with_warning(target, expected):
    with pytest.warns(UserWarning, match=expected):
        assert get_preset("dspark", target, "math").target == expected


def test_known_target_does_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert get_preset("eagle3", "Qwen/Qwen3-4B", "alpaca").dataset == "alpaca"


@pytest.mark.parametrize("call,key", [
    (lambda: get_preset("medusa", "qwen3-8b", "math"), "speculation.drafter"),
    (lambda: get_preset("dspark", "qwen3-8b", "poetry"), "speculation.drafter"),
    (lambda: AcceptanceConfig.from_dict({"drafter": "dspark", "temperature": 1}, file="s.yaml"),
     "speculation.acceptance.temperature"),
    (lambda: AcceptanceConfig.from_dict({"calibration": "platt"}, file="s.yaml"), "speculation.acceptance.calibration"),
    (lambda: AcceptanceConfig.from_dict({"auc": [0.4]}, file="s.yaml"), "speculation.acceptance.auc"),
    (lambda: AcceptanceConfig.from_dict({"auc": "high"}, file="s.yaml"), "speculation.acceptance.auc"),
    (lambda: AcceptanceConfig.from_dict({"fixed_accept_prob": 1.5}, file="s.yaml"),
     "speculation.acceptance.fixed_accept_prob"),
    (lambda: AcceptanceConfig.from_dict({"difficulty_sigma": True}, file="s.yaml"),
     "speculation.acceptance.difficulty_sigma"),
    (lambda: AcceptanceConfig.from_dict({"dataset": "mmlu"}, file="s.yaml"), "speculation.acceptance.dataset"),
    (lambda: AcceptanceConfig.from_dict({"preset_file": "nowhere.json"}, file="scenarios/s.yaml"),
     "speculation.acceptance.preset_file"),
    (lambda: AcceptanceConfig.from_dict(["dspark"], file="s.yaml"), "speculation.acceptance"),
])
def test_bad_config_is_one_line_input_error(call, key):
    with pytest.raises(InputError) as err:
        call()
    assert err.value.key == key and "\n" not in str(err.value)


def test_preset_file_resolves_relative_to_scenario(tmp_path):
    doc = {"header": {}, "presets": [get_preset("dspark", "qwen3-8b", d).to_json() for d in DOMAINS]}
    (tmp_path / "mine.json").write_text(json.dumps(doc))
    cfg = AcceptanceConfig.from_dict({"preset_file": "mine.json"}, file=tmp_path / "scenario.yaml")
    assert cfg.preset_file == str(tmp_path / "mine.json")
    model = AcceptanceModel(cfg, "qwen3-8b")
    assert [p.mu for p in model.presets] == [get_preset("dspark", "qwen3-8b", d).mu for d in DOMAINS]


def test_builtin_presets_header_says_how_they_were_made():
    from dspark_sim.acceptance.preset import BUILTIN_PATH

    header = json.loads(BUILTIN_PATH.read_text())["header"]
    assert header["generated_by"] == "benchmarks/fit_acceptance.py"
    assert {"seed", "num_samples", "date"} <= set(header)


@pytest.mark.parametrize("cfg", [AcceptanceConfig(), AcceptanceConfig(calibration="raw"),
                                 AcceptanceConfig(fixed_accept_prob=0.7)], ids=["sts", "raw", "fixed"])
@pytest.mark.parametrize("n,block_size,steps", [(1, 7, 5), (9, 7, 30), (256, 7, 3), (13, 3, 17), (4, 16, 6)])
def test_k_acceptance_steps_are_k_calls(cfg, n, block_size, steps):
    model = AcceptanceModel(cfg, "qwen3-8b")
    rng = np.random.default_rng(11)
    domain = rng.integers(0, 3, n).astype(np.int8)
    difficulty = model.new_requests(domain, rng)
    drafts = rng.integers(0, block_size + 1, (steps, n))
    one = np.random.default_rng(5)
    want = []
    for k in range(steps):
        p, c = model.step(difficulty, domain, block_size, one)
        want.append((p, c, model.accept(p, drafts[k], one)))
    many = np.random.default_rng(5)
    noise = model.step_words(n, block_size)
    words = many.bit_generator.random_raw(steps * (noise + n * block_size)).reshape(steps, -1)
    p, c = model.steps(difficulty, domain, block_size, words[:, :noise])
    accepted = model.accept_words(p, drafts, words[:, noise:])
    for k, (wp, wc, wa) in enumerate(want):
        assert np.array_equal(p[k], wp) and np.array_equal(c[k], wc) and np.array_equal(accepted[k], wa)
    assert many.bit_generator.state == one.bit_generator.state


@pytest.mark.parametrize("cfg", [AcceptanceConfig(), AcceptanceConfig(fixed_accept_prob=0.7)], ids=["sts", "fixed"])
@pytest.mark.parametrize("n,ghosts,block_size,steps", [(1, 1, 7, 4), (4, 2, 7, 9), (9, 1, 3, 1), (2, 3, 16, 5)])
def test_a_first_step_of_more_rows_then_k_steps_are_their_calls(cfg, n, ghosts, block_size, steps):
    # an overlapping engine's step after a finish draws for the ghost rows too, the steps after it not
    model = AcceptanceModel(cfg, "qwen3-8b")
    rng = np.random.default_rng(3)
    domain = rng.integers(0, 3, n + ghosts).astype(np.int8)
    difficulty = model.new_requests(domain, rng)
    one = np.random.default_rng(9)
    want = [model.step(difficulty, domain, block_size, one)]
    want += [model.step(difficulty[:n], domain[:n], block_size, one) for _ in range(steps - 1)]
    many = np.random.default_rng(9)
    first = many.bit_generator.random_raw(model.step_words(n + ghosts, block_size))
    noise = model.step_words(n, block_size)
    words = many.bit_generator.random_raw((steps - 1) * noise).reshape(steps - 1, noise)
    p, c = model.steps_after(difficulty, domain, block_size, first, words, n)
    assert p.shape == c.shape == (steps, n + ghosts, block_size)
    for k, (wp, wc) in enumerate(want):
        rows = slice(None) if k == 0 else slice(0, n)
        assert np.array_equal(p[k, rows], wp) and np.array_equal(c[k, rows], wc)
    assert many.bit_generator.state == one.bit_generator.state
