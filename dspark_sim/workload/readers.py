"""Trace readers: Azure and BurstGPT CSV, Mooncake JSONL, streamed as RequestChunks (and the
Mooncake writer, :func:`write_mooncake`, that ``dspark-sim trace`` uses).

Formats (shared/traces/README.md):
  * azure: ``TIMESTAMP`` (wall clock, e.g. ``2023-11-16 18:17:03.9799600``; the
    2024 traces add a UTC offset), ``ContextTokens``, ``GeneratedTokens``.
  * burstgpt: ``Timestamp`` (seconds), ``Request tokens``, ``Response tokens``,
    optional ``Log Type``; columns are found by name. Failed requests (zero
    ``Response tokens``, zero ``Request tokens``, or a ``Log Type`` containing
    "fail") are dropped and counted in one :class:`TraceWarning`.
  * mooncake: one JSON object a line: ``timestamp`` (ms), ``input_length``,
    ``output_length``, ``hash_ids`` (ids of the prompt's 512-token blocks, equal between
    prompts that agree up to the block's end: the simulator's prefix cache reads them).

Every stream is shifted so its first request arrives at t = 0 s. Files are read
``chunk_rows`` rows at a time; each chunk is parsed with vectorised numpy.
"""
from __future__ import annotations

import csv
import json
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dspark_sim.errors import InputError
from dspark_sim.limits import MAX_ARRIVAL_S, MAX_REQUESTS, MAX_TIME_SCALE, MIN_TIME_SCALE
from dspark_sim.userfiles import parse_json, text_lines
from dspark_sim.workload.chunk import RequestChunk
from dspark_sim.workload.parse import counts, numbers, wallclock_ns

FORMATS = ("azure", "mooncake", "burstgpt")
LOG_TYPE = "Log Type"
MOONCAKE_KEYS = ("timestamp", "input_length", "output_length")


class TraceWarning(UserWarning):
    """Rows of a trace were skipped (e.g. failed BurstGPT requests)."""


@dataclass(frozen=True, slots=True)
class CsvColumns:
    """Column names of a CSV trace format and the clock unit of its time column."""

    time: str
    prompt: str
    output: str
    ticks_per_s: float

    @property
    def names(self) -> tuple[str, str, str]:
        return self.time, self.prompt, self.output


CSV_FORMATS = {
    "azure": CsvColumns("TIMESTAMP", "ContextTokens", "GeneratedTokens", ticks_per_s=1e9),
    "burstgpt": CsvColumns("Timestamp", "Request tokens", "Response tokens", ticks_per_s=1.0),
}
_MOONCAKE_TICKS_PER_S = 1e3


@dataclass(slots=True)
class _Dropped:
    """Rows skipped so far as failed requests (BurstGPT), reported once the stream ends."""

    rows: int = 0


@dataclass(slots=True)
class _Block:
    """Parsed rows before the shift to t = 0: times in the format's own clock ticks."""

    times: np.ndarray  # int64 ns (azure) or float64 s / ms
    prompt: np.ndarray
    output: np.ndarray
    lines: list[int]
    hash_ids: list[list[int]] | None = None


# -- public API -----------------------------------------------------------------
def read_trace(path, *, fmt: str | None = None, time_scale: float = 1.0,
               max_requests: int | None = None, chunk_rows: int = 65536) -> Iterator[RequestChunk]:
    """Stream the requests of a trace file as RequestChunks of at most ``chunk_rows`` rows.

    fmt: "azure" | "mooncake" | "burstgpt", or None to detect it from the header.
    time_scale: replay speed; 2.0 halves every arrival time.
    max_requests: stop after this many requests (None = the whole file).
    The header and arguments are checked now; rows are checked as they stream,
    and any bad row raises InputError naming its line and column.
    """
    path = Path(path)
    _check_within(path, "time_scale", time_scale, MIN_TIME_SCALE, MAX_TIME_SCALE, number=True)
    if max_requests is not None:
        _check_within(path, "max_requests", max_requests, 1, MAX_REQUESTS)
    _check_within(path, "chunk_rows", chunk_rows, 1, MAX_REQUESTS)
    fmt = _check_format(path, fmt) if fmt is not None else detect_format(path)
    dropped = _Dropped()
    if fmt == "mooncake":
        _first_line(path)  # a missing or empty file fails now, not at the first next()
        blocks = _mooncake_blocks(path, chunk_rows)
        ticks_per_s, time_col = _MOONCAKE_TICKS_PER_S, MOONCAKE_KEYS[0]
    else:
        cols = CSV_FORMATS[fmt]
        blocks = _csv_blocks(path, fmt, _csv_header(path, fmt), chunk_rows, dropped)
        ticks_per_s, time_col = cols.ticks_per_s, cols.time
    return _stream(blocks, path, ticks_per_s * time_scale, time_col, max_requests, dropped)


def detect_format(path) -> str:
    """"azure", "burstgpt" or "mooncake", from the CSV header or the first JSON line."""
    path = Path(path)
    first = _first_line(path)
    if first.lstrip().startswith("{"):
        return "mooncake"
    names = _split_header(first)
    scores = {fmt: sum(c in names for c in cols.names) for fmt, cols in CSV_FORMATS.items()}
    best = max(scores, key=scores.get)
    if scores[best] == 0:
        raise InputError(path, "header", first.strip(), "unknown trace format; expected an Azure CSV "
                         "(TIMESTAMP, ContextTokens, GeneratedTokens), a BurstGPT CSV (Timestamp, "
                         "Request tokens, Response tokens) or Mooncake JSON lines")
    return best


def count_requests(path, fmt: str | None = None) -> int:
    """Rows in the file (non-blank lines less the CSV header), without parsing them.

    For BurstGPT this counts failed rows too, so it bounds what read_trace yields.
    """
    path = Path(path)
    fmt = _check_format(path, fmt) if fmt is not None else detect_format(path)
    with text_lines(path) as lines:
        rows = sum(1 for line in lines if line.strip())
    return rows - (fmt != "mooncake")


# -- streaming ------------------------------------------------------------------
def _stream(blocks: Iterator[_Block], path: Path, ticks_per_replay_s: float, time_col: str,
            max_requests: int | None, dropped: _Dropped) -> Iterator[RequestChunk]:
    """Shift to t = 0, check ordering across chunks, scale, and stop at max_requests."""
    first = last = None
    total = 0
    for block in blocks:
        if not len(block.times):
            continue
        _check_sorted(block, last, path, time_col)
        if first is None:
            first = block.times[0]
        last = block.times[-1]
        arrival_s = ((block.times - first) / ticks_per_replay_s).astype(np.float64)
        _check_horizon(arrival_s, block, path, time_col)
        chunk = RequestChunk(arrival_s, block.prompt, block.output, block.hash_ids)
        if max_requests is not None and total + len(chunk) >= max_requests:
            yield chunk[:max_requests - total]
            total = max_requests
            break
        total += len(chunk)
        yield chunk
    if dropped.rows:
        warnings.warn(f"{path}: dropped {dropped.rows} failed requests (zero tokens or a failed "
                      f"{LOG_TYPE})", TraceWarning, stacklevel=2)
    if total == 0:
        raise InputError(path, None, None, "empty trace: no requests")


def _check_sorted(block: _Block, last, path: Path, time_col: str) -> None:
    times = block.times
    if last is not None and times[0] < last:
        raise InputError(path, f"line {block.lines[0]}: {time_col}", _tick_repr(times[0]),
                         "timestamps not sorted: earlier than the previous request")
    down = np.flatnonzero(np.diff(times) < 0)
    if down.size:
        i = int(down[0]) + 1
        raise InputError(path, f"line {block.lines[i]}: {time_col}", _tick_repr(times[i]),
                         "timestamps not sorted: earlier than the previous request")


def _check_horizon(arrival_s: np.ndarray, block: _Block, path: Path, time_col: str) -> None:
    """Arrivals stay on the simulated clock (limits.MAX_ARRIVAL_S after the first request)."""
    if arrival_s.size and arrival_s[-1] > MAX_ARRIVAL_S:
        i = int(np.argmax(arrival_s > MAX_ARRIVAL_S))
        raise InputError(path, f"line {block.lines[i]}: {time_col}", _tick_repr(block.times[i]),
                         f"arrives {arrival_s[i]:.3g} s after the first request at this time_scale, beyond "
                         f"the simulated clock's {MAX_ARRIVAL_S:g} s")


def _tick_repr(value) -> object:
    if isinstance(value, np.int64):
        return str(np.datetime64(int(value), "ns"))
    return float(value)


# -- CSV (Azure, BurstGPT) ---------------------------------------------------------
def _csv_header(path: Path, fmt: str) -> dict[str, int]:
    """Column positions by name; InputError naming the first missing column."""
    names = _split_header(_first_line(path))
    cols = CSV_FORMATS[fmt]
    for name in cols.names:
        if name not in names:
            raise InputError(path, name, None, f"missing column (format {fmt}); the header has "
                             f"{', '.join(names)}")
    wanted = cols.names + ((LOG_TYPE,) if fmt == "burstgpt" and LOG_TYPE in names else ())
    return {name: names.index(name) for name in wanted}


def _csv_blocks(path: Path, fmt: str, index: dict[str, int], chunk_rows: int,
                dropped: _Dropped) -> Iterator[_Block]:
    with text_lines(path) as lines_of:
        reader = csv.reader(lines_of)
        try:
            next(r for r in reader if not _is_blank(r))  # the header, checked by _csv_header
            while True:
                rows, lines = [], []
                for row in reader:
                    if not _is_blank(row):
                        rows.append(row)
                        lines.append(reader.line_num)
                        if len(rows) == chunk_rows:
                            break
                if not rows:
                    return
                yield _csv_block(rows, lines, fmt, index, path, dropped)
        except csv.Error as err:
            raise InputError(path, f"line {reader.line_num}", None, f"malformed CSV: {err}") from None


def _csv_block(rows: list[list[str]], lines: list[int], fmt: str, index: dict[str, int],
               path: Path, dropped: _Dropped) -> _Block:
    cols = CSV_FORMATS[fmt]
    text = {name: _column(rows, lines, i, name, path) for name, i in index.items()}
    if fmt == "azure":
        return _Block(wallclock_ns(text[cols.time], lines, cols.time, path),
                      counts(text[cols.prompt], lines, cols.prompt, path, minimum=1),
                      counts(text[cols.output], lines, cols.output, path, minimum=1), lines)
    times = numbers(text[cols.time], lines, cols.time, path)
    prompt = counts(text[cols.prompt], lines, cols.prompt, path, minimum=0)
    output = counts(text[cols.output], lines, cols.output, path, minimum=0)
    keep = (prompt > 0) & (output > 0)
    if LOG_TYPE in text:
        keep &= np.array(["fail" not in s.lower() for s in text[LOG_TYPE]], dtype=bool)
    if keep.all():
        return _Block(times, prompt, output, lines)
    dropped.rows += int((~keep).sum())
    kept_lines = [line for line, k in zip(lines, keep) if k]
    return _Block(times[keep], prompt[keep], output[keep], kept_lines)


def _column(rows: list[list[str]], lines: list[int], i: int, name: str, path: Path) -> list[str]:
    try:
        return [row[i] for row in rows]
    except IndexError:
        j = next(j for j, row in enumerate(rows) if len(row) <= i)
        raise InputError(path, f"line {lines[j]}: {name}", None,
                         f"row has {len(rows[j])} fields, too few for this column") from None


# -- Mooncake JSONL ----------------------------------------------------------------
def _mooncake_blocks(path: Path, chunk_rows: int) -> Iterator[_Block]:
    with text_lines(path) as text_of:
        rows, lines = [], []
        for number, text in enumerate(text_of, start=1):
            if not text.strip():
                continue
            rows.append(parse_json(text, path, f"line {number}"))
            lines.append(number)
            if len(rows) == chunk_rows:
                yield _mooncake_block(rows, lines, path)
                rows, lines = [], []
        if rows:
            yield _mooncake_block(rows, lines, path)


def _mooncake_block(rows: list, lines: list[int], path: Path) -> _Block:
    for row, line in zip(rows, lines):
        if not isinstance(row, dict):
            raise InputError(path, f"line {line}", row, "expected a JSON object")
    time_key, prompt_key, output_key = MOONCAKE_KEYS
    hash_ids = [row.get("hash_ids", []) for row in rows]
    for ids, line in zip(hash_ids, lines):
        if not isinstance(ids, list) or not all(type(x) is int for x in ids):
            raise InputError(path, f"line {line}: hash_ids", ids, "expected a list of integers")
    return _Block(numbers(_field(rows, lines, time_key, path, (int, float)), lines, time_key, path),
                  counts(_field(rows, lines, prompt_key, path, int), lines, prompt_key, path, minimum=1),
                  counts(_field(rows, lines, output_key, path, int), lines, output_key, path, minimum=1),
                  lines, hash_ids)


def _field(rows: list[dict], lines: list[int], key: str, path: Path, types) -> list:
    """Every row's ``key``, each a JSON value of ``types`` (never true or false: JSON's booleans are
    not numbers, and a token count is an integer, as a scenario's YAML wants it: 1e3 is not one)."""
    try:
        values = [row[key] for row in rows]
    except KeyError:
        line = next(line for row, line in zip(rows, lines) if key not in row)
        raise InputError(path, f"line {line}: {key}", None, "missing key") from None
    for value, line in zip(values, lines):
        if isinstance(value, bool) or not isinstance(value, types):
            raise InputError(path, f"line {line}: {key}", value,
                             "expected an integer" if types is int else "expected a finite number")
    return values


def write_mooncake(path, chunks) -> int:
    """Write the requests of ``chunks`` (RequestChunks) as a Mooncake trace: one JSON object a
    line, ``timestamp`` in whole milliseconds, ``input_length``, ``output_length`` and
    ``hash_ids`` (empty when a chunk has none). Written atomically; returns the requests."""
    from dspark_sim.metrics.outdir import atomic_write_lines

    count = [0]

    def lines():
        for chunk in chunks:
            ids = chunk.hash_ids if chunk.hash_ids is not None else [[]] * len(chunk)
            ms = np.rint(chunk.arrival_s * _MOONCAKE_TICKS_PER_S).astype(np.int64).tolist()
            rows = zip(ms, chunk.prompt_tokens.tolist(), chunk.output_tokens.tolist(), ids)
            yield "".join(json.dumps(dict(zip(MOONCAKE_KEYS + ("hash_ids",), row)), separators=(",", ":")) + "\n"
                          for row in rows)
            count[0] += len(chunk)
    atomic_write_lines(path, lines())
    return count[0]


# -- shared checks -------------------------------------------------------------------
def _first_line(path: Path) -> str:
    """The first non-blank line; InputError for a missing, unreadable or empty file."""
    with text_lines(path) as lines:
        for line in lines:
            if line.strip():
                return line.rstrip("\r\n")
    raise InputError(path, None, None, "empty trace: no header and no requests")


def _is_blank(row: list[str]) -> bool:
    return not row or (len(row) == 1 and not row[0].strip())


def _split_header(line: str) -> list[str]:
    return [name.strip() for name in next(csv.reader([line]))]


def _check_format(path: Path, fmt) -> str:
    if not isinstance(fmt, str) or fmt.lower() not in FORMATS:
        raise InputError(path, "format", fmt, f"unknown trace format; expected one of {', '.join(FORMATS)}")
    return fmt.lower()


def _check_within(path: Path, key: str, value, low: float, high: float, *, number: bool = False) -> None:
    kinds = (int, float) if number else (int,)
    if isinstance(value, bool) or not isinstance(value, kinds) or not low <= value <= high:
        kind = "number" if number else "integer"
        raise InputError(path, key, value, f"must be a {kind} in [{low:g}, {high:g}]")
