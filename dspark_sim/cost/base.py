"""The cost-model interface: the work of one engine step in, seconds out.

Every cost model (the roofline below, measured GPU profiles) implements
:class:`CostModel`; the engine, the DSpark scheduler and the tuner only ever
call :meth:`CostModel.step_s`, so a measured profile replaces the roofline
without anything else changing.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable


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

    @property
    def batch_tokens(self) -> int:
        """Tokens the target forward processes (verify plus prefill)."""
        return self.verify_tokens + self.prefill_tokens


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
