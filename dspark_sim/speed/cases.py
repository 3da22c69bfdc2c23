"""The simulator's timed cases: the chat hour, the shipped code trace and synthetic traffic,
each without speculation and with DSpark, their targets (seconds on one core, peak MiB), and
a case cut to its first requests."""
from __future__ import annotations

import math
import platform
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


CODE_TRACE = ROOT / "examples" / "traces" / "azure_llm_2023_code.csv"


CHAT_HOUR = ROOT / "benchmarks" / "scenarios" / "chat_hour_h200.yaml"


DSPARK = {"method": "dspark", "block_size": 7, "scheduler": "production"}


TUNE_TRIALS = 200


TUNE_SLICES = "5,15"  # the tuner case's pruning: minutes of the chat hour a trial is first scored on


def chat_hour(speculation: dict) -> dict:
    """The committed chat hour (19,000 requests, ~4 million output tokens) with ``speculation``."""
    data = yaml.safe_load(CHAT_HOUR.read_text())
    return data | {"speculation": speculation}


def code_trace(speculation: dict) -> dict:
    """The shipped Azure 2023 code trace (8,819 requests) on one H200."""
    return {"name": "azure-code", "model": "qwen3-8b", "gpu": "h200",
            "workload": {"trace": str(CODE_TRACE), "domain": "code"},
            "deployment": {"max_running_requests": 256, "max_batched_tokens": 8192},
            "speculation": speculation, "slo": {"ttft_ms": 2000, "tpot_ms": 50}, "seed": 0}


def synthetic(n: int, speculation: dict) -> dict:
    """``n`` synthetic requests at 30 a second (a saturated replica), mixed domains."""
    return {"name": f"synthetic-{n}", "model": "qwen3-8b", "gpu": "h200",
            "workload": {"synthetic": {"num_requests": n, "rate_per_s": 30.0, "arrival": "poisson",
                                       "prompt_tokens": {"dist": "lognormal", "mean": 1000, "sigma": 1.0},
                                       "output_tokens": {"dist": "lognormal", "mean": 250, "sigma": 0.8}},
                         "domain": {"math": 0.4, "code": 0.4, "chat": 0.2}},
            "deployment": {"replicas": 1, "max_running_requests": 256, "max_batched_tokens": 8192},
            "speculation": speculation, "slo": {"ttft_ms": 2000, "tpot_ms": 50}, "seed": 0}


@dataclass(frozen=True)
class Case:
    """One timed run and its targets (seconds on one core, peak MiB)."""

    name: str
    label: str
    scenario: dict | None  # None: the tuner case
    target_s: float
    target_mib: float | None = None


CASES = {c.name: c for c in (
    Case("chat-none", "chat hour (19k req), none", chat_hour({"method": "none"}), 4.0),
    Case("chat-dspark", "chat hour (19k req), dspark production", chat_hour(DSPARK), 6.0),
    Case("code-none", "code trace (8,819 req), none", code_trace({"method": "none"}), 2.0),
    Case("code-dspark", "code trace (8,819 req), dspark production", code_trace(DSPARK), 2.0),
    Case("100k-none", "synthetic 100k req, none", synthetic(100_000, {"method": "none"}), 10.0),
    Case("100k-dspark", "synthetic 100k req, dspark production", synthetic(100_000, DSPARK), 10.0),
    Case("1m-dspark", "synthetic 1M req, dspark production", synthetic(1_000_000, DSPARK), 60.0, 1024.0),
    Case("tune-chat", "dspark-tune, 200 trials, chat hour, 2 workers", None, 900.0),
)}


GROUPS = {"default": ["chat-none", "chat-dspark", "code-none", "code-dspark", "100k-none", "100k-dspark"],
          "million": ["1m-dspark"], "tune": ["tune-chat"]}


def sliced(case: Case, requests: int) -> Case | None:
    """``case`` cut to its first ``requests`` requests (None where it is not synthetic)."""
    synthetic = (case.scenario or {}).get("workload", {}).get("synthetic")
    if synthetic is None:
        return None
    workload = case.scenario["workload"] | {"synthetic": synthetic | {"num_requests": requests}}
    what, method = case.label.rsplit(", ", 1)
    return Case(case.name, f"{what.split(' (')[0].removesuffix(' 100k req')}, first {requests:,} req, {method}",
                case.scenario | {"workload": workload}, math.inf)


def verdict(case: Case, r: dict) -> str:
    if math.isinf(case.target_s):
        return "slice"
    memory_ok = case.target_mib is None or r["peak_mib"] <= case.target_mib
    ok = r["wall_s"] <= case.target_s and memory_ok
    if case.scenario is None:  # the tuner: every trial within the target (it stops searching there)
        return "pass" if r["completed"] >= TUNE_TRIALS and r["wall_s"] <= case.target_s * 1.02 else "FAIL"
    if ok:
        return "pass"
    # on a loaded machine the CPU seconds say what one free core would take
    return "FAIL (cpu s within)" if r["cpu_s"] <= case.target_s and memory_ok else "FAIL"


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine()
