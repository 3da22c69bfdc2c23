"""SGLang SPS cost tables: the JSON SGLang reads, its checks, its lookups, tables from cost models."""
from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dspark_sim.catalog import get_gpu, get_model
from dspark_sim.cost.base import StepWork
from dspark_sim.cost.roofline import RooflineCost
from dspark_sim.cost.sps import (SpsAdditiveCostTable, SpsCostTable, default_probes, load_sps_table,
                                 sps_from_cost_model)
from dspark_sim.errors import InputError

FLOOR = {"sample_batch_tokens": [1, 8, 64, 256], "sample_steps_per_sec": [200.0, 190.0, 150.0, 60.0],
         "max_batch_tokens": 512}
ADDITIVE = {"bias_seconds": 0.001, "bs_probes": [1, 8, 64], "alpha_seconds": [0.0, 0.0002, 0.001],
            "m_probes": [1, 64, 512], "theta_seconds": [0.004, 0.0045, 0.02]}


def sglang_accepts(d: dict) -> bool:
    """SGLang's own acceptance rule, transcribed: msgspec's strict types plus ``__post_init__``.

    From ``dspark_sps_table.py``: list[int] probes (no bools, no floats), list[float]
    values (ints allowed), non-empty, ``probes == sorted(set(probes))``, equal
    lengths, ``max_batch_tokens >= probes[-1]``, ``bias_seconds > 0``.
    """
    def ints(v):
        return isinstance(v, list) and all(type(x) is int for x in v)

    def floats(v):
        return isinstance(v, list) and all(type(x) in (int, float) for x in v)

    if "bias_seconds" in d:
        axes = (("bs_probes", "alpha_seconds"), ("m_probes", "theta_seconds"))
        if type(d["bias_seconds"]) not in (int, float) or not d["bias_seconds"] > 0:
            return False
    else:
        axes = (("sample_batch_tokens", "sample_steps_per_sec"),)
        if type(d.get("max_batch_tokens")) is not int:
            return False
    for probes, values in axes:
        p, v = d.get(probes), d.get(values)
        if not (ints(p) and floats(v) and p and p == sorted(set(p)) and len(p) == len(v)):
            return False
    return "bias_seconds" in d or d["max_batch_tokens"] >= d["sample_batch_tokens"][-1]


def test_default_probes_are_sglangs_sweep():
    probes = default_probes(8192)
    assert probes[:6] == [1, 2, 4, 8, 12, 16]
    assert probes[4:33] == list(range(12, 128, 4))
    assert probes[33:41] == list(range(128, 256, 16))
    assert [p for p in probes if 256 <= p < 1024] == list(range(256, 1024, 32))
    assert [p for p in probes if 1024 <= p < 2048] == list(range(1024, 2048, 128))
    assert [p for p in probes if p >= 2048] == list(range(2048, 8193, 256))
    assert default_probes(1) == [1]
    assert default_probes(100)[-2:] == [96, 100]  # the maximum is appended when the sweep misses it
    with pytest.raises(InputError, match="max_batch_tokens"):
        default_probes(0)


def test_floor_lookup_matches_sglang_semantics():
    table = SpsCostTable.from_json_dict(FLOOR)
    assert table.steps_per_sec(1) == 200.0
    assert table.steps_per_sec(7) == 200.0          # floor probe, not interpolation
    assert table.steps_per_sec(8) == 190.0
    assert table.steps_per_sec(255) == 150.0
    assert table.steps_per_sec(0) == 200.0          # below the first probe: the first rate
    assert table.steps_per_sec(10_000) == 60.0      # past max_batch_tokens: the last rate
    assert table.step_s(3, 64) == pytest.approx(1 / 150.0)


def test_additive_lookup_interpolates_and_clamps():
    table = SpsAdditiveCostTable.from_json_dict(ADDITIVE)
    assert table.step_s(1, 1) == pytest.approx(0.001 + 0.0 + 0.004)
    # R = 36 halfway between 8 and 64; B = 288 halfway between 64 and 512
    assert table.step_s(36, 288) == pytest.approx(0.001 + 0.0006 + 0.01225)
    assert table.step_s(1000, 5000) == pytest.approx(0.001 + 0.001 + 0.02)  # clamped at both ends
    assert table.steps_per_sec(288, 36) == pytest.approx(1 / table.step_s(36, 288))
    with pytest.raises(ValueError):
        table.steps_per_sec(288)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 20_000), min_size=1, max_size=50), st.integers(0, 400))
def test_array_lookup_equals_scalar(batch_tokens, num_reqs):
    b = np.array(batch_tokens)
    for table in (SpsCostTable.from_json_dict(FLOOR), SpsAdditiveCostTable.from_json_dict(ADDITIVE)):
        expect = [table.steps_per_sec(int(x), num_reqs) for x in b]
        np.testing.assert_allclose(table.steps_per_sec_array(b, num_reqs), expect, rtol=1e-12)


@pytest.mark.parametrize("data", [FLOOR, ADDITIVE], ids=["floor", "additive"])
def test_json_round_trip_and_sglang_accepts(tmp_path, data):
    path = tmp_path / "table.json"
    table = (SpsAdditiveCostTable if "bias_seconds" in data else SpsCostTable).from_json_dict(data)
    table.save(path)
    written = json.loads(path.read_text())
    assert written == data and list(written) == list(data)  # SGLang's keys, in its field order
    assert sglang_accepts(written)
    loaded = load_sps_table(path)
    assert type(loaded) is type(table) and loaded == table


BAD = [
    ("sample_batch_tokens", {**FLOOR, "sample_batch_tokens": [1, 8, 8, 256]}, "strictly increasing"),
    ("sample_batch_tokens", {**FLOOR, "sample_batch_tokens": [1, 64, 8, 256]}, "strictly increasing"),
    ("sample_batch_tokens", {**FLOOR, "sample_batch_tokens": []}, "at least one"),
    ("sample_steps_per_sec", {**FLOOR, "sample_steps_per_sec": [1.0, 2.0]}, "length"),
    ("max_batch_tokens", {**FLOOR, "max_batch_tokens": 100}, ">= the largest probe"),
    ("sample_batch_tokens", {**FLOOR, "sample_batch_tokens": [1.0, 8, 64, 256]}, "integers"),
    ("sample_batch_tokens", {**FLOOR, "sample_batch_tokens": [True, 8, 64, 256]}, "integers"),
    ("max_batch_tokens", {k: v for k, v in FLOOR.items() if k != "max_batch_tokens"}, "integer"),
    ("bias_seconds", {**ADDITIVE, "bias_seconds": 0.0}, "> 0"),
    ("bias_seconds", {**ADDITIVE, "bias_seconds": -1e-3}, "> 0"),
    ("m_probes", {**ADDITIVE, "m_probes": [1, 512, 64]}, "strictly increasing"),
    ("alpha_seconds", {**ADDITIVE, "alpha_seconds": [0.0]}, "length"),
    ("bs_probes", {**ADDITIVE, "bs_probes": "1,8,64"}, "list"),
]


@pytest.mark.parametrize("key,data,why", BAD, ids=[f"{k}-{i}" for i, (k, _, _) in enumerate(BAD)])
def test_loader_rejects_what_sglang_rejects(tmp_path, key, data, why):
    assert not sglang_accepts(data)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(InputError, match=why) as err:
        load_sps_table(path)
    assert err.value.file == str(path) and err.value.key.startswith(key)
    assert str(path) in str(err.value) and key in str(err.value)


@pytest.mark.parametrize("text,why", [("{", "not valid JSON"), ("[1, 2]", "JSON object"),
                                      ('{"sample_batch_tokens": [1], "sample_steps_per_sec": [NaN],'
                                       ' "max_batch_tokens": 1}', "finite"),
                                      ('{"sample_batch_tokens": [1], "sample_steps_per_sec": [0],'
                                       ' "max_batch_tokens": 1}', "> 0")])
def test_loader_rejects_broken_files(tmp_path, text, why):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(InputError, match=why):
        load_sps_table(path)


class _Additive:
    """A cost that is exactly bias + a(R) + t(B): the additive table must reproduce it."""

    name, source = "additive", "test"

    def step_s(self, work: StepWork) -> float:
        r, b = work.decode_reqs, work.verify_tokens
        return 1e-3 + 2e-6 * r + 5e-3 * max(1.0, b / 300) + 1e-9 * work.decode_context_tokens

    def breakdown(self, work):
        return {"total_s": self.step_s(work)}


def test_additive_table_from_cost_model_is_exact_on_an_additive_cost():
    cost = _Additive()
    table = sps_from_cost_model(cost, additive=True, max_batch_tokens=4096)
    assert table.m_probes == tuple(default_probes(4096))
    assert table.bs_probes == tuple(default_probes(256))
    for r in table.bs_probes:
        for b in (r, 3 * r, 8 * r):
            if b in table.m_probes:
                work = StepWork(decode_reqs=r, verify_tokens=b, decode_context_tokens=r * 2048)
                assert table.step_s(r, b) == pytest.approx(cost.step_s(work), rel=1e-9)


def test_tables_from_the_roofline_are_valid_and_monotone(tmp_path):
    cost = RooflineCost(get_model("qwen3-8b"), get_gpu("h200"))
    floor = sps_from_cost_model(cost, draft_kind="block", block_size=7)
    assert floor.max_batch_tokens == 8192 and floor.sample_batch_tokens[-1] == 8192
    assert all(np.diff(floor.sample_steps_per_sec) <= 1e-12)  # more tokens never run faster
    additive = sps_from_cost_model(cost, additive=True, draft_kind="block")
    assert additive.bias_seconds > 0 and additive.alpha_seconds[0] == 0.0
    for table in (floor, additive):
        table.save(tmp_path / "t.json")
        assert sglang_accepts(json.loads((tmp_path / "t.json").read_text()))
        assert load_sps_table(tmp_path / "t.json") == table
    # the step a DSpark budget decision sees: 64 requests, 64..512 verify tokens
    b = np.arange(64, 513)
    assert np.all(np.diff(additive.steps_per_sec_array(b, 64)) <= 1e-12)


def test_array_lookup_equals_the_scalar_lookup():
    """The vectorised lookup the scheduler calls per step gives each probe's scalar answer."""
    cost = RooflineCost(get_model("qwen3-8b"), get_gpu("h200"))
    tables = [sps_from_cost_model(cost, additive=a) for a in (False, True)]
    b = np.arange(1, 4097)
    for table in tables:
        for r in (1, 7, 64, 256):
            got = table.steps_per_sec_array(b, r)
            want = [table.steps_per_sec(int(x), r) for x in b[::97]]
            assert got.shape == b.shape and got[::97].tolist() == pytest.approx(want, rel=1e-12)
