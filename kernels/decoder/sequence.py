"""A request's state while it is served."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(eq=False)
class Sequence:
    """Tokens so far (prompt then output), cache bookkeeping and per-request stats.

    The target's cache holds ``num_cached`` tokens. While decoding, that is all
    tokens but the last one, the *anchor*, which the next step feeds.
    """

    id: int
    tokens: list[int]
    max_tokens: int
    temperature: float = 0.0
    domain: int = 0
    eos: int | None = None
    arrival_s: float = 0.0
    prompt_len: int = field(init=False)
    num_cached: int = 0
    row: int | None = None
    pages: list[int] = field(default_factory=list)
    difficulty: float | None = None  # synthetic acceptance: drawn once per request
    first_scheduled_s: float | None = None
    first_token_s: float | None = None
    finish_s: float | None = None
    num_steps: int = 0
    num_preemptions: int = 0
    accepted: int = 0
    verified: int = 0
    cached_tokens: int = 0  # prompt tokens its first prefill read from the prefix cache
    done: bool = False
    pending: int = 0  # most tokens launched, unfinished steps may still add (decode windows, a first token)
    pending_min: int = 0  # fewest they add (one per decode step and per first token)

    def __post_init__(self) -> None:
        self.tokens = list(self.tokens)  # never alias the caller's prompt
        self.prompt_len = len(self.tokens)

    @classmethod
    def unseen(cls, id: int, prompt_len: int, max_tokens: int, domain: int = 0, arrival_s: float = 0.0) -> "Sequence":
        """A request longer than the engine serves: its lengths only (its prompt is never made;
        the serving loop refuses it on arrival)."""
        seq = cls(id, [], max_tokens, domain=domain, arrival_s=arrival_s)
        seq.prompt_len = prompt_len
        return seq

    @property
    def outputs(self) -> list[int]:
        """Generated tokens (a copy: the serving loop's checks use :attr:`num_outputs`)."""
        return self.tokens[self.prompt_len:]

    @property
    def num_outputs(self) -> int:
        """How many tokens have been generated."""
        return len(self.tokens) - self.prompt_len

    @property
    def prefill_target(self) -> int:
        """Tokens the cache must hold before decoding: all but the anchor, or the
        whole prompt when no token has been generated yet."""
        return len(self.tokens) - (self.num_outputs > 0)

    @property
    def prefilling(self) -> bool:
        """True until the cache holds :attr:`prefill_target` tokens."""
        return self.num_cached < self.prefill_target

    def extend(self, new: list[int]) -> int:
        """Append generated tokens, stopping at ``max_tokens`` or EOS; returns how many."""
        room = self.max_tokens - self.num_outputs
        new = new[:max(room, 0)]
        if self.eos is not None and self.eos in new:
            new = new[:new.index(self.eos) + 1]
            self.done = True
        self.tokens.extend(new)
        if self.num_outputs >= self.max_tokens:
            self.done = True
        return len(new)
