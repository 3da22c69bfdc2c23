"""The simulator's prefix cache by hand: block-aligned hits capped at the prompt less one token,
references along the chain, blocks joining as prefill computes them, LRU eviction from the
leaves, and the KV it counts (shared blocks once)."""
import numpy as np
import pytest

from dspark_sim.serving.prefix import PrefixCache


def _cache(block=16, hash_block=64):
    return PrefixCache(block, hash_block)


def _admit(cache, rid, ids, prompt, now=0.0, first=True):
    cache.register(rid, ids, prompt)
    hit = cache.lookup(rid, prompt)
    cache.acquire(rid, hit, now, first)
    return hit


def _compute(cache, rid, tokens, now=0.0):
    cache.advance(np.array([rid]), np.array([tokens]), now)


def test_blocks_hold_whole_engine_blocks_and_drop_ids_past_the_prompt():
    cache = _cache()
    cache.register(1, [10, 11, 12, 13], 150)  # 64 + 64 + 22 tokens: the last block holds one engine block
    chain = cache.chains[1]
    assert chain.ids == [10, 11, 12] and chain.sizes == [64, 64, 16]
    cache.register(2, [10, 11], 60)  # shorter than one hash block: 3 whole engine blocks
    assert cache.chains[2].sizes == [48]
    cache.register(3, [10], 12)  # no whole engine block: nothing to cache
    assert 3 not in cache.chains


def test_a_hit_is_whole_cached_blocks_capped_at_the_prompt_less_one_token():
    cache = _cache()
    hit = _admit(cache, 1, [1, 2, 3], 150)
    assert hit.tokens == 0 and hit.blocks == 0
    _compute(cache, 1, 150)
    assert cache.tree_tokens == 144 and cache.shared_tokens == 144
    cache.release(1, finished=True)
    assert cache.idle_tokens == 144 and cache.shared_tokens == 0
    # a longer prompt with the same first two blocks reads 128 tokens
    cache.register(2, [1, 2, 9], 200)
    hit = cache.lookup(2, 200)
    assert (hit.tokens, hit.blocks, hit.idle_tokens) == (128, 2, 128)
    # the same prompt again: all of it cached, the last token still computed: 144 - 0 < 149
    cache.register(3, [1, 2, 3], 150)
    assert cache.lookup(3, 150).tokens == 144
    # a prompt of exactly 128 tokens (two whole blocks cached): the cap keeps 112 of them
    cache.register(4, [1, 2], 128)
    hit = cache.lookup(4, 128)
    assert hit.tokens == 112 and hit.blocks == 2  # the second block is held whole, read in part
    cache.register(5, [1], 64)
    assert cache.lookup(5, 64).tokens == 48


def test_references_run_from_the_root_and_shared_blocks_count_once():
    cache = _cache()
    _admit(cache, 1, [1, 2], 128)
    _compute(cache, 1, 128)
    _admit(cache, 2, [1, 2, 7], 180)  # reads 128 tokens
    _admit(cache, 3, [1, 5], 128)     # reads 64
    assert [n.ref for n in cache.chains[2].nodes] == [3, 2]
    assert cache.shared_tokens == 128 + 128 + 64
    # KV held: requests' lengths (128 + 128 + 64 prefilled so far) + adjust = the 128 cached once
    assert 128 + 128 + 64 + cache.kv_adjust == 128
    _compute(cache, 2, 180)  # its third block (48 whole tokens) joins
    assert cache.tree_tokens == 128 + 48
    assert 128 + 180 + 64 + cache.kv_adjust == 128 + 48 + 4  # and 4 tokens past its last whole block
    for rid in (1, 2, 3):
        cache.release(rid, finished=True)
    assert cache.idle_tokens == cache.tree_tokens == 176 and cache.kv_adjust == 0


def test_eviction_is_least_recently_used_leaves_first_and_spares_referenced_blocks():
    cache = _cache()
    for rid, (ids, t) in enumerate([([1, 2], 0.0), ([1, 3], 1.0), ([4], 2.0)]):
        _admit(cache, rid, ids, 64 * len(ids) + 1, now=t)
        _compute(cache, rid, 64 * len(ids) + 1, now=t)
    cache.release(0, finished=True)
    cache.release(2, finished=True)
    # request 1 still runs: its blocks 1 and 3 are referenced
    assert cache.evict(1) == 4  # the oldest idle leaf, block 2 (64 tokens = 4 blocks of 16)
    assert cache.matched_tokens([1, 2]) == 64
    assert cache.evict(10_000) == 4  # then block 4; blocks 1 and 3 stay
    assert cache.tree_tokens == 128 and cache.idle_tokens == 0
    cache.release(1, finished=True)
    assert cache.evict(10_000) == 8  # the leaf 3 first, then its parent 1 once it is a leaf
    assert cache.tree_tokens == 0 and cache.counters.evicted_blocks == 16


def test_a_block_cached_while_a_request_computed_it_stays_private_and_references_run_on():
    cache = _cache()
    _admit(cache, 1, [1, 2], 129)
    _admit(cache, 2, [1, 2], 129)  # both miss: nothing cached yet
    _compute(cache, 1, 129)
    _compute(cache, 2, 129)  # request 2 computed its own copy; it references request 1's blocks
    assert cache.tree_tokens == 128 and cache.shared_tokens == 128
    assert [n.ref for n in cache.chains[2].nodes] == [2, 2]
    assert 129 + 129 + cache.kv_adjust == 128 + 1 + 129  # one cached copy, request 2's private one
    cache.release(1, finished=False)  # preempted: its blocks stay, referenced by request 2
    assert cache.evict(10_000) == 0
    cache.release(2, finished=True)
    hit = cache.lookup(1, 129)  # re-admitted after the preemption, it finds its own blocks
    assert hit.tokens == 128


def test_a_cached_block_of_another_length_is_not_matched():
    cache = _cache()
    _admit(cache, 1, [1, 2], 100)  # block 2 holds 32 whole tokens here
    _compute(cache, 1, 100)
    cache.register(2, [1, 2], 200)  # ... and 64 here: other content under the same id
    assert cache.lookup(2, 200).tokens == 64


@pytest.mark.parametrize("block, hash_block", [(0, 64), (16, 40)])
def test_block_sizes_must_nest(block, hash_block):
    with pytest.raises(ValueError):
        PrefixCache(block, hash_block)


def test_repeat_tokens_count_each_shared_block_past_its_first_reader():
    cache = _cache()
    _admit(cache, 1, [1, 2], 128)
    assert cache.repeat_tokens == 0  # nothing cached yet, nothing read twice
    _compute(cache, 1, 128)
    assert cache.repeat_tokens == 0  # one reader of its own blocks
    _admit(cache, 2, [1, 2, 7], 180)  # reads both blocks again
    _admit(cache, 3, [1, 5], 128)     # reads the first again
    assert cache.repeat_tokens == 128 + 64
    cache.release(1, finished=True)   # request 2 is now the first reader of both blocks
    assert cache.repeat_tokens == 64
    cache.release(3, finished=True)
    assert cache.repeat_tokens == 0
