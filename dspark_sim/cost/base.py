"""The cost-model interface: the work of one engine step in, seconds out.

Every cost model (the roofline below, measured GPU profiles) implements
:class:`CostModel`; the engine, the DSpark scheduler and the tuner only ever
call :meth:`CostModel.step_s`, so a measured profile replaces the roofline
without anything else changing. :meth:`CostModel.breakdown_array` prices many
steps (:class:`StepWorks`) in one vectorised call, with the numbers
:meth:`CostModel.breakdown` gives each of them, bit for bit.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np


@dataclass(frozen=True, slots=True)
class DraftWork:
    """Drafting done inside one step.

    kind: ``"block"`` (DSpark/DFlash: one parallel backbone forward over
    ``num_reqs x block_size`` positions plus a ``block_size``-long Markov loop)
    or ``"chain"`` (MTP/EAGLE: ``block_size`` sequential draft forwards over
    ``num_reqs`` tokens each).
    """

    kind: str
    num_reqs: int
    block_size: int
    context_tokens: int = 0


@dataclass(frozen=True, slots=True)
class StepWork:
    """What the GPU does in one engine step (one forward of the target).

    decode_reqs: requests decoding (or verifying drafts) this step.
    verify_tokens: target tokens for them, anchor included; equals
        ``decode_reqs`` without speculation.
    decode_context_tokens: summed KV length of the decoding requests.
    prefill_tokens / prefill_reqs: prompt tokens (chunks) processed this step.
    prefill_attn_tokens2: attention work of the prefill chunks, the sum over
        chunks of ``chunk * (cached + chunk / 2)`` (token x context pairs).
    draft: drafting done in this step, if any.
    decode_max_context: KV length of the longest decoding request (0: unknown, taken as
        the mean). One request's keys are streamed by a few programs, so the longest
        request sets a floor under the decode attention of a batch of mixed lengths.
    running_reqs: requests the engine holds while it schedules the step (0: taken as
        ``decode_reqs + prefill_reqs``); the serving loop's host time between steps
        grows with them.
    rank_tokens: under DP attention, the tokens of the step's busiest attention rank (its prompt
        chunks and its decoding rows' verify tokens; :mod:`dspark_sim.serving.ranks`); 0: the
        step's tokens spread evenly over the ranks.
    idle_ranks: under DP attention, the attention ranks with no tokens in this step (no prompt
        chunk and no decoding row): SGLang runs a step with prompt tokens eagerly on every rank
        when one of them is idle (:class:`~dspark_sim.engines.step_cost.EngineCost`).
    shared_kv_tokens: KV tokens the decoding requests read from prefix-cache pages another
        running request reads too (each page counted past its first reader: the prefix
        cache's :attr:`~dspark_sim.serving.prefix.PrefixCache.repeat_tokens`); the GPU's L2
        serves part of those reads (``TargetFit.shared_kv_ratio``).
    prefill_duty: for a step with prompt chunks, the share of the GPU's last
        ``TargetFit.hot_window_s`` seconds spent in such steps (:mod:`dspark_sim.cost.hot`).
    prefill_longest: the step's longest prompt chunk, tokens (0: unknown, taken as the mean
        chunk). The decoder plans a step's attention for its longest query, so every decode row
        beside the chunks gets that chunk's query tiles (``TargetFit.mixed_s_per_row_tile``).
    """

    decode_reqs: int = 0
    verify_tokens: int = 0
    decode_context_tokens: int = 0
    prefill_tokens: int = 0
    prefill_reqs: int = 0
    prefill_attn_tokens2: float = 0.0
    draft: DraftWork | None = None
    decode_max_context: int = 0
    running_reqs: int = 0
    rank_tokens: int = 0
    shared_kv_tokens: int = 0
    idle_ranks: int = 0
    prefill_duty: float = 0.0
    prefill_longest: int = 0

    @property
    def batch_tokens(self) -> int:
        """Tokens the target forward processes (verify plus prefill)."""
        return self.verify_tokens + self.prefill_tokens


@dataclass(frozen=True)
class StepWorks:
    """The work of N steps, one entry per step (the fields of :class:`StepWork`).

    Each field is a 1-D array of N entries or one number that holds for all N steps (a
    batch's request count in a stretch of its steps: the cost models then evaluate the
    terms of that number once). Lists are taken as arrays. The drafter, when there is one,
    is of one ``draft_kind`` for all N steps; a step whose ``block_size`` is 0 drafts nothing.
    """

    decode_reqs: np.ndarray | int
    verify_tokens: np.ndarray | int
    decode_context_tokens: np.ndarray | int
    prefill_tokens: np.ndarray | int = 0
    prefill_reqs: np.ndarray | int = 0
    prefill_attn_tokens2: np.ndarray | float = 0.0
    draft_kind: str | None = None
    draft_reqs: np.ndarray | int = 0
    block_size: np.ndarray | int = 0
    draft_context_tokens: np.ndarray | int = 0
    decode_max_context: np.ndarray | int = 0
    running_reqs: np.ndarray | int = 0
    shared_kv_tokens: np.ndarray | int = 0
    prefill_duty: np.ndarray | float = 0.0
    prefill_longest: np.ndarray | int = 0
    size: int = field(init=False, default=1)

    def __post_init__(self) -> None:
        sizes = set()
        for name in _WORK_FIELDS:
            value = self.__dict__[name]
            if type(value) is np.ndarray:
                if value.ndim != 1:
                    raise ValueError(f"StepWorks.{name} must be 1-D, got shape {value.shape}")
                sizes.add(value.size)
            elif isinstance(value, (list, tuple)):
                value = np.asarray(value, dtype=np.float64 if name in FLOAT_FIELDS else np.int64)
                object.__setattr__(self, name, value)
                sizes.add(value.size)
        if len(sizes) > 1:
            raise ValueError(f"StepWorks fields must be as long as each other, got lengths {sorted(sizes)}")
        object.__setattr__(self, "size", sizes.pop() if sizes else 1)

    def __len__(self) -> int:
        return self.size

    @property
    def batch_tokens(self):
        """Tokens each step's target forward processes (verify plus prefill)."""
        return self.verify_tokens + self.prefill_tokens

    @classmethod
    def of(cls, works: list[StepWork]) -> StepWorks:
        """The steps ``works`` as arrays (their drafters must be of one kind)."""
        kinds = {w.draft.kind for w in works if w.draft is not None}
        if len(kinds) > 1:
            raise ValueError(f"StepWorks holds one drafter kind, got {sorted(kinds)}")
        draft = [(w.draft.num_reqs, w.draft.block_size, w.draft.context_tokens) if w.draft else (0, 0, 0)
                 for w in works]
        columns = {name: [getattr(w, name) for w in works] for name in
                   ("decode_reqs", "verify_tokens", "decode_context_tokens", "prefill_tokens", "prefill_reqs",
                    "prefill_attn_tokens2", "decode_max_context", "running_reqs", "shared_kv_tokens",
                    "prefill_duty", "prefill_longest")}
        return cls(**columns, draft_kind=kinds.pop() if kinds else None, draft_reqs=[d[0] for d in draft],
                   block_size=[d[1] for d in draft], draft_context_tokens=[d[2] for d in draft])

    def at(self, i: int) -> StepWork:
        """Step ``i`` as a :class:`StepWork` (no drafter where its block size is 0)."""
        def get(name: str):
            value = getattr(self, name)
            return value[i].item() if isinstance(value, np.ndarray) else value

        draft = None
        if self.draft_kind is not None and get("block_size"):
            draft = DraftWork(self.draft_kind, get("draft_reqs"), get("block_size"),
                              get("draft_context_tokens"))
        return StepWork(get("decode_reqs"), get("verify_tokens"), get("decode_context_tokens"),
                        get("prefill_tokens"), get("prefill_reqs"), get("prefill_attn_tokens2"), draft,
                        get("decode_max_context"), get("running_reqs"), shared_kv_tokens=get("shared_kv_tokens"),
                        prefill_duty=get("prefill_duty"), prefill_longest=get("prefill_longest"))


FLOAT_FIELDS = ("prefill_attn_tokens2", "prefill_duty")
_WORK_FIELDS = tuple(name for name in StepWorks.__dataclass_fields__ if name not in ("draft_kind", "size"))


def per_step(value, size: int) -> np.ndarray:
    """``value`` (an array of ``size`` or one number) as a float64 array of ``size``."""
    if isinstance(value, np.ndarray):
        return value if value.dtype == np.float64 else value.astype(np.float64)
    return np.full(size, float(value))


def pick(cond, value, other=0.0):
    """``value`` where ``cond`` holds, else ``other``: np.where, or the one branch where ``cond``
    is one bool or holds everywhere."""
    if not isinstance(cond, np.ndarray):
        return value if cond else other
    if cond.all():
        return value
    return np.where(cond, value, other)


def each(fn, x):
    """``fn`` of every entry of ``x`` (an array, or one number passed straight to it), called once
    per distinct value: the scalar path's own numbers, as a float64 array like ``x``."""
    if not isinstance(x, np.ndarray):
        return fn(x)
    distinct, where = np.unique(x, return_inverse=True)
    return np.array([fn(v) for v in distinct.tolist()], dtype=np.float64)[where]


@runtime_checkable
class CostModel(Protocol):
    """Seconds of one engine step; implementations must be cheap (< 10 us)."""

    name: str
    source: str

    def step_s(self, work: StepWork) -> float:
        """Wall-clock seconds of the step described by ``work``."""
        ...

    def breakdown(self, work: StepWork) -> dict[str, float]:
        """The same seconds split into named parts (``target_s``, ``draft_s``, ...)."""
        ...

    def breakdown_array(self, works: StepWorks) -> dict[str, np.ndarray]:
        """:meth:`breakdown` of N steps at once: the same parts, float64 [N] each, with the
        numbers :meth:`breakdown` gives every step, bit for bit."""
        ...
