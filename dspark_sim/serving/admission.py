"""Which requests an engine serves at all: the rule vLLM and SGLang apply when a request arrives.

A request asks for its prompt plus its output. Both engines refuse one longer than the
model's context: vLLM's OpenAI server when the prompt is at least ``max_model_len``
("This model's maximum context length is C tokens. However, your request has P input
tokens.") or prompt plus ``max_tokens`` exceeds it ("'max_tokens' or
'max_completion_tokens' is too large"); SGLang's ``TokenizerManager`` when the input is
at least ``context_len`` ("The input (P tokens) is longer than the model's context
length (C tokens).") or input plus ``max_new_tokens`` exceeds it ("Requested token count
exceeds the model's maximum context length"). With an output of at least one token, both
say: prompt + output > context is refused.

A request that fits the context but not its replica's KV cache even alone can never
finish. vLLM does not start when one request of ``max_model_len`` outgrows the cache ("To
serve at least one request with the model's max seq len ... Try ... decreasing
``max_model_len``"), so a served ``max_model_len`` is at most what the cache holds, and a
longer request meets the context rule above; SGLang bounds a request by the pool
(``max_req_len = min(context_len - 1, max_total_num_tokens - 1)``) and refuses a prompt
beyond it ("Input length (P tokens) exceeds the maximum allowed length"). The simulator
rejects such a request as vLLM does: what it holds at its last step (prompt, output, the
verify tokens drafted past the output and DeepSeek-V4's per-request window and compressor
state) must fit the cache. Either way the request is counted as rejected with its reason
and the rest of the workload runs.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dspark_sim.speculation.config import Speculation

CONTEXT, KV_CACHE = "context_length", "kv_cache"
REASONS = (CONTEXT, KV_CACHE)


@dataclass(frozen=True, slots=True)
class Admission:
    """The longest request a replica serves.

    ``max_context``: the model's context in tokens (0: no bound but the cache);
    ``kv_capacity``: KV tokens of the replica; ``kv_per_request``: KV tokens every running
    request holds besides its length (DeepSeek-V4); ``spec_slots``: KV slots a request's
    verify step writes beyond its last output token (drafts verified past the end).
    """

    max_context: int
    kv_capacity: int
    kv_per_request: int = 0
    spec_slots: int = 0

    @classmethod
    def of(cls, max_context: int, kv_capacity: int, kv_per_request: int, spec: Speculation) -> Admission:
        """The rule for a replica serving with ``spec``'s speculation."""
        return cls(max_context, kv_capacity, kv_per_request, spec.verify_cap - 1)

    @property
    def kv_tokens(self) -> int:
        """The longest prompt + output the cache holds for a request alone."""
        return self.kv_capacity - self.kv_per_request - self.spec_slots

    @property
    def longest_tokens(self) -> int:
        """The longest prompt + output the replica serves (0 or less: none)."""
        return min(self.max_context, self.kv_tokens) if self.max_context else self.kv_tokens

    def refusal(self, prompt_tokens: int, output_tokens: int) -> str | None:
        """The reason (:data:`REASONS`) a request of these lengths is rejected, or None."""
        total = prompt_tokens + output_tokens
        if self.max_context and total > self.max_context:
            return CONTEXT
        if total > self.kv_tokens:
            return KV_CACHE
        return None

    def explain(self, reason: str, model: str) -> str:
        """What a reason means for this replica, in words."""
        if reason == CONTEXT:
            return f"prompt + output longer than {model}'s context of {self.max_context} tokens"
        return (f"prompt + output larger than the {self.kv_tokens} tokens the KV cache holds for one request "
                f"({self.kv_capacity} tokens, less {self.kv_per_request + self.spec_slots} of per-request state "
                "and verify slots)")


def preempt_newest(rep) -> None:
    """Recompute preemption in replica ``rep``: its last admitted request goes back to the head of
    its queue, to prefill its prompt and what it generated again."""
    run = rep.running
    i = len(run) - 1
    req = run.row(i)
    mask = np.zeros(len(run), dtype=bool)
    mask[i] = True
    run.remove(mask)
    if rep.prefix is not None:
        rep.prefix.release(req["rid"], finished=False)
    req["num_preemptions"] += 1
    if rep.reserve is not None:  # a retraction: the engine reserves as at start again
        rep.reserve_ratio = rep.reserve.running_init
    req["prefill_len"] = req["prompt_tokens"] + req["generated"]
    req["prefilled"] = 0
    req["kv_base"] = req["generated"]
    rep.waiting.appendleft(req)
