"""Files a production engine's own tools write, read as the released code writes them.

* ``python -m sglang.bench_serving`` (``sglang.benchmark.serving.benchmark``, SGLang 0.5.23):
  one JSON object a line appended to ``--output-file``; ``--output-details`` adds the
  per-request lists ``input_lens``, ``output_lens``, ``ttfts`` (seconds), ``itls``.
  ``request_rate`` is a float (``Infinity`` for all at once) or ``"trace"``.
* ``vllm bench serve --save-result`` (``vllm/benchmarks/serve.py`` ``main_async``, vLLM
  0.33.0): one JSON object (``--append-result``: several, one a line);
  ``request_rate`` is a number or ``"inf"``; ``--save-detailed`` keeps ``input_lens``,
  ``output_lens``, ``ttfts``, ``itls`` and ``start_times``.
* SGLang's ``dspark_sps_profiler`` (``sglang/benchmark/dspark_sps_profiler.py``):
  ``<out>.records.jsonl`` (one line a server step: ``num_running_reqs``,
  ``num_verify_tokens``, ``step_time`` in seconds) and ``<out>.rounds.jsonl`` (one line a
  round: ``batch_size_per_rank``, ``batch_tokens``, ``steps_per_sec``).
* a plain step-time CSV: ``reqs``, ``step_s`` and optionally ``verify_tokens``,
  ``context`` (summed KV tokens of the step's requests).

Every reader returns the same two shapes, :class:`BenchRun` (a serving benchmark) and
:class:`StepRows` (timed steps); a file that is none of these is one :class:`InputError`.
"""
from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dspark_sim.errors import InputError
from dspark_sim.userfiles import parse_json, read_text

BENCH_FORMATS = ("sglang.bench_serving", "vllm bench serve")
STEP_FORMATS = ("dspark_sps_profiler records", "dspark_sps_profiler rounds", "step csv")
_BENCH_KEYS = ("completed", "total_input_tokens", "total_output_tokens", "duration", "median_ttft_ms",
               "median_tpot_ms", "output_throughput")


@dataclass(frozen=True)
class BenchRun:
    """One serving benchmark: what the client sent and what it measured (latencies in ms)."""

    source: str
    format: str
    request_rate: float  # requests a second; inf = all at once
    max_concurrency: int | None
    completed: int
    total_input_tokens: int
    total_output_tokens: int
    duration_s: float
    median_ttft_ms: float
    median_tpot_ms: float
    output_throughput: float
    input_lens: tuple[int, ...] | None = None
    output_lens: tuple[int, ...] | None = None
    start_times_s: tuple[float, ...] | None = None

    @property
    def detailed(self) -> bool:
        """Whether the file kept each request's lengths."""
        return self.input_lens is not None and self.output_lens is not None


@dataclass(frozen=True)
class StepRows:
    """Timed engine steps: running requests, target tokens, summed context, seconds."""

    source: str
    format: str
    reqs: np.ndarray
    verify_tokens: np.ndarray
    context: np.ndarray
    step_s: np.ndarray


def read_engine_file(path: str | Path) -> list[BenchRun] | StepRows:
    """The benchmark runs or timed steps of an engine-written file (format detected)."""
    path = Path(path)
    text = read_text(path, "json")
    if path.suffix.lower() == ".csv":
        return _step_csv(path, text)
    rows = _json_rows(path, text)
    first = rows[0]
    if "step_time" in first and "num_running_reqs" in first:
        return _sps_records(path, rows)
    if "steps_per_sec" in first and "batch_tokens" in first:
        return _sps_rounds(path, rows)
    if all(k in first for k in _BENCH_KEYS):
        fmt = "vllm bench serve" if "endpoint_type" in first or "model_id" in first else "sglang.bench_serving"
        return [_bench_run(path, fmt, row, i) for i, row in enumerate(rows)]
    missing = [k for k in _BENCH_KEYS if k not in first]
    raise InputError(path, "line 1", None, "not a bench_serving / vllm bench serve result (missing "
                     f"{', '.join(missing)}), dspark_sps_profiler records or rounds, or a step CSV")


def _json_rows(path: Path, text: str) -> list[dict]:
    """One JSON object, or one a line (JSONL, vLLM's --append-result)."""
    try:
        whole = json.loads(text)
        rows = whole if isinstance(whole, list) else [whole]
    except (json.JSONDecodeError, RecursionError):
        rows = [parse_json(line, path, f"line {n}") for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    if not rows:
        raise InputError(path, None, None, "empty file")
    for n, row in enumerate(rows, 1):
        if not isinstance(row, dict):
            raise InputError(path, f"line {n}", None, "expected a JSON object")
    return rows


def _number(path: Path, row: dict, key: str, where: str, *, minimum: float = 0.0, allow_inf: bool = False):
    value = row.get(key)
    if value in ("inf", "Infinity") and allow_inf:
        return math.inf
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value) \
            or (math.isinf(value) and not allow_inf) or value < minimum:
        raise InputError(path, f"{where}{key}", value, f"expected a number >= {minimum:g}")
    return value


def _lengths(path: Path, row: dict, key: str, where: str, n: int | None) -> tuple | None:
    values = row.get(key)
    if values is None:
        return None
    if not isinstance(values, list) or (n is not None and len(values) != n) \
            or any(isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0 for v in values):
        raise InputError(path, f"{where}{key}", None, "expected a list of numbers >= 0, one a request")
    return tuple(values)


def _bench_run(path: Path, fmt: str, row: dict, index: int) -> BenchRun:
    where = f"line {index + 1}: " if index else ""
    rate = row.get("request_rate")
    if rate == "trace":
        raise InputError(path, f"{where}request_rate", rate, "trace-timed runs are not replayed; "
                         "give a run with a request rate")
    rate = _number(path, row, "request_rate", where, allow_inf=True) if rate is not None else math.inf
    conc = row.get("max_concurrency")
    if conc is not None and (isinstance(conc, bool) or not isinstance(conc, int) or conc < 1):
        raise InputError(path, f"{where}max_concurrency", conc, "expected an integer >= 1 or null")
    completed = int(_number(path, row, "completed", where, minimum=1))
    ins = _lengths(path, row, "input_lens", where, None)
    outs = _lengths(path, row, "output_lens", where, None if ins is None else len(ins))
    if (ins is None) != (outs is None):
        raise InputError(path, f"{where}{'output_lens' if outs is None else 'input_lens'}", None,
                         "missing: the per-request lists come in pairs")
    starts = _lengths(path, row, "start_times", where, None if ins is None else len(ins))
    return BenchRun(
        source=str(path), format=fmt, request_rate=float(rate), max_concurrency=conc, completed=completed,
        total_input_tokens=int(_number(path, row, "total_input_tokens", where)),
        total_output_tokens=int(_number(path, row, "total_output_tokens", where, minimum=1)),
        duration_s=float(_number(path, row, "duration", where)),
        median_ttft_ms=float(_number(path, row, "median_ttft_ms", where)),
        median_tpot_ms=float(_number(path, row, "median_tpot_ms", where)),
        output_throughput=float(_number(path, row, "output_throughput", where)),
        input_lens=tuple(int(v) for v in ins) if ins is not None else None,
        output_lens=tuple(int(v) for v in outs) if outs is not None else None,
        start_times_s=tuple(float(v) for v in starts) if starts is not None else None)


def _steps(path: Path, fmt: str, reqs, tokens, context, step_s) -> StepRows:
    out = StepRows(str(path), fmt, np.asarray(reqs, dtype=np.int64), np.asarray(tokens, dtype=np.int64),
                   np.asarray(context, dtype=np.int64), np.asarray(step_s, dtype=np.float64))
    if not out.step_s.size:
        raise InputError(path, None, None, "no timed steps")
    return out


def _sps_records(path: Path, rows: list[dict]) -> StepRows:
    cols = {k: [] for k in ("num_running_reqs", "num_verify_tokens", "step_time")}
    for n, row in enumerate(rows, 1):
        for key in cols:
            cols[key].append(_number(path, row, key, f"line {n}: ", minimum=1 if key != "step_time" else 0))
        if cols["step_time"][-1] <= 0:
            raise InputError(path, f"line {n}: step_time", cols["step_time"][-1], "must be > 0")
    return _steps(path, STEP_FORMATS[0], cols["num_running_reqs"], cols["num_verify_tokens"],
                  [0] * len(rows), cols["step_time"])


def _sps_rounds(path: Path, rows: list[dict]) -> StepRows:
    reqs, tokens, step_s = [], [], []
    for n, row in enumerate(rows, 1):
        reqs.append(_number(path, row, "batch_size_per_rank", f"line {n}: ", minimum=1))
        tokens.append(_number(path, row, "batch_tokens", f"line {n}: ", minimum=1))
        sps = _number(path, row, "steps_per_sec", f"line {n}: ")
        if sps <= 0:
            raise InputError(path, f"line {n}: steps_per_sec", sps, "must be > 0")
        step_s.append(1.0 / sps)
    return _steps(path, STEP_FORMATS[1], reqs, tokens, [0] * len(rows), step_s)


def _step_csv(path: Path, text: str) -> StepRows:
    reader = csv.DictReader(text.splitlines())
    header = reader.fieldnames or []
    for column in ("reqs", "step_s"):
        if column not in header:
            raise InputError(path, column, None, f"missing column (have {', '.join(header) or 'none'})")
    cols = {k: [] for k in ("reqs", "verify_tokens", "context", "step_s")}
    for n, row in enumerate(reader, 2):
        for key in cols:
            raw = row.get(key)
            if raw in (None, "") and key in ("verify_tokens", "context"):
                cols[key].append(cols["reqs"][-1] if key == "verify_tokens" else 0)
                continue
            try:
                value = float(raw)
            except (TypeError, ValueError):
                raise InputError(path, f"line {n}: {key}", raw, "expected a number") from None
            low = 1 if key in ("reqs", "verify_tokens") else 0
            if not math.isfinite(value) or value < low or (key == "step_s" and value <= 0):
                raise InputError(path, f"line {n}: {key}", raw, f"expected a number {'>' if key == 'step_s' else '>='}"
                                 f" {low}")
            cols[key].append(value)
    return _steps(path, STEP_FORMATS[2], cols["reqs"], cols["verify_tokens"], cols["context"], cols["step_s"])


__all__ = ["BENCH_FORMATS", "STEP_FORMATS", "BenchRun", "StepRows", "read_engine_file"]
