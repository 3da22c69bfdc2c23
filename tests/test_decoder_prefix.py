"""Prefix sharing in the decoder's paged KV cache: greedy outputs equal to serving without it,
hits of whole pages that stop short of the last prompt token, the target's keys and the DSpark
drafter's context keys read in place, every page back after serving, eviction under pressure."""
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from dspark_sim.kernels.decoder.engine import serve  # noqa: E402
from dspark_sim.kernels.decoder.launch import load_launch, trace_sequences  # noqa: E402
from dspark_sim.kernels.decoder.prefix import PrefixPages  # noqa: E402
from dspark_sim.kernels.decoder.sequence import Sequence  # noqa: E402
from dspark_sim.kernels.decoder.tiny import tiny_decoder  # noqa: E402

SYSTEM = [(5 * j + 3) % 31 for j in range(22)]  # 5.5 pages of 4 tokens


def _sessions(turns=3, users=3, gap_s=0.0, outputs=5):
    """``users`` conversations over one system prompt, each turn resending the last prompt."""
    seqs, t = [], 0.0
    for turn in range(turns):
        for u in range(users):
            history = SYSTEM + [(u * 11 + k) % 29 + 1 for k in range(6 * (turn + 1))]
            seqs.append(Sequence(len(seqs), history, outputs, arrival_s=t))
            t += gap_s
    return seqs


def _serve(method, seqs, **over):
    dec = tiny_decoder(method, **over)
    run = serve(dec, seqs)
    return dec, run


@pytest.mark.parametrize("method, over", [("none", {}), ("static", {}), ("dspark", {"scheduler": "full"}),
                                          ("dspark", {"max_batched_tokens": 9})])
@pytest.mark.parametrize("gap_s", [0.0, 0.05])
def test_greedy_outputs_and_drafts_equal_serving_without_the_cache(method, over, gap_s):
    on, off = _sessions(gap_s=gap_s), _sessions(gap_s=gap_s)
    on_dec, _ = _serve(method, on, prefix_cache=True, **over)
    serve(tiny_decoder(method, **over), off)
    assert [s.outputs for s in on] == [s.outputs for s in off]
    if gap_s == 0 or "max_batched_tokens" not in over:
        # the drafter read the same context. Not compared with a token budget and arrivals spread in
        # time: which requests share a step then follows the wall clock (a cached turn prefills
        # sooner), and the budget splits verify tokens among them, so accepted drafts differ.
        assert [s.accepted for s in on] == [s.accepted for s in off]
    assert isinstance(on_dec.pages, PrefixPages) and on_dec.pages.hit_tokens > 0
    assert sum(s.cached_tokens for s in on) == on_dec.pages.hit_tokens
    assert all(s.cached_tokens % 4 == 0 and s.cached_tokens < s.prompt_len for s in on)


@pytest.mark.parametrize("method, batching", [("none", "mixed"), ("static", "prefill_first")])
def test_the_triton_attention_reads_shared_pages_as_its_own(method, batching):
    """The Triton attention (interpreted on the CPU) over shared pages: a second turn reads the
    first turn's pages and gives the same greedy outputs as computing them itself."""
    over = dict(attention="triton", batching=batching, max_running_requests=2)
    on, off = (_sessions(turns=2, users=1, gap_s=1e3, outputs=2) for _ in range(2))  # turn 1 done first
    dec, _ = _serve(method, on, prefix_cache=True, **over)
    serve(tiny_decoder(method, **over), off)
    assert [s.outputs for s in on] == [s.outputs for s in off]
    assert on[1].cached_tokens == 28 and dec.pages.hit_tokens == 28


def test_pages_all_come_back_and_a_cold_cache_frees_them():
    dec, _ = _serve("dspark", _sessions(gap_s=0.02), prefix_cache=True)
    pages = dec.pages
    total = dec.cache.k.shape[1] // pages.page_size - 1  # page 0 is never handed out
    assert pages.cached_pages > 0 and len(pages.free) + pages.cached_pages == total
    assert all(n.ref == 0 for n in pages.owner.values())
    assert len(pages.free_rows) == dec.conf.max_running_requests
    pages.drop_cached()
    assert pages.cached_pages == 0 and len(pages.free) == total


def test_a_hit_is_whole_pages_short_of_the_last_prompt_token():
    dec = tiny_decoder("none", prefix_cache=True)
    serve(dec, [Sequence(0, SYSTEM[:20], 2)])  # 5 whole pages cached (the outputs' page too)
    same, longer, other = Sequence(1, SYSTEM[:20], 2), Sequence(2, SYSTEM[:22] + [1, 2], 2), \
        Sequence(3, SYSTEM[:9] + [30] * 11, 2)
    serve(dec, [same, longer, other])
    assert same.cached_tokens == 16  # all 20 cached, the last page recomputed for the logits
    assert longer.cached_tokens == 20
    assert other.cached_tokens == 8  # the third page differs from its second token on


def test_cached_pages_hold_the_targets_and_the_drafters_keys():
    """The pages a request reads from the cache hold what it would have computed itself: the
    target's keys and values and the DSpark drafter's context keys."""
    prompt = SYSTEM + [7, 7, 1, 2, 3]
    dec = tiny_decoder("dspark", prefix_cache=True, scheduler="full")
    serve(dec, [Sequence(0, SYSTEM + [9, 9], 3)])
    seq = Sequence(1, prompt, 8)
    dec.admit(seq)
    assert seq.num_cached == 20
    fresh = tiny_decoder("dspark", scheduler="full")
    ref = Sequence(1, prompt, 8)
    fresh.admit(ref)
    assert fresh.pages.reserve(ref, len(prompt))
    fresh.prefill([(ref, len(prompt))])
    dec.pages.flush()
    fresh.pages.flush()
    p = dec.pages.page_size
    pos = np.arange(20)
    for cache_of in (lambda d: d.cache, lambda d: d.draft_cache):
        got = [cache_of(d).k[:, np.array(s.pages)[pos // p] * p + pos % p] for d, s in ((dec, seq), (fresh, ref))]
        torch.testing.assert_close(got[0], got[1], rtol=1e-5, atol=1e-6)


def test_eviction_under_pressure_keeps_outputs_and_pages():
    prompts = [[(i * 7 + j) % 30 + 1 for j in range(10 + i % 5)] for i in range(24)]
    seqs = [Sequence(i, p + p[:6], 6, arrival_s=0.01 * i) for i, p in enumerate(prompts)]
    over = dict(kv_tokens=96, max_running_requests=4)  # 24 pages of 4 tokens
    dec, _ = _serve("dspark", seqs, prefix_cache=True, **over)
    ref = [Sequence(i, p + p[:6], 6, arrival_s=0.01 * i) for i, p in enumerate(prompts)]
    serve(tiny_decoder("dspark", **over), ref)
    assert [s.outputs for s in seqs] == [s.outputs for s in ref]
    assert dec.pages.evicted_pages > 0
    assert len(dec.pages.free) + dec.pages.cached_pages == 24 - 1


def test_a_scenario_turns_it_on_and_a_mooncake_trace_shares_tokens(tmp_path, write_scenario):
    rows = [{"timestamp": 0, "input_length": 700, "output_length": 4, "hash_ids": [1, 2]},
            {"timestamp": 5, "input_length": 900, "output_length": 4, "hash_ids": [1, 3]},
            {"timestamp": 9, "input_length": 100, "output_length": 4, "hash_ids": [4]}]
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    scenario = write_scenario({"name": "s", "model": "qwen3-8b", "gpu": "h200",
                               "workload": {"trace": "t.jsonl", "hash_block_tokens": 256},
                               "deployment": {"batching": "prefill_first"}, "speculation": {"method": "none"}})
    launch = load_launch(scenario, device="cpu")
    assert launch.conf.prefix_cache
    a, b, c = trace_sequences(launch, 1000)
    assert a.tokens[:256] == b.tokens[:256] and a.tokens[256:512] != b.tokens[256:512]
    assert len(a.tokens) == 700 and len(c.tokens) == 100 and c.tokens[:100] != a.tokens[:100]
    off = write_scenario({"name": "s", "model": "qwen3-8b", "gpu": "h200", "workload": {"trace": "t.jsonl"},
                          "deployment": {"batching": "prefill_first", "prefix_cache": False},
                          "speculation": {"method": "none"}}, "off.yaml")
    assert not load_launch(off, device="cpu").conf.prefix_cache
