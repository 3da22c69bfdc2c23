"""The search space: every sampled configuration is a valid scenario; conditionals hold; overrides parse."""
from __future__ import annotations

import optuna
import pytest
import yaml
from test_tuner_fixtures import tiny_scenario

from dspark_sim.errors import InputError
from dspark_sim.tuner.scenarios import configure, load_base, to_scenario
from dspark_sim.engines import knobs
from dspark_sim.tuner.space import METHODS, Choice, Range, load_space, suggest, tier_ladder


def _sample(method: str, n: int, space=None, seed: int = 0) -> list[tuple[dict, dict]]:
    """(params, config) of ``n`` random define-by-run draws."""
    space = space or load_space(None)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    out = []
    for _ in range(n):
        trial = study.ask()
        config = suggest(trial, method, space)
        study.tell(trial, 0.0)
        out.append((trial.params, config))
    return out


@pytest.mark.parametrize("method", METHODS)
def test_every_draw_is_a_valid_scenario(tmp_path, method):
    base = load_base(tiny_scenario(tmp_path))
    for _, config in _sample(method, 12):
        scenario = to_scenario(configure(base, config))
        assert scenario.speculation.method == ("static" if method == "dflash" else method)
        dep = scenario.deployment
        assert 1 <= dep.max_running_requests <= 512
        assert dep.chunked_prefill_tokens <= dep.max_batched_tokens


def test_dspark_conditionals():
    for params, config in _sample("dspark", 60):
        spec = config["speculation"]
        assert 1 <= spec["min_verify_len"] <= spec["max_verify_len"] <= spec["block_size"] + 1
        # lag and graph tiers exist only for the production scheduler
        assert ("lag_steps" in params) == (spec["scheduler"] == "production")
        assert ("graph_tiers" in params) == (spec["scheduler"] == "production")
        assert spec.get("pad_to_graph_tier", False) == (spec.get("graph_tiers", "none") != "none")


def test_schedule_drafts_never_grow_with_batch():
    for _, config in _sample("schedule", 40):
        rules = config["speculation"]["schedule"]
        sizes = [r["block_size"] for r in rules]
        assert sizes == sorted(sizes, reverse=True) and sizes[0] >= 1
        assert rules[-1]["max_batch_size"] is None
        assert config["speculation"]["block_size"] == sizes[0]


def test_space_file_overrides(tmp_path):
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump({
        "deployment": {"max_running_requests": {"low": 16, "high": 64}, "chunked_prefill_tokens": 1024},
        "dspark": {"scheduler": ["algorithm1"], "block_size": [5, 7]}}))
    space = load_space(path)
    assert space.knob("deployment", "max_running_requests") == Range(16, 64, False)
    assert space.knob("dspark", "scheduler") == Choice(("algorithm1",))
    for params, config in _sample("dspark", 20, space):
        assert config["deployment"]["chunked_prefill_tokens"] == 1024
        assert 16 <= config["deployment"]["max_running_requests"] <= 64
        assert config["speculation"]["scheduler"] == "algorithm1" and "lag_steps" not in params
        assert config["speculation"]["block_size"] in (5, 7)


@pytest.mark.parametrize("text,key", [
    ("dspark: {k: 3}", "dspark.k"),
    ("static: {num_draft_tokens: 3}", "static.num_draft_tokens"),  # the scenario's older name
    ("deployment: {max_running_requests: {low: 8.5, high: 9}}", "deployment.max_running_requests"),
    ("dspark: {survival_eps: {low: 0, high: 1, log: true}}", "dspark.survival_eps"),
    ("speculation: {}", "speculation"),
])
def test_bad_space_names_the_key(tmp_path, text, key):
    path = tmp_path / "space.yaml"
    path.write_text(text)
    with pytest.raises(InputError) as err:
        load_space(path)
    assert err.value.key == key and str(path) in str(err.value)
    if "num_draft_tokens" in key:  # the older name of a knob: the line names today's
        assert "block_size" in str(err.value)


def test_tier_ladders():
    assert tier_ladder("pow2", 100) == [1, 2, 4, 8, 16, 32, 64]
    assert tier_ladder("step64", 200) == [1, 2, 4, 8, 64, 128, 192]


@pytest.mark.parametrize("engine", knobs.ENGINES)
def test_engine_holds_what_it_has_no_field_for(engine):
    """Tuning for an engine samples only knobs it honours; the rest sit at its behaviour."""
    space = load_space(None).restricted(knobs.held(engine, "eagle3"), max_block=5)
    tuned = {knob for (section, knob), fields in knobs.FIELDS.items() if fields[engine]}
    for params, config in _sample("dspark", 30, space):
        assert set(params) <= tuned
        spec, dep = config["speculation"], config["deployment"]
        assert 3 <= spec["block_size"] <= 5  # never above the trained block
        assert spec["scheduler"] == "production" and spec["survival_eps"] == 1e-6
        assert "graph_tiers" not in spec and "max_verify_len" not in spec
        if engine == "trtllm":  # its DSpark config verifies the whole block
            assert spec["min_verify_len"] == spec["block_size"] + 1
        if engine != "sglang":  # one step budget shared by prefill and decode, always mixed
            assert dep["chunked_prefill_tokens"] is None and dep["batching"] == "mixed"
    for _, config in _sample("static", 10, space):
        assert config["speculation"]["drafter"] == "eagle3" and config["speculation"]["block_size"] <= 4


def test_honour_table_has_a_row_per_knob_and_a_column_per_engine():
    rows = knobs.table()
    assert len(rows) == 2 + len(knobs.FIELDS)
    assert all(row.count("|") == 2 + len(knobs.ENGINES) for row in rows)
