"""The bounds every number a user gives must lie within, each with its reason.

A number outside them is bad input (one :class:`~dspark_sim.errors.InputError` line),
never a run. Inside them every run is bounded in work (:data:`MAX_RUN_TOKENS`) and its
clock keeps sub-microsecond precision (:data:`MAX_ARRIVAL_S`). A request inside them
that no engine would serve (longer than the model's context, or than the KV cache
holds) is not an error: the engine rejects it and the run counts it (docs/simulator.md).
docs/scenario.md lists these bounds; tests/test_bounds.py checks the table against them.
"""
from __future__ import annotations

# A request's prompt or output, in tokens: 4,096 times the longest context in the catalog
# (DeepSeek-V4's 1M), so any length an engine might be asked for is read and then rejected
# by the engine, and a sum of two stays far inside int64.
MAX_TOKENS = 2**32
# Requests one run reads (a trace's rows or a synthetic workload).
MAX_REQUESTS = 10**9
# Arrival rates, requests per second: one a fortnight up to one a nanosecond (faster is
# simultaneous for any engine; compare's closed loop replays at this rate).
MIN_RATE_PER_S, MAX_RATE_PER_S = 1e-6, 1e9
# Trace replay speed: compare's closed loop replays a trace 1e12 times faster.
MIN_TIME_SCALE, MAX_TIME_SCALE = 1e-6, 1e12
# The simulated clock: float64 resolves 0.12 us at 1e9 s (31.7 years); a later arrival
# would lose the step times (milliseconds) it is added to.
MAX_ARRIVAL_S = 1e9
# Gamma arrivals' coefficient of variation, and a lognormal length's sigma (of its log).
MAX_CV = 100.0
MAX_LENGTH_SIGMA = 10.0
# Latency objectives (TTFT, TPOT, queue wait) in ms, and tokens per second per user.
MAX_LATENCY_MS = 1e9
MAX_TOK_PER_S_USER = 1e6
# Dollars per GPU-hour.
MAX_PRICE_PER_GPU_HOUR = 1e4
# Seeds: numpy's SeedSequence takes any non-negative integer; int64 keeps them storable.
MAX_SEED = 2**63 - 1
# Replicas of one deployment (and of a capacity plan), requests one replica runs at once
# (SGLang's --max-running-requests; compare's concurrencies), tokens of a KV page.
MAX_REPLICAS = 4096
MAX_RUNNING_REQUESTS = 1 << 16
MAX_KV_BLOCK_TOKENS = 1024
# A run's work bound: its requests times the longest request it can serve (the model's
# context, or the KV cache of a replica when that is smaller). A run whose bound is larger
# is refused before it starts; under it, every request runs within the bound or is
# rejected at arrival, so no run exceeds it. 2^40 is a million requests at DeepSeek-V4's
# 1M-token context.
MAX_RUN_TOKENS = 2**40
