"""Synthetic sessions: multi-turn conversations and agent loops whose prompts share prefixes.

A session starts with one of ``shared_prefixes`` shared prefixes of ``shared_prefix_tokens``
(a chat's system prompt, an agent's tool definitions and instructions), then appends a turn
at a time: turn k's prompt is the session's whole history (the shared prefix, every earlier
turn's appended tokens and output) plus its own appended tokens (a user message, a tool
result), drawn from the workload's ``prompt_tokens``; its output from ``output_tokens``.
Sessions start at the workload's arrival process (``rate_per_s`` is sessions a second);
turns follow ``turn_gap_s`` apart on average (exponential gaps, arrival to arrival: the
answer's time plus the user's think time or the tool's run; the generator is open-loop, as
a recorded trace is).

Every request carries Mooncake-style ``hash_ids``: one id per ``hash_block_tokens`` block of
its prompt, equal between two prompts exactly when their content agrees up to that block's
end. A session's prompts are prefixes of one content stream, so turn k+1 repeats turn k's
whole blocks; the shared prefix's whole blocks have the same ids in every session that drew
it; a prompt's partial last block gets an id of its own.

The kinds set illustrative defaults (not fitted to any trace): ``chat`` a 1,000-token system
prompt of 8, about 4 turns 30 s apart; ``agent`` 8,000 tokens of tools of 2, about 12 turns
3 s apart. Every default can be overridden.
"""
from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from dspark_sim.config import Section, build, is_int, is_real
from dspark_sim.errors import InputError
from dspark_sim.workload.chunk import RequestChunk
from dspark_sim.workload.lengths import LengthDist, Sampler, bad

SESSION_KINDS = ("chat", "agent")
KIND_DEFAULTS = {
    "chat": {"shared_prefix_tokens": 1000, "shared_prefixes": 8, "turn_gap_s": 30.0,
             "turns": {"dist": "lognormal", "mean": 4, "sigma": 0.6, "max_tokens": 40}},
    "agent": {"shared_prefix_tokens": 8000, "shared_prefixes": 2, "turn_gap_s": 3.0,
              "turns": {"dist": "lognormal", "mean": 12, "sigma": 0.5, "max_tokens": 100}},
}
SESSIONS_STREAM = 1 << 31  # the spawn key of the sessions' random stream
EMIT_ROWS = 65536
MAX_EMPTY_SESSIONS = 1000


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionsConfig:
    """How requests group into sessions (``workload.synthetic.sessions``); see the module."""

    kind: str
    shared_prefix_tokens: int
    shared_prefixes: int
    turns: LengthDist
    turn_gap_s: float
    max_prompt_tokens: int | None = None  # a session ends before a prompt longer than this

    def __post_init__(self) -> None:
        if self.kind not in SESSION_KINDS:
            bad("kind", self.kind, f"expected one of {', '.join(SESSION_KINDS)}")
        if not is_int(self.shared_prefix_tokens) or self.shared_prefix_tokens < 0:
            bad("shared_prefix_tokens", self.shared_prefix_tokens, "must be an integer >= 0")
        if not is_int(self.shared_prefixes) or self.shared_prefixes < 1:
            bad("shared_prefixes", self.shared_prefixes, "must be an integer >= 1")
        if not isinstance(self.turns, LengthDist):
            bad("turns", self.turns, "expected a mapping like prompt_tokens'")
        if not is_real(self.turn_gap_s) or self.turn_gap_s <= 0:
            bad("turn_gap_s", self.turn_gap_s, "must be a finite number > 0")
        top = self.max_prompt_tokens
        if top is not None and (not is_int(top) or top <= self.shared_prefix_tokens):
            bad("max_prompt_tokens", top, f"must be an integer > shared_prefix_tokens={self.shared_prefix_tokens}")

    @classmethod
    def from_dict(cls, d, *, file, key: str = "workload.synthetic.sessions") -> SessionsConfig:
        """Build from a YAML mapping: ``kind`` picks the defaults, the other keys override them."""
        s = Section(d, file, key)
        kind = s.string("kind", "chat", choices=SESSION_KINDS)
        kwargs = {**KIND_DEFAULTS[kind], "kind": kind}
        for name in ("shared_prefix_tokens", "shared_prefixes", "turn_gap_s", "turns", "max_prompt_tokens"):
            if s.has(name):
                kwargs[name] = s.raw(name)
        s.done()
        kwargs["turns"] = LengthDist.from_dict(kwargs["turns"], file=file, key=s.path("turns"))
        return build(cls, kwargs, file, key)


class _Ids:
    """Hash ids: a fresh one per new block, the same one for the same shared block."""

    def __init__(self):
        self.last = 0
        self.shared: dict[int, list[int]] = {}  # shared prefix -> ids of its whole blocks

    def fresh(self) -> int:
        self.last += 1
        return self.last

    def shared_block(self, prefix: int, i: int) -> int:
        ids = self.shared.setdefault(prefix, [])
        while len(ids) <= i:
            ids.append(self.fresh())
        return ids[i]


def session_blocks(cfg, seed: int, hash_block_tokens: int,
                   start_gaps: Callable[[np.random.Generator, int], np.ndarray]) -> Iterator[RequestChunk]:
    """``cfg.num_requests`` requests of ``cfg.sessions`` sessions in arrival order (the first at
    0 s), as chunks carrying ``hash_ids``; ``start_gaps(rng, n)`` draws gaps between sessions'
    starts. ``cfg`` is a :class:`~dspark_sim.workload.SyntheticConfig`."""
    if not is_int(hash_block_tokens) or hash_block_tokens < 1:
        raise InputError(None, "hash_block_tokens", hash_block_tokens, "must be an integer >= 1")
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(SESSIONS_STREAM,)))
    draw = (cfg.sessions.turns.sampler(), cfg.prompt_tokens.sampler(), cfg.output_tokens.sampler())
    ids, pending, rows = _Ids(), [], []
    start_s, order, emitted, empty = 0.0, 0, 0, 0
    while emitted < cfg.num_requests:
        turns = _turns(cfg.sessions, start_s, rng, draw, ids, hash_block_tokens)
        empty = 0 if turns else empty + 1
        if empty == MAX_EMPTY_SESSIONS:
            raise InputError(None, "sessions.max_prompt_tokens", cfg.sessions.max_prompt_tokens,
                             f"no first prompt fits in {MAX_EMPTY_SESSIONS} sessions in a row")
        for turn in turns:
            heapq.heappush(pending, (turn[0], order, turn))
            order += 1
        start_s += float(start_gaps(rng, 1)[0])
        while pending and pending[0][0] <= start_s and emitted < cfg.num_requests:
            rows.append(heapq.heappop(pending)[2])
            emitted += 1
        if len(rows) >= EMIT_ROWS or (emitted == cfg.num_requests and rows):
            yield _chunk(rows)
            rows = []


def _turns(sessions: SessionsConfig, start_s: float, rng: np.random.Generator, draw: tuple[Sampler, ...],
           ids: _Ids, block: int) -> list[tuple]:
    """One session's requests ``(arrival_s, prompt, output, hash_ids)``."""
    turns, appended, outputs = draw
    k = int(turns(rng, 1)[0])
    added, out = appended(rng, k).tolist(), outputs(rng, k).tolist()
    gaps = rng.exponential(sessions.turn_gap_s, k - 1).tolist()
    prefix = int(rng.integers(sessions.shared_prefixes))
    shared = sessions.shared_prefix_tokens
    own: dict[int, int] = {}  # this session's whole blocks past the shared prefix
    length, t, rows = shared, start_s, []
    for j in range(k):
        prompt = length + added[j]
        if sessions.max_prompt_tokens is not None and prompt > sessions.max_prompt_tokens:
            break
        chain = [ids.shared_block(prefix, i) if (i + 1) * block <= shared else own.setdefault(i, ids.fresh())
                 for i in range(prompt // block)]
        if prompt % block:
            chain.append(ids.fresh())
        rows.append((t, prompt, out[j], chain))
        length = prompt + out[j]
        t += gaps[j] if j < k - 1 else 0.0
    return rows


def _chunk(rows: list[tuple]) -> RequestChunk:
    return RequestChunk(np.array([r[0] for r in rows], np.float64), np.array([r[1] for r in rows], np.int64),
                        np.array([r[2] for r in rows], np.int64), [r[3] for r in rows])
