"""The run summary as a type: summary.json's keys in and out unchanged, records read by attribute."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from dspark_sim.metrics.run_summary import ABSENT_WHEN_NONE, BudgetStats, DomainStats, PrefixStats, RunSummary

GOLDEN = Path(__file__).parent / "golden" / "summary.json"
PREFIX = {"enabled": True, "block_tokens": 16, "hash_block_tokens": 512, "hit_rate": 0.25, "block_hit_rate": 0.5,
          "mean_cached_tokens_per_request": 128.0, "prefill_tokens_saved": 1024, "prefill_tokens_computed": 3072,
          "evicted_blocks": 3, "evicted_tokens": 48, "peak_cached_tokens": 4096}


def test_the_committed_summary_reads_back_to_the_same_file():
    text = GOLDEN.read_text()
    raw = json.loads(text)
    summary = RunSummary.from_json(raw)
    assert json.dumps(summary.to_json(), indent=2, sort_keys=True) == json.dumps(raw, indent=2, sort_keys=True)
    assert isinstance(summary.budget_k, BudgetStats) and summary.budget_k.max == raw["budget_k"]["max"]
    assert all(isinstance(d, DomainStats) for d in summary.per_domain.values())
    assert summary.per_domain["code"].completed == raw["per_domain"]["code"]["completed"]
    assert summary.completed == raw["completed"] and summary.provenance == raw["provenance"]


def test_keys_that_do_not_apply_are_left_out_and_the_others_kept():
    raw = {**json.loads(GOLDEN.read_text()), "engine": "sglang 0.5.23", "prefix_cache": PREFIX}
    summary = RunSummary.from_json(raw)
    assert summary.engine == "sglang 0.5.23" and summary.prefix_cache == PrefixStats(**PREFIX)
    assert summary.to_json() == raw
    bare = dataclasses.replace(summary, **{name: None for name in ABSENT_WHEN_NONE})
    assert not set(ABSENT_WHEN_NONE) & set(bare.to_json())
    assert bare.to_json()["sim_wall_s"] is None  # the wall time is a key even when unset


def test_a_summary_is_frozen_and_slotted():
    summary = RunSummary.from_json(json.loads(GOLDEN.read_text()))
    with pytest.raises(dataclasses.FrozenInstanceError):
        summary.completed = 0
    assert not hasattr(summary, "__dict__")
    assert dataclasses.replace(summary, sim_wall_s=1.5).sim_wall_s == 1.5
