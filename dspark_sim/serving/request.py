"""A request on its way through the simulator (workload -> router -> replica -> collector)."""
from __future__ import annotations

import math
from dataclasses import dataclass


# Not frozen: the waiting queue is where a request's progress lives until it runs (admission
# sets ``first_scheduled_s``, ``cached_tokens`` and ``prefilled``; a preemption sets it back and
# counts it), and a copy per change would cost an allocation per admission on the hot path.
@dataclass(slots=True)
class Request:
    """One request: what the workload gave it (``rid`` .. ``difficulty``, its prompt's prefix
    ``hash_ids``) and where it stands; every field but ``hash_ids`` and ``ready_s`` is a column of
    :class:`~dspark_sim.serving.batch.Table`, which holds the running requests."""

    rid: int
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    domain: int  # index into names.DOMAINS
    difficulty: float
    prefill_len: int  # tokens to prefill: the prompt, plus what it generated before a preemption
    prefilled: int = 0
    generated: int = 0
    kv_base: int = 0  # tokens generated before the current prefill started
    first_scheduled_s: float = -1.0  # -1: not scheduled yet
    first_token_s: float = -1.0
    last_token_s: float = -1.0
    num_steps: int = 0
    num_preemptions: int = 0
    accepted_tokens: int = 0
    verified_drafts: int = 0
    cached_tokens: int = 0  # prompt tokens its first prefill read from the prefix cache
    hash_ids: list | None = None  # the prompt's prefix hash blocks (None: the trace gives none)
    ready_s: float = -math.inf  # when it reaches the replica's scheduler (-inf: a preempted one, seen before)
