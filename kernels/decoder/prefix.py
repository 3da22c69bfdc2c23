"""Prefix sharing in the paged KV cache: a page-aligned prefix tree over token ids.

:class:`PrefixPages` is :class:`~.cache.Pages` with SGLang's radix cache rules at page
granularity (``page_size`` tokens, as SGLang with ``--page-size`` and vLLM's blocks):

- a new request's prompt is matched page by page against the tree (a page's key is its
  tokens, under its parent: the whole prefix before it agrees); it reads the matched pages
  in place, never past its prompt less one token (the last token is computed for its
  logits), and prefills only the rest;
- pages are referenced by the requests reading them, all along the chain from the root;
- a request's whole pages join the tree as its prefill computes them and when it leaves
  (finished or preempted: outputs too, as SGLang inserts finished requests); a page that
  another request cached meanwhile stays the request's own and is freed with it;
- pages stay cached after their requests leave; :meth:`reserve` evicts unreferenced leaf
  pages, least recently used first, when the free pages run short.

The target's and the drafter's caches share page ids (:mod:`.cache`), so a cached page
carries both the target's keys and values and the DSpark drafter's context keys for its
tokens: a hit spares the drafter's context projection too.
"""
from __future__ import annotations

import heapq

from dspark_sim.kernels.decoder.cache import Pages


class _Node:
    __slots__ = ("parent", "key", "page", "children", "ref", "stamp")

    def __init__(self, parent, key, page: int):
        self.parent, self.key, self.page = parent, key, page
        self.children: dict[tuple, _Node] = {}
        self.ref = 0
        self.stamp = 0


class _Held:
    """A sequence's place in the tree: the nodes it references, the node its next page would
    hang under, how many of its pages were looked at, whether a real prefill ran, and the
    tokens its admission read from the tree."""

    __slots__ = ("nodes", "cursor", "upto", "computed", "hit")

    def __init__(self, nodes: list, cursor, hit: int):
        self.nodes, self.cursor, self.upto, self.computed = nodes, cursor, len(nodes), False
        self.hit = hit


class PrefixPages(Pages):
    """Pages whose whole prompt (and output) pages are shared between sequences; see the module.

    ``hit_tokens``: prompt tokens read from the tree over all admissions; ``evicted_pages``:
    pages evicted so far; :attr:`cached_pages`: pages the tree holds.
    """

    def __init__(self, num_pages: int, page_size: int, max_rows: int, max_pages: int, device):
        super().__init__(num_pages, page_size, max_rows, max_pages, device)
        self.root = _Node(None, None, -1)
        self.owner: dict[int, _Node] = {}  # tree page -> its node
        self._held: dict = {}
        self._heap: list = []
        self._tick = 0
        self.hit_tokens = self.evicted_pages = 0

    @property
    def cached_pages(self) -> int:
        return len(self.owner)

    def _key(self, seq, i: int) -> tuple:
        p = self.page_size
        return tuple(seq.tokens[i * p:(i + 1) * p])

    def match(self, seq) -> None:
        """Give a just-attached ``seq`` the cached pages its prompt starts with; sets
        ``num_cached`` (and ``cached_tokens`` before its first preemption)."""
        node, nodes = self.root, []
        for i in range((seq.prefill_target - 1) // self.page_size):
            child = node.children.get(self._key(seq, i))
            if child is None:
                break
            nodes.append(child)
            node = child
        for i, n in enumerate(nodes):
            self._ref(n)
            self._updates.append((seq.row, i, n.page))
            seq.pages.append(n.page)
        seq.num_cached = len(nodes) * self.page_size
        self.hit_tokens += seq.num_cached
        if not seq.num_preemptions:
            seq.cached_tokens = seq.num_cached
        self._held[seq] = _Held(nodes, node, seq.num_cached)

    def share(self, seqs) -> None:
        """After a prefill step: the whole pages each sequence has computed join the tree."""
        for seq in seqs:
            held = self._held.get(seq)
            if held is not None:
                held.computed = True
                self._insert(seq, held)

    def _insert(self, seq, held: _Held) -> None:
        for i in range(held.upto, seq.num_cached // self.page_size):
            key = self._key(seq, i)
            node = held.cursor.children.get(key)
            if node is None:
                node = _Node(held.cursor, key, seq.pages[i])
                held.cursor.children[key] = node
                self.owner[node.page] = node
            self._ref(node)  # a node cached meanwhile: the sequence keeps its own page
            held.nodes.append(node)
            held.cursor = node
        held.upto = max(held.upto, seq.num_cached // self.page_size)

    def reserve(self, seq, tokens: int) -> bool:
        need = self.pages_for(tokens) - len(seq.pages)
        if need > len(self.free) and self.pages_for(tokens) <= self.max_pages:
            self.evict(need - len(self.free))
        return super().reserve(seq, tokens)

    def truncate(self, seq, tokens: int) -> None:
        keep = self.pages_for(tokens)
        if any(p in self.owner for p in seq.pages[keep:]):
            raise RuntimeError("KV rollback would free a cached page")
        super().truncate(seq, tokens)

    def release(self, seq) -> None:
        """Cache ``seq``'s computed pages, drop its references, free its own pages and row."""
        if seq.row is None:
            return
        held = self._held.pop(seq, None)
        if held is not None:
            if held.computed:
                self._insert(seq, held)
            else:  # never prefilled here (admission undone, timing): its hit read nothing
                self.hit_tokens -= held.hit
            for node in reversed(held.nodes):
                node.ref -= 1
                if node.ref == 0 and not node.children:
                    self._push(node)
        self.free.extend(p for p in seq.pages if p not in self.owner)
        seq.pages = []
        self.free_rows.append(seq.row)
        seq.row = None

    def evict(self, pages: int) -> int:
        """Free up to ``pages`` unreferenced leaf pages, least recently used first; returns how many."""
        done = 0
        while done < pages and self._heap:
            stamp, _, node = heapq.heappop(self._heap)
            if node.parent is None or node.ref or node.children or node.stamp != stamp:
                continue  # stale: evicted, referenced or used since it was pushed
            parent = node.parent
            del parent.children[node.key]
            node.parent = None
            del self.owner[node.page]
            self.free.append(node.page)
            done += 1
            if parent is not self.root and parent.ref == 0 and not parent.children:
                self._push(parent)
        self.evicted_pages += done
        return done

    def drop_cached(self) -> None:
        """Evict every page no sequence references (a cold cache)."""
        self.evict(len(self.owner))

    def _ref(self, node: _Node) -> None:
        self._tick += 1
        node.ref += 1
        node.stamp = self._tick

    def _push(self, node: _Node) -> None:
        self._tick += 1
        heapq.heappush(self._heap, (node.stamp, self._tick, node))
