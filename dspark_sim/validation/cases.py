"""The fidelity suite's cases: trace slices and scenarios that the decoder and the simulator both run.

One Azure-format trace per load (slices of the shipped Azure code trace, synthetic
Poisson traces from about one running request to a saturated 256, and long prompts of
several thousand tokens at two loads) and one scenario per (trace, method) for no
speculation, MTP-3 and DSpark's production scheduler, Qwen3-8B on the H200, batching
``prefill_first`` (``mixed`` for the ``-mixed`` cases, which serve their base case's trace
with prompt chunks beside the decode windows). The ``sess-`` cases are multi-turn chat
sessions over shared system prompts at two loads, written as Mooncake traces whose
``hash_ids`` tell both sides which prompt blocks repeat (:data:`SESSIONS`): the decoder's
prompts repeat the same tokens there, and both serve with the prefix cache on (the
deployment's default). The ``mc-long-`` cases (:data:`LONG_TRACES`) are the same kind of
Mooncake trace with long contexts: agent-like sessions over two 8,192-token shared documents,
prompts of 9,000 to 32,768 tokens at two loads, served with the model's whole context of
40,960 positions (:func:`max_model_len`). The DSpark scenarios name one SPS table
(``sps_dspark.json``, the table the simulator derives from the shipped profile, drafter
included), so the decoder and the simulator schedule from the same numbers. Each scenario
is read unchanged by ``dspark-decode`` and by ``dspark-sim run``.
"""
from __future__ import annotations

import csv
import datetime as dt
from pathlib import Path

import numpy as np
import yaml

from dspark_sim.errors import InputError
from dspark_sim.workload import read_trace

MODEL, GPU = "qwen3-8b", "h200"
CASE_METHODS = {  # run in this order (DSpark first: its kernels take longest to warm up)
    "dspark": {"method": "dspark", "drafter": "dspark", "block_size": 7, "scheduler": "production",
               "lag_steps": 2, "sps_table": "sps_dspark.json"},
    "mtp3": {"method": "static", "drafter": "mtp", "block_size": 3},
    "none": {"method": "none"},
}


def case_speculation(method: str):
    """The drafter a case method of :data:`CASE_METHODS` runs, as the cost model prices it."""
    from dspark_sim.scenario import Speculation

    return Speculation(**{k: v for k, v in CASE_METHODS[method].items() if k in ("method", "drafter", "block_size")})
# name: (source, requests, load[, batching]); azure: (first row, time_scale); synthetic:
# (rate/s, seed[, mean prompt tokens]). Batching prefill_first unless named: the "-mixed"
# cases serve their base case's trace with prompt chunks beside the decode windows.
TRACES = {
    "azure-1x": ("azure", 40, (4000, 1.0)),
    "azure-8x": ("azure", 100, (4000, 8.0)),
    "syn-light": ("synthetic", 12, (0.4, 1)),
    "syn-mid": ("synthetic", 120, (12.0, 2)),
    "syn-high": ("synthetic", 300, (40.0, 3)),
    "syn-sat": ("synthetic", 400, (1000.0, 4)),
    "long-light": ("synthetic", 16, (0.25, 5, 4000)),
    "long-mid": ("synthetic", 60, (1.5, 6, 4000)),
    "syn-mid-mixed": ("synthetic", 120, (12.0, 2), "mixed"),
    "long-mid-mixed": ("synthetic", 60, (1.5, 6, 4000), "mixed"),
    "sess-light": ("sessions", 40, (0.3, 7)),  # (sessions/s, seed)
    "sess-mid": ("sessions", 160, (4.0, 8)),
}
DOMAIN = {"azure": "code", "synthetic": "math", "sessions": "chat", "long_sessions": "code"}
# the sessions cases' workload (the rate and seed come from TRACES): chat sessions of about
# four turns over two 2,048-token system prompts, each turn appending a message and resending
# the history; prompts kept under 8,000 tokens
SESSIONS = {"prompt_tokens": {"dist": "lognormal", "mean": 300, "sigma": 0.6, "min_tokens": 16, "max_tokens": 1500},
            "output_tokens": {"dist": "uniform", "min_tokens": 64, "max_tokens": 320},
            "sessions": {"kind": "chat", "shared_prefix_tokens": 2048, "shared_prefixes": 2, "turn_gap_s": 8.0,
                         "max_prompt_tokens": 8000}}
HASH_BLOCK_TOKENS = 512
DEPLOYMENT = {"max_running_requests": 256, "max_batched_tokens": 8192, "batching": "prefill_first"}
MAX_MODEL_LEN = 10240
EPOCH = dt.datetime(2026, 1, 1)


# -- long contexts: Mooncake-style multi-turn sessions over long shared documents --------------
# Agent-like sessions (illustrative, not fitted to a trace): one of two 8,192-token shared
# documents, then turns appending a tool result or a pasted file (lognormal, about 3,000
# tokens) and resending the whole history, so prompts run from about 9,000 to 32,768 tokens
# and every turn re-reads its session's earlier blocks (prefix ``hash_ids``); at a light and
# a mid load. Both sides serve them with the prefix cache on and a context of the model's
# whole 40,960 positions. name: (requests, (sessions/s, seed)).
LONG_TRACES = {
    "mc-long-light": (12, (0.01, 21)),
    "mc-long-mid": (60, (1.0, 22)),
}
LONG_SESSIONS = {"prompt_tokens": {"dist": "lognormal", "mean": 4000, "sigma": 0.5, "min_tokens": 600,
                                   "max_tokens": 12000},
                 "output_tokens": {"dist": "uniform", "min_tokens": 64, "max_tokens": 256},
                 "sessions": {"kind": "agent", "shared_prefix_tokens": 8192, "shared_prefixes": 2,
                              "turn_gap_s": 12.0, "max_prompt_tokens": 32768,
                              "turns": {"dist": "lognormal", "mean": 6, "sigma": 0.4, "max_tokens": 12}}}
LONG_MAX_MODEL_LEN = 40960  # Qwen3-8B's max_position_embeddings


def case_traces() -> dict:
    """Every trace of the suite, name -> its definition: :data:`TRACES`, then the long-context
    sessions (``("long_sessions", requests, load)``)."""
    return {**TRACES, **{name: ("long_sessions", *spec) for name, spec in LONG_TRACES.items()}}


def max_model_len(traces) -> int:
    """The decoder's ``max_model_len`` for serving ``traces`` (names): the long-context cases
    need the model's whole context, the others fit :data:`MAX_MODEL_LEN`."""
    return LONG_MAX_MODEL_LEN if any(t in LONG_TRACES for t in traces) else MAX_MODEL_LEN


def write_trace(path: Path, arrival_s: np.ndarray, prompt: np.ndarray, output: np.ndarray) -> None:
    """An Azure-format CSV (TIMESTAMP, ContextTokens, GeneratedTokens)."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["TIMESTAMP", "ContextTokens", "GeneratedTokens"])
        for a, p, o in zip(arrival_s, prompt, output):
            w.writerow([f"{EPOCH + dt.timedelta(microseconds=round(float(a) * 1e6)):%Y-%m-%d %H:%M:%S.%f}",
                        int(p), int(o)])


def azure_slice(trace: Path, first: int, count: int, scale: float):
    """Rows ``first..first+count`` of an Azure trace, time from 0, sped up ``scale``x."""
    chunks = list(read_trace(trace, fmt="azure", max_requests=first + count))
    a = np.concatenate([c.arrival_s for c in chunks])[first:]
    p = np.concatenate([c.prompt_tokens for c in chunks])[first:]
    o = np.concatenate([c.output_tokens for c in chunks])[first:]
    return (a - a[0]) / scale, p, o


def synthetic(count: int, rate: float, seed: int, prompt_mean: int = 768):
    """Poisson arrivals; prompts lognormal (mean ``prompt_mean``, 32..8192), outputs uniform 64..320."""
    rng = np.random.default_rng(seed)
    a = np.cumsum(rng.exponential(1.0 / rate, count))
    a -= a[0]
    cap = 6000 if prompt_mean <= 768 else 8192  # the first cases' cap, kept so their traces do not move
    p = np.clip(np.round(rng.lognormal(np.log(prompt_mean) - 0.18, 0.6, count)), 32, cap)
    o = rng.integers(64, 321, count)
    return a, p, o


def make_cases(cases_dir: Path, azure_trace: Path, *, model: str = MODEL, tp: int = 1,
               traces: tuple[str, ...] | None = None, table: dict | None = None) -> list[Path]:
    """Write traces, scenarios and the SPS table into ``cases_dir``; returns the scenario paths.

    ``azure_trace`` is the shipped Azure code trace the Azure cases slice; ``model`` and ``tp``
    (``deployment.tp``, one process per GPU in the decoder) name the deployment, ``traces`` a
    subset of ``table`` (default :func:`case_traces`; the load sweeps give theirs,
    :mod:`~dspark_sim.validation.sweeps`)."""
    table = case_traces() if table is None else table
    cases_dir.mkdir(parents=True, exist_ok=True)
    paths, probe_trace = [], None
    for name in traces or table:
        if name not in table:
            raise InputError(None, "traces", name, f"expected some of {list(table)}")
        source, count, load, *batching = table[name]
        deployment = {**DEPLOYMENT, "batching": batching[0] if batching else DEPLOYMENT["batching"],
                      **({"tp": tp} if tp > 1 else {})}
        workload = _write_case_trace(cases_dir, name, source, count, load, azure_trace)
        probe_trace = probe_trace or workload["trace"]
        for method, spec in CASE_METHODS.items():
            scenario = {"name": f"{name}__{method}", "model": model, "gpu": GPU,
                        "workload": {**workload, "domain": DOMAIN[source]},
                        "deployment": deployment, "speculation": spec, "seed": 0}
            path = cases_dir / f"{name}__{method}.yaml"
            path.write_text(yaml.safe_dump(scenario, sort_keys=False))
            paths.append(path)
    # the DSpark scenarios' table: derived from the shipped profile with the drafter's cost (the
    # simulator imported here only: the GPU side serves the cases without it)
    from dspark_sim.catalog import get_gpu
    from dspark_sim.cost import get_cost_model
    from dspark_sim.serving.simulator import scheduler_table
    from dspark_sim.scenario import Scenario

    # the probe reads no rows; any written trace names it
    probe = Scenario.from_dict({"model": model, "gpu": GPU, "workload": {"trace": probe_trace},
                                "deployment": {**DEPLOYMENT, "tp": tp},
                                "speculation": {k: v for k, v in CASE_METHODS["dspark"].items()
                                                if k != "sps_table"}}, file=cases_dir / "_probe.yaml")
    table = scheduler_table(probe, get_cost_model(get_gpu(GPU).name, model, tp, warn=False))
    table.save(cases_dir / "sps_dspark.json")
    return paths


def _write_case_trace(cases_dir: Path, name: str, source: str, count: int, load: tuple, azure_trace: Path) -> dict:
    """Write case ``name``'s trace into ``cases_dir``; returns its scenario's workload keys."""
    if source in ("sessions", "long_sessions"):  # load: (sessions/s, seed[, the workload in place of SESSIONS])
        from dspark_sim.workload import SyntheticConfig, synthetic_requests, write_mooncake

        sessions = load[2] if len(load) > 2 else SESSIONS if source == "sessions" else LONG_SESSIONS
        cfg = SyntheticConfig.from_dict({"num_requests": count, "rate_per_s": load[0], **sessions}, file=None)
        chunks = list(synthetic_requests(cfg, load[1], hash_block_tokens=HASH_BLOCK_TOKENS))
        _check_fits(name, np.concatenate([c.prompt_tokens + c.output_tokens for c in chunks]))
        write_mooncake(cases_dir / f"{name}.jsonl", chunks)
        return {"trace": f"{name}.jsonl", "format": "mooncake", "hash_block_tokens": HASH_BLOCK_TOKENS}
    a, p, o = azure_slice(azure_trace, load[0], count, load[1]) if source == "azure" else synthetic(count, *load)
    _check_fits(name, p + o)
    write_trace(cases_dir / f"{name}.csv", a, p, o)
    return {"trace": f"{name}.csv", "format": "azure"}


def _check_fits(name: str, total_tokens: np.ndarray) -> None:
    limit = max_model_len([name])
    if int(total_tokens.max()) > limit - 16:
        raise InputError(None, "TRACES", name, f"a request exceeds max_model_len {limit}")
