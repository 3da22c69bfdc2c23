"""Synthetic sessions: prompts that grow turn by turn and share prefixes, with Mooncake hash ids
that agree exactly where the content does; the Mooncake writer and `dspark-sim trace`."""
import json
from collections import defaultdict

import numpy as np
import pytest

from dspark_sim.cli import main
from dspark_sim.errors import InputError
from dspark_sim.workload import RequestChunk, SyntheticConfig, read_trace, synthetic_requests, write_mooncake


def _config(n=400, rate=0.5, **sessions):
    return SyntheticConfig.from_dict({
        "num_requests": n, "rate_per_s": rate,
        "prompt_tokens": {"dist": "lognormal", "mean": 300, "sigma": 0.8},
        "output_tokens": {"dist": "lognormal", "mean": 200, "sigma": 0.5},
        "sessions": {"kind": "chat", **sessions}}, file=None)


def _all(cfg, seed=0, block=512, chunk_rows=65536):
    return RequestChunk.concat(synthetic_requests(cfg, seed, hash_block_tokens=block, chunk_rows=chunk_rows))


@pytest.mark.parametrize("kind", ["chat", "agent"])
def test_ids_follow_the_mooncake_rules(kind):
    """One id a block, ceil(prompt / block) of them; an id always sits at the same position
    behind the same id (a prefix hash chain); partial last blocks are never repeated."""
    block = 512
    c = _all(_config(kind=kind, max_prompt_tokens=30_000), block=block)
    assert len(c) == 400 and (np.diff(c.arrival_s) >= 0).all() and c.arrival_s[0] == 0.0
    where, partial = {}, defaultdict(int)
    for prompt, ids in zip(c.prompt_tokens.tolist(), c.hash_ids):
        assert len(ids) == -(-prompt // block)
        for i, h in enumerate(ids):
            key = (i, ids[i - 1] if i else None)
            assert where.setdefault(h, key) == key
        if prompt % block:
            partial[ids[-1]] += 1
    assert max(partial.values()) == 1


def test_a_session_resends_its_history_and_sessions_share_their_prefix():
    """One long session: each turn's prompt is the last prompt, its output and a new message, and
    starts with the last prompt's whole blocks. Sessions drawing the same shared prefix share its
    whole blocks and nothing after."""
    cfg = _config(n=6, rate=1e-6, shared_prefix_tokens=1500, shared_prefixes=1,
                  turns={"dist": "constant", "mean": 6})
    c = _all(cfg)
    p, o, ids = c.prompt_tokens.tolist(), c.output_tokens.tolist(), c.hash_ids
    for k in range(5):
        assert p[k + 1] > p[k] + o[k]
        whole = p[k] // 512
        assert ids[k + 1][:whole] == ids[k][:whole]
        assert ids[k + 1][whole] != ids[k][whole] if p[k] % 512 else True
    assert np.all(np.diff(c.arrival_s) > 0)
    two = _all(_config(n=2, rate=1e6, shared_prefix_tokens=1500, shared_prefixes=1,
                       turns={"dist": "constant", "mean": 1}))
    a, b = two.hash_ids
    assert a[:2] == b[:2] and a[2] != b[2]  # 1500 tokens: two whole 512-token blocks shared


def test_same_seed_same_stream_however_chunked():
    cfg = _config(kind="agent")
    a, b = _all(cfg, chunk_rows=7), _all(cfg)
    assert np.array_equal(a.arrival_s, b.arrival_s) and np.array_equal(a.prompt_tokens, b.prompt_tokens)
    assert a.hash_ids == b.hash_ids
    assert not np.array_equal(_all(cfg, seed=1).prompt_tokens, a.prompt_tokens)


def test_max_prompt_tokens_ends_sessions_and_smaller_blocks_give_more_ids():
    c = _all(_config(kind="agent", max_prompt_tokens=12_000))
    assert c.prompt_tokens.max() <= 12_000
    fine = _all(_config(kind="agent", max_prompt_tokens=12_000), block=64)
    assert np.array_equal(fine.prompt_tokens, c.prompt_tokens)
    assert all(len(h) == -(-p // 64) for p, h in zip(fine.prompt_tokens.tolist(), fine.hash_ids))


@pytest.mark.parametrize("key, value, why", [
    ("kind", "forum", "chat, agent"),
    ("shared_prefixes", 0, ">= 1"),
    ("turn_gap_s", 0, "> 0"),
    ("turns", 3, "mapping"),
    ("max_prompt_tokens", 100, "> shared_prefix_tokens"),
    ("think", 3, "unknown key"),
])
def test_bad_sessions_name_the_key(key, value, why):
    with pytest.raises(InputError) as err:
        _config(**{key: value})
    assert f"workload.synthetic.sessions.{key}" in str(err.value) and why in str(err.value)


def test_no_first_prompt_fitting_is_an_error():
    cfg = _config(shared_prefix_tokens=1000, max_prompt_tokens=1001,
                  **{"turns": {"dist": "constant", "mean": 2}})
    with pytest.raises(InputError, match="max_prompt_tokens"):
        _all(cfg)


def test_mooncake_round_trip_and_the_trace_command(tmp_path, write_scenario):
    cfg = _config(n=50)
    want = _all(cfg)
    assert write_mooncake(tmp_path / "t.jsonl", synthetic_requests(cfg, 0, chunk_rows=16)) == 50
    [got] = list(read_trace(tmp_path / "t.jsonl"))
    assert got.hash_ids == want.hash_ids and np.array_equal(got.prompt_tokens, want.prompt_tokens)
    np.testing.assert_allclose(got.arrival_s, want.arrival_s, atol=1e-3)  # whole milliseconds
    first = json.loads((tmp_path / "t.jsonl").read_text().splitlines()[0])
    assert set(first) == {"timestamp", "input_length", "output_length", "hash_ids"}
    scenario = write_scenario({"name": "s", "model": "qwen3-8b", "gpu": "h200", "workload": {"synthetic": {
        "num_requests": 50, "rate_per_s": 0.5, "prompt_tokens": {"dist": "lognormal", "mean": 300, "sigma": 0.8},
        "output_tokens": {"dist": "lognormal", "mean": 200, "sigma": 0.5}, "sessions": {"kind": "chat"}}}})
    assert main(["trace", str(scenario), "--out", str(tmp_path / "c.jsonl")]) == 0
    assert (tmp_path / "c.jsonl").read_text() == (tmp_path / "t.jsonl").read_text()
