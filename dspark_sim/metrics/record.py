"""The run record: ``requests.csv`` and ``steps.csv``, the files every run leaves, simulated or served,
and their sidecar ``provenance.json`` (what the numbers rest on: cost model, acceptance, weights).

One row per finished request and one per engine step, with the same columns and number
formats whoever wrote them: the simulator (:mod:`dspark_sim.metrics.collector`) and the
real decoder (``dspark_sim.kernels.decoder.engine``) write through :class:`RecordWriter`;
``validate``, the fidelity comparison and its step replay read them as typed column sets,
:class:`RequestColumns` and :class:`StepColumns` (:func:`read_requests`, :func:`read_steps`,
:func:`read_record`). A step row names its work in the cost model's terms
(:class:`~dspark_sim.cost.base.StepWork`), so any run can be priced step by step.
"""
from __future__ import annotations

import csv
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, make_dataclass
from pathlib import Path

import numpy as np

from dspark_sim.errors import InputError
from dspark_sim.limits import MAX_TOKENS

# column -> format of its value; the order is the file's
REQUEST_FORMATS = {
    "request_id": "{}", "arrival_s": "{:.6f}", "prompt_tokens": "{}", "output_tokens": "{}", "domain": "{}",
    "first_scheduled_s": "{:.6f}", "first_token_s": "{:.6f}", "finish_s": "{:.6f}", "queue_delay_ms": "{:.3f}",
    "ttft_ms": "{:.3f}", "tpot_ms": "{:.4f}", "e2el_ms": "{:.3f}", "num_steps": "{}", "num_preemptions": "{}",
    "accepted_tokens": "{}",  # drafts the request had accepted and emitted (at most output_tokens - 1)
    "verified_drafts": "{}",
    "cached_tokens": "{}",  # prompt tokens its first prefill read from the prefix cache
    # "completed", or "rejected" on arrival with the reason (serving/admission.py); a rejected
    # request's times and latencies are nan
    "status": "{}", "reject_reason": "{}",
}
STEP_FORMATS = {
    "step": "{}", "start_s": "{:.6f}", "step_s": "{:.9f}", "running_reqs": "{}", "decode_reqs": "{}",
    "prefill_tokens": "{}", "verify_tokens": "{}", "budget_k": "{}",
    "accepted_tokens": "{}",  # tokens the decoding requests emitted (accepted drafts plus one each)
    "draft_s": "{:.9f}", "sched_s": "{:.9f}",
    # the step's work (StepWork): KV tokens of the decoding requests and their longest, prefill
    # requests and their attention pairs, sum of chunk * (cached + chunk / 2), and the longest
    # chunk (STEP_DEFAULTS: what a record written before it reads as)
    "decode_context_tokens": "{}", "decode_max_context": "{}", "prefill_reqs": "{}",
    "prefill_attn_tokens2": "{:.1f}", "prefill_longest": "{}",
    "replica": "{}",
    "evicted_blocks": "{}",  # prefix-cache blocks evicted to make room for the step
    "kv_tokens": "{}",  # KV cache the step holds on its replica, in tokens (at most its capacity)
    # when the engine's host read the step's tokens: the step's end, or later where the host was
    # still launching the next step (the decoder's overlapped loop); STEP_DEFAULTS before it
    "read_s": "{:.6f}",
}
REQUEST_COLUMNS = tuple(REQUEST_FORMATS)
COMPLETED = "completed"
# What a request row lacking the newer columns means (a record written before them).
REQUEST_DEFAULTS = {"status": COMPLETED, "reject_reason": ""}
# What a step row lacking the newer columns means: 0, unknown (the longest chunk: the mean one's;
# the host's read: the step's end)
STEP_DEFAULTS = {"prefill_longest": 0.0, "read_s": 0.0}
STEP_COLUMNS = tuple(STEP_FORMATS)
WORK_COLUMNS = ("decode_context_tokens", "decode_max_context", "prefill_reqs", "prefill_attn_tokens2")


def _printf(fmt: str) -> str:
    """A cell's format above as a printf-style one, which writes every value alike and formats
    faster ("{}" -> "%s", "{:.6f}" -> "%.6f")."""
    return "%s" if fmt == "{}" else "%" + fmt[2:-1]


_COLUMNS = {"requests": REQUEST_COLUMNS, "steps": STEP_COLUMNS}
_KEYS = {name: frozenset(cols) for name, cols in _COLUMNS.items()}
_CELLS = {name: tuple(map(_printf, formats.values()))
          for name, formats in (("requests", REQUEST_FORMATS), ("steps", STEP_FORMATS))}
_LINES = {name: ",".join(cells) for name, cells in _CELLS.items()}
REQUEST_LINE, STEP_LINE = _LINES["requests"], _LINES["steps"]
FLUSH_ROWS = 8192
PROVENANCE_FILE = "provenance.json"  # beside requests.csv and steps.csv


class RecordWriter:
    """Streams ``requests.csv`` and ``steps.csv`` into ``out_dir``, buffered in blocks of rows.

    It owns the files' column order: every method takes values by column name (each of
    ``REQUEST_COLUMNS`` or ``STEP_COLUMNS``, no other).
    """

    def __init__(self, out_dir: str | Path):
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        self._files, self._buffers = {}, {}
        self._lines: dict[tuple, str] = {}  # lines with constant columns written in
        for name, cols in _COLUMNS.items():
            f = open(out_dir / f"{name}.csv", "w", newline="")
            f.write(",".join(cols) + "\n")
            self._files[name], self._buffers[name] = f, []

    def request(self, **values) -> None:
        """One request's row, a value per column."""
        self._add("requests", [REQUEST_LINE % _ordered("requests", values)])

    def requests(self, **columns: Sequence | int | float | str) -> None:
        """Many requests' rows, a sequence per column; a column given as one value holds it in
        every row (formatted once)."""
        self._rows("requests", _ordered("requests", columns))

    def step(self, **values) -> None:
        """One step's row, a value per column."""
        self._add("steps", [STEP_LINE % _ordered("steps", values)])

    def steps(self, **columns: Sequence | int | float) -> None:
        """Many steps' rows, a sequence per column; a column given as one number holds it in
        every row (formatted once)."""
        self._rows("steps", _ordered("steps", columns))

    def _rows(self, name: str, columns: tuple) -> None:
        constants = tuple((i, c) for i, c in enumerate(columns) if not isinstance(c, (list, tuple, range)))
        if not constants:
            self._add(name, [_LINES[name] % row for row in zip(*columns)])
            return
        # the line with every constant column written in: fewer values to format per row
        line = self._lines.get((name, constants))
        if line is None:
            if len(self._lines) > 256:
                self._lines.clear()
            cells = list(_CELLS[name])
            for i, c in constants:
                cells[i] = (cells[i] % c).replace("%", "%%")
            line = self._lines[name, constants] = ",".join(cells)
        varying = [c for c in columns if isinstance(c, (list, tuple, range))]
        self._add(name, [line % row for row in zip(*varying)])

    def _add(self, name: str, lines: list[str]) -> None:
        buf = self._buffers[name]
        buf += lines
        if len(buf) >= FLUSH_ROWS:
            self._flush(name)

    def _flush(self, name: str) -> None:
        buf = self._buffers[name]
        if buf:
            self._files[name].write("\n".join(buf) + "\n")
        buf.clear()

    def close(self) -> None:
        """Write what is buffered and close both files."""
        for name, f in self._files.items():
            self._flush(name)
            f.close()
        self._files = {}


def _ordered(name: str, values: dict) -> tuple:
    """``values`` by column name as a tuple in the file's column order; a column missing or
    unknown is a fault of the caller."""
    cols = _COLUMNS[name]
    if len(values) == len(cols):
        try:
            return tuple(map(values.__getitem__, cols))
        except KeyError:
            pass
    raise ValueError(f"{name}.csv takes the columns {', '.join(cols)}; missing {sorted(_KEYS[name] - values.keys())}, "
                     f"unknown {sorted(values.keys() - _KEYS[name])}")


def write_record(out_dir: str | Path, requests: Iterable[dict], steps: Iterable[dict]) -> None:
    """Both files from rows given as mappings (a column missing from a step row is 0)."""
    writer = RecordWriter(out_dir)
    try:
        for row in requests:
            writer.request(**{c: row[c] if c not in REQUEST_DEFAULTS else row.get(c, REQUEST_DEFAULTS[c])
                              for c in REQUEST_COLUMNS})
        for row in steps:
            writer.step(**{c: row.get(c, 0) for c in STEP_COLUMNS})
    finally:
        writer.close()


def _length(cols) -> int:
    """Rows of a column set: the length of its first column given (0 with none)."""
    for name in cols.__slots__:
        column = getattr(cols, name)
        if column is not None:
            return len(column)
    return 0


def _column_set(name: str, columns: tuple[str, ...], doc: str) -> type:
    cls = make_dataclass(name, [(c, "np.ndarray | None", field(default=None)) for c in columns], frozen=True,
                         slots=True, namespace={"__len__": _length})
    cls.__module__, cls.__doc__ = __name__, doc
    return cls


# The numeric request columns; ``status`` and ``reject_reason`` are text (a reader keeps completed rows).
NUMERIC_REQUESTS = tuple(c for c in REQUEST_COLUMNS if c not in REQUEST_DEFAULTS)
RequestColumns = _column_set("RequestColumns", NUMERIC_REQUESTS, """Requests as columns, one attribute per
    numeric column of ``requests.csv`` (float64 arrays ``[N]``, ``domain`` the index into
    :data:`~dspark_sim.names.DOMAINS`), None for a column not held: a run record's completed
    requests (:func:`read_requests`), or the simulator's finished ones (``Collector.requests``).
    ``len()`` is the requests held.""")
StepColumns = _column_set("StepColumns", STEP_COLUMNS, """Steps as columns, one attribute per column of
    ``steps.csv`` (float64 arrays ``[S]``), None for a column not read (:func:`read_steps`).
    ``len()`` is the steps held.""")


def read_requests(path: Path, needs: tuple[str, ...], optional: tuple[str, ...] = (), *,
                  rejected: bool = False) -> RequestColumns:
    """The ``needs`` and ``optional`` columns of a ``requests.csv`` (see :func:`_read`); rows of
    rejected requests (a ``status`` other than completed) are skipped unless ``rejected``."""
    return RequestColumns(**_read(path, needs, optional, rejected))


def read_steps(path: Path, needs: tuple[str, ...], optional: tuple[str, ...] = ()) -> StepColumns:
    """The ``needs`` and ``optional`` columns of a ``steps.csv`` (see :func:`_read`); a needed
    column newer than the record (:data:`STEP_DEFAULTS`) reads as its default in every row."""
    newer = tuple(c for c in needs if c in STEP_DEFAULTS)
    cols = _read(path, tuple(c for c in needs if c not in STEP_DEFAULTS), optional + newer, True)
    rows = len(next(iter(cols.values()))) if cols else 0
    for c in newer:
        cols.setdefault(c, np.full(rows, STEP_DEFAULTS[c]))
    return StepColumns(**cols)


def _read(path: Path, needs: tuple[str, ...], optional: tuple[str, ...], rejected: bool) -> dict[str, np.ndarray]:
    """Numeric columns of a record file as float64 arrays by name; a missing file or needed column
    is an InputError, a missing ``optional`` column is left out."""
    from dspark_sim.userfiles import text_lines

    with text_lines(path) as lines_of:
        reader = csv.reader(lines_of)
        try:
            header = next(reader, None)
            if header is None:
                raise InputError(path, None, None, "empty file")
            for name in needs:
                if name not in header:
                    raise InputError(path, f"column {name}", None, "missing column")
            names = needs + tuple(n for n in optional if n in header)
            idx = [header.index(n) for n in names]
            status = header.index("status") if "status" in header and not rejected else None
            rows, lines = [], []
            for line, row in enumerate(reader, start=2):
                if len(row) != len(header):
                    raise InputError(path, f"line {line}", len(row), f"{len(header)} cells expected, as in the header")
                if status is None or row[status] == COMPLETED:
                    rows.append([row[i] for i in idx])
                    lines.append(line)
        except csv.Error as err:
            raise InputError(path, f"line {reader.line_num}", None, f"malformed CSV: {err}") from None
    out = {}
    for j, name in enumerate(names):
        out[name] = _numbers(path, name, [r[j] for r in rows], lines)
        _check_physical(path, name, out[name], lines)
    return out


def _numbers(path: Path, name: str, cells: list[str], lines: list[int]) -> np.ndarray:
    """A column's cells as float64 (a domain by its index into names.DOMAINS)."""
    if name == "domain":
        from dspark_sim.names import DOMAINS

        for cell, line in zip(cells, lines):
            if cell not in DOMAINS:
                raise InputError(path, f"line {line}: domain", cell, f"unknown domain; expected one of {DOMAINS}")
        return np.array([DOMAINS.index(c) for c in cells], dtype=np.float64)
    try:
        return np.array([float(c) for c in cells])
    except ValueError as err:
        raise InputError(path, f"column {name}", None, f"not numeric ({err})") from None


# What a completed request's columns may hold: (least value, NaN allowed). A file breaking them
# (a real engine's record included) describes no run that can happen.
_PHYSICAL = {"arrival_s": (0.0, False), "first_scheduled_s": (0.0, False), "first_token_s": (0.0, False),
             "finish_s": (0.0, False), "prompt_tokens": (1.0, False), "output_tokens": (1.0, False),
             "queue_delay_ms": (0.0, False), "ttft_ms": (0.0, False), "e2el_ms": (0.0, False),
             "tpot_ms": (0.0, True), "step_s": (0.0, False)}


def _check_physical(path: Path, name: str, values: np.ndarray, lines: list[int]) -> None:
    if name not in _PHYSICAL:
        return
    least, nan_ok = _PHYSICAL[name]
    bad = np.isinf(values) | (values < least) | (np.isnan(values) & (not nan_ok))
    if bad.any():
        i = int(np.argmax(bad))
        raise InputError(path, f"line {lines[i]}: {name}", float(values[i]),
                         f"must be a finite number >= {least:g}{' (or nan)' if nan_ok else ''}")


@dataclass(frozen=True, slots=True)
class Record:
    """A run's completed requests and its steps, the columns read."""

    requests: RequestColumns
    steps: StepColumns


# The request columns a record is held to when it has them (request_faults), and the
# step columns that count requests or tokens.
CHECKED_REQUESTS = ("request_id", "arrival_s", "first_token_s", "finish_s", "queue_delay_ms", "ttft_ms", "e2el_ms",
                    "prompt_tokens", "output_tokens")
STEP_COUNTS = ("running_reqs", "decode_reqs", "prefill_tokens", "verify_tokens", "accepted_tokens")


def read_record(run_dir: Path, request_columns: tuple[str, ...], step_columns: tuple[str, ...]) -> Record:
    """The named columns of ``run_dir``'s ``requests.csv`` and ``steps.csv`` (with the columns
    :func:`check_record` reads), held to what every run keeps, a real engine's included."""
    record = Record(read_requests(run_dir / "requests.csv", request_columns,
                                  tuple(c for c in CHECKED_REQUESTS if c not in request_columns)),
                    read_steps(run_dir / "steps.csv", step_columns,
                               tuple(c for c in STEP_COUNTS if c not in step_columns)))
    check_record(record, run_dir)
    return record


def check_record(record: Record, run_dir: Path) -> None:
    """A record no run can leave is one InputError: no completed request or no decode step (every
    metric would be NaN), a request id given twice, a request breaking
    :func:`request_faults`, a step count that is not a whole number."""
    requests, steps = record.requests, record.steps
    path = run_dir / "requests.csv"
    ids = requests.request_id
    n = len(requests)
    if n == 0:
        raise InputError(path, None, None, "no completed request: nothing to compare")
    name = (lambda i: f"request {_id(ids[i])}") if ids is not None else (lambda i: f"completed row {i + 1}")
    if ids is not None:
        unique, counts = np.unique(ids, return_counts=True)
        if (counts > 1).any():
            raise InputError(path, "request_id", _id(unique[counts > 1][0]), "given twice: request ids must be unique")
    for bad, what in request_faults(requests):
        if bad.any():
            raise InputError(path, name(int(np.argmax(bad))), None, what)
    path = run_dir / "steps.csv"
    for column in STEP_COUNTS:
        v = getattr(steps, column)
        if v is not None:
            bad = ~((v >= 0) & (v <= MAX_TOKENS * n) & (v == np.floor(v)))
            if bad.any():
                raise InputError(path, f"column {column}", float(v[np.argmax(bad)]), "not a whole count within bounds")
    if steps.decode_reqs is not None and not (steps.decode_reqs > 0).any():
        raise InputError(path, "decode_reqs", None, "no decode step: no inter-token latency or accept length")


_LATENCIES = (("ttft_ms", "TTFT"), ("e2el_ms", "E2E latency"), ("queue_delay_ms", "queue delay"))


def request_faults(req: RequestColumns) -> Iterator[tuple[np.ndarray, str]]:
    """(the requests breaking it, what it says) for each invariant of completed requests, over
    the columns ``req`` holds: latencies finite and non-negative; arrival <= first step <= first
    token <= finish; whole token counts in [1, MAX_TOKENS]; no more accepted drafts than the tokens
    decode steps emitted (the first token comes from the prompt), nor than were verified."""
    for name, label in _LATENCIES:
        if (values := getattr(req, name)) is not None:
            yield ~(np.isfinite(values) & (values >= 0)), f"a {label} is negative or not finite"
    arrival, finish = req.arrival_s, req.finish_s
    if arrival is not None:
        yield ~(np.isfinite(arrival) & (arrival >= 0)), "an arrival time is negative or not finite"
    if arrival is not None and finish is not None:
        yield ~(finish >= arrival), "a request finished before it arrived"
    if req.ttft_ms is not None and req.e2el_ms is not None:
        queue = 0.0 if req.queue_delay_ms is None else req.queue_delay_ms
        yield ~((queue <= req.ttft_ms) & (req.ttft_ms <= req.e2el_ms)), (
            "a request's first step, first token and finish are out of order (arrival <= first step <= "
            "first token <= finish)")
    if req.first_token_s is not None and arrival is not None and finish is not None:
        first = req.first_token_s
        yield ~((arrival <= first) & (first <= finish)), "a first token is before its arrival or after its finish"
    for name in ("prompt_tokens", "output_tokens"):
        if (count := getattr(req, name)) is not None:
            yield ~((count >= 1) & (count <= MAX_TOKENS) & (count == np.floor(count))), (
                f"{name} is not a whole number in [1, {MAX_TOKENS}]")
    if req.accepted_tokens is not None and req.output_tokens is not None:
        yield ~(req.accepted_tokens <= req.output_tokens - 1), (
            "a request counted more accepted drafts than the tokens its decode steps emitted")
    if req.accepted_tokens is not None and req.verified_drafts is not None:
        yield ~(req.accepted_tokens <= req.verified_drafts), "a request accepted more drafts than it verified"


def _id(value: float) -> int | float:
    return int(value) if float(value).is_integer() else float(value)


def write_provenance(out_dir: str | Path, block: dict) -> None:
    """The record's sidecar ``provenance.json`` (see :mod:`dspark_sim.provenance`), written atomically."""
    import json

    from dspark_sim.metrics.outdir import atomic_write_text

    atomic_write_text(Path(out_dir) / PROVENANCE_FILE, json.dumps(block, indent=2, sort_keys=True) + "\n")


def read_provenance(run_dir: str | Path) -> dict | None:
    """The record's ``provenance.json``, or None for a record written without one."""
    from dspark_sim.userfiles import read_json

    path = Path(run_dir) / PROVENANCE_FILE
    if not path.is_file():
        return None
    block = read_json(path)
    if not isinstance(block, dict):
        raise InputError(path, None, type(block).__name__, "must be a JSON object")
    return block
