"""The published runs' cases as scenarios: how a published run is replayed (validation/published_check.py).

A case in ``profiles/external/cases.yaml`` names its engine and release, model, GPU and split
(``tp``, and ``deployment`` keys such as ``ep``, ``dp_attention``, ``max_running_requests``),
its speculation (``speculation``, a scenario section), its client (``rate`` a second or ``inf``;
``max_concurrency`` for a client keeping that many requests in flight) and its lengths:

* ``sharegpt``: lognormals (sigma 1) of the run's mean lengths, clamped as vllm bench's filter does;
* ``constant``: the mean lengths exactly (a random dataset at range ratio 1);
* ``uniform``: integers uniform in [1, ``input_len``] and [1, ``output_len``], as
  ``sglang.bench_serving``'s random dataset draws them at its default range ratio 0.

A case measures medians or means (``median_ttft_ms`` or ``mean_ttft_ms``, likewise TPOT) and
output tokens a second; each is compared with the same statistic of the replay.
"""
from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
CASES = ROOT / "profiles" / "external" / "cases.yaml"
METRICS = ("ttft", "tpot", "throughput")
STATS = ("median", "mean")
SHAREGPT_SIGMA = 1.0
SHAREGPT_MAX_TOKENS = 1024
PACED_REQUESTS = 300  # a run at a request rate is replayed for its first 300 requests (its steady state);
# a burst (all at once) or a client at a concurrency limit with every request the run sent


def load_cases(path: Path = CASES) -> tuple[dict, list[dict]]:
    data = yaml.safe_load(path.read_text())
    return data["sources"], data["cases"]


def metric_key(case: dict, metric: str) -> str:
    """The key of ``case``'s measured ``metric`` (``median_ttft_ms``, ``mean_tpot_ms``,
    ``output_throughput``); the median's (or the throughput's) when the case measured none."""
    if metric == "throughput":
        return "output_throughput"
    for stat in STATS:
        key = f"{stat}_{metric}_ms"
        if key in case["measured"]:
            return key
    return f"median_{metric}_ms"


def measured_keys() -> set[str]:
    """Every key a case may measure."""
    return {"output_throughput"} | {f"{s}_{m}_ms" for s in STATS for m in METRICS[:2]}


def requests_replayed(case: dict) -> int:
    paced = case["rate"] != "inf" and "max_concurrency" not in case
    return min(case["requests"], PACED_REQUESTS) if paced else case["requests"]


def _lengths(case: dict):
    kind = case["lengths"]
    if kind == "uniform":
        return ({"dist": "uniform", "min_tokens": 1, "max_tokens": int(case["input_len"])},
                {"dist": "uniform", "min_tokens": 1, "max_tokens": int(case["output_len"])})
    mean_in = case.get("mean_input_tokens") or case["total_input_tokens"] / case["requests"]
    mean_out = case.get("mean_output_tokens") or case["total_output_tokens"] / case["requests"]
    if kind == "sharegpt":
        return tuple({"dist": "lognormal", "mean": float(m), "sigma": SHAREGPT_SIGMA, "min_tokens": 4,
                      "max_tokens": SHAREGPT_MAX_TOKENS} for m in (mean_in, mean_out))
    if kind == "constant":
        return tuple({"dist": "constant", "mean": float(round(m))} for m in (mean_in, mean_out))
    raise ValueError(f"case {case['id']}: unknown lengths {kind!r}")


def case_scenario(case: dict, seed: int = 0):
    """The scenario that replays ``case`` (its engine's defaults, the approximations in the YAML)."""
    from dspark_sim.scenario import Scenario

    prompt, output = _lengths(case)
    rate = case["rate"]
    deployment = {"tp": case["tp"], **case.get("deployment", {})}
    if "gpu_memory_fraction" in case:
        deployment["gpu_memory_fraction"] = case["gpu_memory_fraction"]
    engine = {"name": case["engine"], **case.get("engine_options", {})}
    workload = {"synthetic": {"num_requests": requests_replayed(case),
                              "rate_per_s": 1e9 if rate == "inf" else float(rate),
                              "prompt_tokens": prompt, "output_tokens": output},
                "domain": case.get("domain", "chat")}
    if "max_concurrency" in case:
        workload["max_concurrency"] = case["max_concurrency"]
    raw = {"name": case["id"], "model": case["model"], "gpu": case["gpu"], "engine": engine,
           "deployment": deployment, "seed": seed, "workload": workload,
           "speculation": case.get("speculation", {"method": "none"})}
    return Scenario.from_dict(raw, file=CASES)


__all__ = ["CASES", "METRICS", "PACED_REQUESTS", "case_scenario", "load_cases", "measured_keys", "metric_key",
           "requests_replayed"]
