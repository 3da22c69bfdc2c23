"""Build the target, the drafter and their caches for one model and config."""
from __future__ import annotations

import torch

from dspark_sim.kernels.decoder.cache import KVCache, Pages
from dspark_sim.kernels.decoder.drafter import Block, Chain
from dspark_sim.kernels.decoder.layers import Rope
from dspark_sim.kernels.decoder.target import Target, feature_layers
from dspark_sim.kernels.decoder.weights import init_random

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
HEADROOM_BYTES = 8 << 30  # activations, graph pools and the drafts of every request tier


def drafter_features(method: str, spec) -> tuple[int, ...]:
    """Target layers whose outputs the method's drafter reads: the last (MTP chain) or
    DSpark's spread of layers."""
    return {"none": (), "static": (spec.num_layers - 1,),
            "dspark": feature_layers(spec.num_layers)}[method]


def build_models(spec, conf, checkpoint=None, draft_checkpoint=None, init_std: float = 0.02):
    """``(target, drafter or None)`` on ``conf.device``, random unless checkpoints are given."""
    dtype = DTYPES[conf.dtype]
    feats = drafter_features(conf.method, spec)
    with torch.device(conf.device):
        target = _target(spec, conf, dtype)
        drafter = None
        if conf.method == "dspark":
            drafter = Block(spec, target, conf.block_size, conf.draft_layers, conf.markov_rank,
                            feats, dtype)
        elif conf.method == "static":
            drafter = Chain(spec, target, conf.block_size, feats, dtype)
    target.requires_grad_(False)
    if checkpoint:
        target.load(checkpoint)
    else:
        init_random(target, init_std, conf.seed)
    if drafter is not None:
        drafter.requires_grad_(False)
        if draft_checkpoint:
            drafter.load(draft_checkpoint)
        else:
            init_random(drafter, init_std, conf.seed + 1)
    return target, drafter


def _target(spec, conf, dtype):
    """The target for ``spec``: Qwen3-style layers, or DeepSeek-V4's (random weights, no drafter)."""
    if spec.v4 is None:
        return Target(spec, dtype)
    from dspark_sim.errors import InputError
    from dspark_sim.kernels.decoder.v4 import V4Target

    if conf.method != "none":
        raise InputError(conf.source, "method", conf.method,
                         f"{spec.name} runs without a drafter in the decoder (a cost slice): use method none")
    return V4Target(spec, dtype, conf.max_running_requests + 1, conf.max_positions)


def kv_capacity_tokens(spec, conf, draft_layers: int) -> int:
    """KV tokens to allocate: ``conf.kv_tokens``, else what free memory holds."""
    if conf.kv_tokens:
        return conf.kv_tokens
    per_token = 2 * (spec.num_layers + draft_layers) * spec.num_kv_heads * spec.head_dim \
        * DTYPES[conf.dtype].itemsize
    want = conf.max_running_requests * conf.max_positions
    if not str(conf.device).startswith("cuda"):
        return want
    free, _ = torch.cuda.mem_get_info()
    return max(conf.kv_block_tokens * 4, min(want, (free - HEADROOM_BYTES) // per_token))


def build_caches(spec, conf, drafter, shard=None):
    """``(target cache, draft cache or None, pages, rope)`` sized for ``conf``; under tensor
    parallelism (``shard``) every rank takes the smallest rank's capacity, so the pages rank 0
    hands out exist on every rank."""
    dtype = DTYPES[conf.dtype]
    n_draft = len(drafter.layers) if drafter is not None else 0
    tokens = kv_capacity_tokens(spec, conf, n_draft)
    if shard is not None:
        tokens = shard.smallest(tokens)
    num_pages = max(2, tokens // conf.kv_block_tokens)
    slots = num_pages * conf.kv_block_tokens
    cache = KVCache(spec.num_layers, slots, spec.num_kv_heads, spec.head_dim, dtype, conf.device)
    draft = None
    if drafter is not None:
        draft = KVCache(n_draft, slots, spec.num_kv_heads, spec.head_dim, dtype, conf.device)
    max_pages = -(-conf.max_positions // conf.kv_block_tokens)
    kind = Pages
    if conf.prefix_cache and spec.v4 is None:  # a DeepSeek-V4 target keeps per-request state besides its pages
        from dspark_sim.kernels.decoder.prefix import PrefixPages as kind
    pages = kind(num_pages, conf.kv_block_tokens, conf.max_running_requests, max_pages, conf.device)
    rope = Rope(spec.head_dim, spec.rope_theta, conf.max_positions, conf.device)
    return cache, draft, pages, rope
