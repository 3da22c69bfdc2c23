"""Reading the files a user names: bounded before anything is parsed, every failure one line.

A file read whole (a scenario, a search space, a calibration table or log, a JSON table) is
refused above the size its kind can take (:data:`MAX_BYTES`) before it is read; a file read
as a stream (a trace, a run record) has its lines bounded instead (:data:`MAX_LINE_CHARS`).
So no input, ``/dev/zero`` included, is read until memory runs out. Only regular files are
read: a device, a FIFO or a socket is refused. A missing file, a directory, a symbolic-link
loop, a permission problem, bytes that are not UTF-8 and JSON nested past the parser's depth
are each one :class:`~dspark_sim.errors.InputError` naming the file.
"""
from __future__ import annotations

import errno
import json
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from dspark_sim.errors import InputError, os_why

# The largest file of each kind read whole, in bytes: far above any real one, far below memory.
MAX_BYTES = {"yaml": 4 << 20, "table": 16 << 20, "json": 64 << 20, "log": 256 << 20}
KIND_NAMES = {"yaml": "YAML file", "table": "table", "json": "JSON file", "log": "log"}
# One line of a streamed file (a trace row, a record row), in bytes: a Mooncake row of a 1M-token prompt is ~20 kB.
MAX_LINE_CHARS = 4 << 20


def regular_file(path: str | Path) -> os.stat_result:
    """``path``'s status if it is a regular file (links followed); InputError saying what it is otherwise."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise InputError(path, None, None, "cannot read: file not found") from None
    except OSError as err:
        raise InputError(path, None, None, cannot_read(err)) from None
    if stat.S_ISDIR(st.st_mode):
        raise InputError(path, None, None, "is a directory, not a file")
    if not stat.S_ISREG(st.st_mode):
        raise InputError(path, None, None, "not a regular file (a device, FIFO or socket): give a file")
    return st


def resolved(path: str | Path, file=None, key: str | None = None) -> Path:
    """``path`` made absolute with its links followed; a link loop on the way is one InputError
    naming ``file`` and ``key`` (the place that named ``path``) instead of Python's RuntimeError."""
    try:
        return Path(path).resolve()
    except (RuntimeError, OSError):
        raise InputError(file if file is not None else path, key, str(path),
                         "a symbolic link on the way loops") from None


def existing_file(base: Path, value: str, file, key: str, missing: str = "file not found") -> Path:
    """The file ``value`` names, resolved against ``base``; InputError ``missing`` when there is none."""
    path = resolved(base / value, file, key)
    if path.is_file():
        return path
    if path.is_dir():
        raise InputError(file, key, value, "is a directory, not a file")
    if path.exists():
        raise InputError(file, key, value, "not a regular file (a device, FIFO or socket): give a file")
    raise InputError(file, key, value, missing)


def cannot_read(err: OSError) -> str:
    """Why a file could not be opened, in a few words."""
    if err.errno == errno.ELOOP:
        return "cannot read: a symbolic link on the way loops"
    if err.errno == errno.ENOTDIR:
        return "cannot read: a parent of it is a file, not a directory"
    return f"cannot read: {os_why(err)}"


def read_text(path: str | Path, kind: str) -> str:
    """The whole of a ``kind`` file (a key of :data:`MAX_BYTES`) as UTF-8 text (a BOM dropped)."""
    path = Path(path)
    cap = MAX_BYTES[kind]
    size = regular_file(path).st_size
    data = b""
    if size <= cap:
        try:
            with open(path, "rb") as fh:
                data = fh.read(cap + 1)  # the size may have grown since
        except OSError as err:
            raise InputError(path, None, None, cannot_read(err)) from None
    if size > cap or len(data) > cap:
        raise InputError(path, None, None, f"more than {cap >> 20} MiB, too large for a {KIND_NAMES[kind]}")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise InputError(path, f"line {line}", None, "not UTF-8 text") from None


@contextmanager
def text_lines(path: str | Path):
    """Open ``path`` (a regular file of UTF-8 text) and yield an iterator over its lines, line
    ends kept (as the csv module wants them) and a BOM dropped, each at most
    :data:`MAX_LINE_CHARS` bytes; a longer line or one that is not UTF-8 raises InputError naming it."""
    path = Path(path)
    regular_file(path)
    try:
        fh = open(path, "rb")
    except OSError as err:
        raise InputError(path, None, None, cannot_read(err)) from None
    with fh:
        yield _bounded_lines(fh, path)


def _bounded_lines(fh, path: Path) -> Iterator[str]:
    number = 0
    while True:
        try:
            raw = fh.readline(MAX_LINE_CHARS + 1)
        except OSError as err:
            raise InputError(path, f"line {number + 1}", None, cannot_read(err)) from None
        if not raw:
            return
        number += 1
        if len(raw) > MAX_LINE_CHARS:
            raise InputError(path, f"line {number}", None, f"longer than {MAX_LINE_CHARS:,} bytes")
        try:
            line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
        except UnicodeDecodeError:
            raise InputError(path, f"line {number}", None, "not UTF-8 text") from None
        yield line


def parse_json(text: str, path: str | Path, where: str | None = None):
    """JSON text into Python values; malformed JSON (``where`` defaults to its line), a number
    Python will not read (over 4,300 digits) or nesting deeper than the parser's recursion limit
    is one InputError."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise InputError(path, where or f"line {err.lineno}", None, f"not valid JSON: {err.msg}") from None
    except RecursionError:
        raise InputError(path, where, None, "not valid JSON: nested too deeply") from None
    except ValueError as err:
        raise InputError(path, where, None, f"not valid JSON: {str(err).split(';')[0]}") from None


def read_json(path: str | Path) -> object:
    """The decoded JSON of a file of at most MAX_BYTES["json"] (one InputError for any problem)."""
    return parse_json(read_text(path, "json"), path)
