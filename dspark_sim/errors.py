"""The one error type users see: bad input, reported as a single line."""
from __future__ import annotations

from pathlib import Path


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
            return f"{where}: {value.lstrip('=')}{': ' if value else ''}{self.why}".replace("\n", " ")
        return f"{where}: {self.key}{value}: {self.why}".replace("\n", " ")


def _short(value: object, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def run_reporting_errors(fn, *args, interrupted: str = "interrupted; nothing written") -> int:
    """Call a command; bad input becomes one ``error:`` line on stderr and exit code 2."""
    import sys

    try:
        return fn(*args)
    except InputError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(interrupted, file=sys.stderr)
        return 130
