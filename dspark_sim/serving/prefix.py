"""A replica's prefix cache: prompt KV shared between requests, kept and evicted as engines do.

The engines' rules (SGLang 0.5.23 ``mem_cache/radix_cache.py`` and ``schedule_batch.py``;
vLLM ``v1/core/kv_cache_manager.py`` with automatic prefix caching, on by default in both):

- KV is cached in whole blocks (SGLang pages, vLLM blocks of ``block_size``); a prompt's hit is
  the longest chain of cached blocks from its start, capped at the prompt less one token (the
  last token is always computed: it gives the first output's logits) and cut to whole blocks;
- a block a running request reads is referenced along its whole chain from the root (SGLang's
  ``inc_lock_ref``), so it is never evicted under the request;
- a request's blocks join the cache as its prefill computes them (SGLang checkpoints each
  chunk, vLLM caches each full block) and stay after it ends, while KV is free;
- when KV is needed, blocks no request references are evicted least recently used first,
  from the leaves of the tree (a parent becomes a leaf when its last child goes).

Here one node of the tree is one block of the trace's prefix hash chain (Mooncake
``hash_ids``, ``hash_block_tokens`` = 512 tokens each): two requests share a node when
their prompts agree up to its end. A node holds the whole engine blocks inside it (a
prompt's partial last block holds only its whole ``block_tokens`` blocks). Tokens are
counted exactly: a node's tokens once, however many requests read them; a request that
computed a block another request cached meanwhile keeps its own copy (vLLM does the same)
and references the cached one, so references always run from the root.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field


class Node:
    """One cached block of the chain: its tokens, children by hash id, references, last use."""

    __slots__ = ("parent", "key", "tokens", "children", "ref", "stamp")

    def __init__(self, parent: Node | None, key: int, tokens: int):
        self.parent, self.key, self.tokens = parent, key, tokens
        self.children: dict[int, Node] = {}
        self.ref = 0
        self.stamp = 0.0


@dataclass(frozen=True, slots=True)
class Hit:
    """What a lookup found, before anything is referenced.

    ``tokens``: prompt tokens read from the cache (the engines' cap applied); ``blocks``:
    hash blocks of the chain found cached; ``idle_tokens``: tokens of those nodes no request
    references yet (admitting the request pins them).
    """

    nodes: tuple[Node, ...]
    tokens: int
    blocks: int
    idle_tokens: int


@dataclass(slots=True)
class Chain:
    """A request's place in the cache: its prompt's hash ids, each block's cacheable tokens,
    the nodes it references (root first) and the tokens of its KV it reads from them."""

    ids: list[int]
    sizes: list[int]
    nodes: list[Node] = field(default_factory=list)
    shared: int = 0


@dataclass(slots=True)
class Counters:
    """What the cache did: lookups at first admission and hash blocks found, tokens served
    from the cache over every admission, blocks evicted, the most tokens it held."""

    first_lookups: int = 0
    first_blocks: int = 0
    first_hit_blocks: int = 0
    hit_tokens: int = 0
    evicted_blocks: int = 0
    evicted_tokens: int = 0
    peak_tokens: int = 0


@dataclass(frozen=True, slots=True)
class CacheTotals:
    """A run's prefix caches together: their :class:`Counters` summed (``peak_tokens`` the fullest
    replica's), whether any was on, the cache's block and the workload's hash block in tokens."""

    counters: Counters
    enabled: bool
    block_tokens: int
    hash_block_tokens: int


class PrefixCache:
    """The prefix tree of one replica and the tokens it holds.

    ``tree_tokens``: tokens of every node; ``idle_tokens``: of nodes no request references
    (evictable); ``shared_tokens``: the running requests' tokens read from nodes, summed per
    request. A replica's KV held by requests is the sum of their lengths plus
    :attr:`kv_adjust`; the idle nodes fill KV that is otherwise free.
    """

    def __init__(self, block_tokens: int, hash_block_tokens: int):
        if block_tokens < 1 or hash_block_tokens % block_tokens:
            raise ValueError("block_tokens must divide hash_block_tokens")
        self.block_tokens, self.hash_block_tokens = block_tokens, hash_block_tokens
        self.root = Node(None, -1, 0)
        self.root.ref = 1  # never evicted
        self.chains: dict[int, Chain] = {}
        self.tree_tokens = self.idle_tokens = self.shared_tokens = 0
        self.counters = Counters()
        self._heap: list[tuple[float, int, Node]] = []
        self._pushes = 0

    # -- requests -----------------------------------------------------------------
    def register(self, rid: int, hash_ids: list[int], prompt_tokens: int) -> None:
        """Remember request ``rid``'s chain: the ids covering its prompt, each block's cacheable
        tokens (whole engine blocks; ids past the prompt are dropped)."""
        hb, aligned = self.hash_block_tokens, prompt_tokens // self.block_tokens * self.block_tokens
        ids, sizes = [], []
        for i, key in enumerate(hash_ids[: -(-prompt_tokens // hb)]):
            size = min((i + 1) * hb, aligned) - i * hb
            if size <= 0:
                break
            ids.append(int(key))
            sizes.append(size)
        if ids:
            self.chains[rid] = Chain(ids, sizes)

    def matched_tokens(self, hash_ids: list[int]) -> int:
        """Tokens of the cached chain a prompt with ``hash_ids`` starts with (no cap, no side
        effects): what a cache-aware router compares between replicas."""
        node, tokens = self.root, 0
        for key in hash_ids:
            node = node.children.get(key)
            if node is None:
                break
            tokens += node.tokens
        return tokens

    enabled = True

    def lookup(self, rid: int, prefill_tokens: int) -> Hit:
        """The hit of request ``rid`` prefilling ``prefill_tokens`` tokens; :data:`MISS` without a chain."""
        chain = self.chains.get(rid)
        if chain is None:
            return MISS
        node, nodes, tokens, idle = self.root, [], 0, 0
        for key, size in zip(chain.ids, chain.sizes):
            node = node.children.get(key)
            if node is None or node.tokens != size:  # a block of another length is other content
                break
            nodes.append(node)
            tokens += node.tokens
            idle += node.tokens if node.ref == 0 else 0
        cap = (prefill_tokens - 1) // self.block_tokens * self.block_tokens
        while nodes and tokens - nodes[-1].tokens >= cap:  # nodes wholly past the cap are not read
            tokens -= nodes[-1].tokens
            idle -= nodes[-1].tokens if nodes[-1].ref == 0 else 0
            nodes.pop()
        return Hit(tuple(nodes), min(tokens, cap), len(nodes), idle)

    def acquire(self, rid: int, hit: Hit, now: float, first: bool) -> None:
        """Admit request ``rid`` with ``hit``: reference its nodes; ``first``: its first
        admission (counted in the hit rate). A request without a chain references nothing."""
        chain = self.chains.get(rid)
        if chain is None:
            return
        for node in hit.nodes:
            self._ref(node, now)
        chain.nodes, chain.shared = list(hit.nodes), hit.tokens
        self.shared_tokens += hit.tokens
        self.counters.hit_tokens += hit.tokens
        if first:
            self.counters.first_lookups += 1
            self.counters.first_blocks += len(chain.ids)
            self.counters.first_hit_blocks += hit.blocks

    def advance(self, rids, prefilled, now: float) -> None:
        """Prefill has computed ``prefilled[i]`` tokens of request ``rids[i]``: the blocks now
        complete join the tree (or, cached meanwhile by another request, are referenced)."""
        for rid, done in zip(rids.tolist(), prefilled.tolist()):
            chain = self.chains.get(rid)
            if chain is None:
                continue
            i = len(chain.nodes)
            parent = chain.nodes[-1] if chain.nodes else self.root
            end = sum(chain.sizes[:i]) if i else 0
            while i < len(chain.ids) and end + chain.sizes[i] <= done:
                node = parent.children.get(chain.ids[i])
                if node is None:
                    node = Node(parent, chain.ids[i], chain.sizes[i])
                    parent.children[node.key] = node
                    node.ref, node.stamp = 1, now
                    self.tree_tokens += node.tokens
                    chain.shared += node.tokens
                    self.shared_tokens += node.tokens
                elif node.tokens != chain.sizes[i]:
                    break  # the id names a block of another length: nothing past it is shared
                else:
                    self._ref(node, now)  # the request keeps its own copy (private KV)
                chain.nodes.append(node)
                end += chain.sizes[i]
                parent = node
                i += 1
        self.counters.peak_tokens = max(self.counters.peak_tokens, self.tree_tokens)

    def release(self, rid: int, finished: bool) -> None:
        """Request ``rid`` leaves the running set (finished, or preempted to recompute): its
        references go; its nodes stay cached. A finished request's chain is forgotten."""
        chain = self.chains.get(rid)
        if chain is None:
            return
        for node in reversed(chain.nodes):
            node.ref -= 1
            if node.ref == 0:
                self.idle_tokens += node.tokens
                if not node.children:
                    self._push(node)
        self.shared_tokens -= chain.shared
        chain.nodes, chain.shared = [], 0
        if finished:
            del self.chains[rid]

    # -- KV -------------------------------------------------------------------------
    @property
    def kv_adjust(self) -> int:
        """Tokens to add to the running requests' summed lengths to get the KV they hold: the
        referenced nodes once, less what the requests read from them."""
        return self.tree_tokens - self.idle_tokens - self.shared_tokens

    @property
    def repeat_tokens(self) -> int:
        """Tokens the running requests read from nodes that another running request reads too,
        each node counted past its first reader (the requests' reads less the referenced nodes'
        tokens; a node referenced but read by none, a copy computed while it was cached, lowers
        it: never below 0)."""
        return max(0, -self.kv_adjust)

    def evict(self, tokens: int) -> int:
        """Evict unreferenced leaves, least recently used first, until ``tokens`` are freed or
        none is left; returns the engine blocks evicted."""
        freed = 0
        while freed < tokens and self._heap:
            stamp, _, node = heapq.heappop(self._heap)
            if node.parent is None or node.ref or node.children or node.stamp != stamp:
                continue  # stale entry: evicted, referenced or touched since it was pushed
            parent = node.parent
            del parent.children[node.key]
            node.parent = None
            freed += node.tokens
            self.tree_tokens -= node.tokens
            self.idle_tokens -= node.tokens
            if parent is not self.root and parent.ref == 0 and not parent.children:
                self._push(parent)
        blocks = freed // self.block_tokens
        self.counters.evicted_blocks += blocks
        self.counters.evicted_tokens += freed
        return blocks

    def _ref(self, node: Node, now: float) -> None:
        if node.ref == 0:
            self.idle_tokens -= node.tokens
        node.ref += 1
        node.stamp = now

    def _push(self, node: Node) -> None:
        self._pushes += 1
        heapq.heappush(self._heap, (node.stamp, self._pushes, node))


MISS = Hit((), 0, 0, 0)  # what a lookup finds for a request without a chain


class NoPrefixCache(PrefixCache):
    """The prefix cache of a deployment that turns it off: it caches nothing, so every lookup
    misses, every request's KV is its own and nothing is ever evicted."""

    enabled = False

    def __init__(self):
        super().__init__(1, 1)

    def register(self, rid: int, hash_ids: list[int], prompt_tokens: int) -> None:
        pass
