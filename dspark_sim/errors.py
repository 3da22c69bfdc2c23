"""The errors users see, each as a single line: bad input (exit 2), an internal fault (a bug or
a GPU fault: exit 1), a stop by SIGINT or SIGTERM (exit 130 or 143), and the command-line parser that
keeps to one line."""
from __future__ import annotations

import argparse
import reprlib
import signal
import sys
from contextlib import contextmanager
from pathlib import Path

EXIT_INPUT, EXIT_BUG, EXIT_SIGINT, EXIT_SIGTERM = 2, 1, 128 + signal.SIGINT, 128 + signal.SIGTERM
EXIT_DEVICE = 1


class InputError(Exception):
    """Bad user input: names the file, the key (or column/line) and the value.

    The CLI prints ``str(err)`` on one line and exits with code 2, so every
    message must be self-contained and free of newlines.
    """

    def __init__(self, file: str | Path | None, key: str | None, value: object, why: str):
        self.file = str(file) if file is not None else None
        self.key = key
        self.value = value
        self.why = why
        # args keep the fields so copies (simpy re-raises a copy, pickling) rebuild the same error
        super().__init__(file, key, value, why)

    def __str__(self) -> str:
        where = self.file or "<input>"
        value = "" if self.value is None else f"={_short(self.value)}"
        if not self.key:
            return _one_line(f"{where}: {value.lstrip('=')}{': ' if value else ''}{self.why}")
        return _one_line(f"{where}: {_cut(str(self.key), MAX_KEY_CHARS)}{value}: {self.why}")


# What one error line shows at most: a key (a user's YAML may hold any), and the whole line.
MAX_KEY_CHARS, MAX_LINE_CHARS = 120, 1000


def _one_line(text: str) -> str:
    """``text`` with every line boundary (``\\r``, ``\\n``, ``\\u2028``... as ``str.splitlines`` knows
    them) turned into a space (a key or file name may hold any of them), cut to MAX_LINE_CHARS."""
    return _cut(" ".join(text.splitlines()), MAX_LINE_CHARS)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _bounded_repr() -> reprlib.Repr:
    r = reprlib.Repr()
    r.maxlevel, r.maxlist, r.maxtuple, r.maxdict, r.maxset = 3, 8, 8, 6, 6
    r.maxstring = r.maxlong = r.maxother = 80
    return r


_REPR = _bounded_repr()


def _short(value: object, limit: int = 80) -> str:
    """``repr(value)`` cut to ``limit`` characters, rendering no more than it shows: a nested value
    (a YAML alias bomb expands to billions of items) is walked a few levels and items deep, and a
    huge integer is named by its size (Python will not print one of more than 4,300 digits)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 256:
        text = f"<an integer of {int(value.bit_length() * 0.30103) + 1} digits>"
    else:
        text = _REPR.repr(value)
    return _cut(text, limit)


def os_why(err: OSError) -> str:
    """The reason of an OSError in a few words ("No such file or directory", "Too many levels of
    symbolic links"), without the paths Python appends: the InputError names the file."""
    return err.strerror or type(err).__name__


class InternalError(Exception):
    """A result that cannot happen (negative latency, KV above capacity, tokens lost): a bug in
    dspark-sim, never bad input. The message says what broke; no number is returned."""

    def __init__(self, what: str):
        super().__init__(what)
        self.what = what

    def __str__(self) -> str:
        return (f"internal error: {self.what}. This is a bug in dspark-sim, not in your input; please report "
                "it with the command and the files it read").replace("\n", " ")


class DeviceFault(Exception):
    """The GPU failed under a command (a CUDA error): one line naming what it was running, exit
    code 1, nothing written."""

    def __init__(self, what: str):
        super().__init__(what)
        self.what = what

    def __str__(self) -> str:
        return _one_line(self.what)


class Terminated(BaseException):
    """SIGTERM, raised where the process is so that ``finally`` blocks and atomic outputs clean up."""


_PENDING: list[type[BaseException]] = []  # the stop a signal asked for, until the command returns


def _raise_stop(signum, frame):
    signal.signal(signum, signal.SIG_IGN)  # a second signal must not cut the clean-up short
    stop = Terminated if signum == signal.SIGTERM else KeyboardInterrupt
    _PENDING.append(stop)
    raise stop()


def raise_if_stopped() -> None:
    """Raise the stop a signal asked for again: the handler's exception is lost when the signal
    lands in a finalizer (Python prints such exceptions and goes on). Long loops call this."""
    if _PENDING:
        raise _PENDING[0]()


@contextmanager
def stops_deferred():
    """SIGINT and SIGTERM recorded, not raised, inside the block: the work raises the stop at its
    own safe points (:func:`raise_if_stopped`, which the simulator's loop calls), and the block's
    end raises one still pending. For library code that a stop raised at any line would leave
    half-done (Optuna's trial bookkeeping: a stop inside it ends in Optuna's own traceback)."""
    def record(signum, frame):
        signal.signal(signum, signal.SIG_IGN)  # a second signal must not cut the clean-up short
        _PENDING.append(Terminated if signum == signal.SIGTERM else KeyboardInterrupt)
    try:
        previous = {sig: signal.signal(sig, record) for sig in (signal.SIGINT, signal.SIGTERM)}
    except ValueError:  # not the main thread: leave the signals to whoever owns the process
        previous = {}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    raise_if_stopped()


class ArgumentParser(argparse.ArgumentParser):
    """argparse, except that a bad command line is one ``error:`` line naming the flag and exit
    code 2 (argparse's usage block is what ``--help`` is for)."""

    def error(self, message: str):
        self.exit(EXIT_INPUT, f"error: {self.prog}: {message}\n".replace("\n", " ").rstrip() + "\n")


def run_reporting_errors(fn, *args, interrupted: str = "interrupted; nothing written",
                         program: str | None = None) -> int:
    """Call a command; bad input becomes one ``error:`` line on stderr and exit code 2 (an error
    about no file, a flag's, names ``program``), and so does an OSError the system raised on a
    path (a full or read-only disk); a bug one ``error: internal error`` line and exit code 1.
    SIGINT and SIGTERM unwind the command (its temporary outputs are removed on the way) and
    exit with 130 and 143."""
    try:
        previous = {sig: signal.signal(sig, _raise_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    except ValueError:  # not the main thread: leave the signals to whoever owns the process
        previous = {}
    try:
        return fn(*args)
    except InputError as err:
        if err.file is None and program is not None:
            err = InputError(program, err.key, err.value, err.why)
        print(f"error: {err}", file=sys.stderr)
        return EXIT_INPUT
    except InternalError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_BUG
    except DeviceFault as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_DEVICE
    except OSError as err:  # the system refused a path (no space left, a read-only disk): not a bug
        print(f"error: {InputError(err.filename or program, None, None, os_why(err))}", file=sys.stderr)
        return EXIT_INPUT
    except KeyboardInterrupt:
        print(interrupted, file=sys.stderr)
        return EXIT_SIGINT
    except Terminated:
        print(interrupted.replace("interrupted", "terminated"), file=sys.stderr)
        return EXIT_SIGTERM
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        _PENDING.clear()
