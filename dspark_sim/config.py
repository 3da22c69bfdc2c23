"""Small helpers that turn YAML mappings into validated values with clear errors."""
from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from dspark_sim.errors import InputError


def load_yaml(path: str | Path) -> dict:
    """Read a YAML mapping; any problem becomes one InputError line."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise InputError(path, None, None, "file not found") from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as err:
        raise InputError(path, None, None, f"cannot read: {type(err).__name__}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark else None
        problem = getattr(err, "problem", None) or "malformed YAML"
        raise InputError(path, where, None, f"malformed YAML: {problem}") from None
    if data is None:
        raise InputError(path, None, None, "empty file: expected a scenario mapping")
    if not isinstance(data, dict):
        raise InputError(path, None, type(data).__name__, "expected a YAML mapping at the top level")
    return data


class Section:
    """A YAML mapping read key by key; leftover keys are reported as unknown."""

    def __init__(self, data: Any, file: str | Path | None, key: str):
        if data is None:
            data = {}
        if not isinstance(data, Mapping):
            raise InputError(file, key, data, "expected a mapping")
        self.data, self.file, self.key = dict(data), file, key
        self._seen: set[str] = set()

    def path(self, name: str) -> str:
        return f"{self.key}.{name}" if self.key else name

    def raw(self, name: str, default: Any = None) -> Any:
        """The value at ``name``; an absent key or an explicit null gives ``default``."""
        self._seen.add(name)
        value = self.data.get(name)
        return default if value is None else value

    def has(self, name: str) -> bool:
        return self.data.get(name) is not None

    def number(self, name: str, default: float | None = None, *, minimum: float | None = None,
               maximum: float | None = None, strict_min: bool = False) -> float | None:
        value = self.raw(name, default)
        if value is None:
            return None
        return check_number(value, self.file, self.path(name), minimum=minimum, maximum=maximum,
                            strict_min=strict_min)

    def integer(self, name: str, default: int | None = None, *, minimum: int | None = None,
                maximum: int | None = None) -> int | None:
        value = self.raw(name, default)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise InputError(self.file, self.path(name), value, "expected an integer")
        check_number(value, self.file, self.path(name), minimum=minimum, maximum=maximum)
        return value

    def string(self, name: str, default: str | None = None, *, choices: tuple[str, ...] | None = None) -> str | None:
        value = self.raw(name, default)
        if value is None:
            return None
        if not isinstance(value, str):
            raise InputError(self.file, self.path(name), value, "expected a string")
        if choices is not None and value not in choices:
            raise InputError(self.file, self.path(name), value, f"expected one of {', '.join(choices)}")
        return value

    def boolean(self, name: str, default: bool = False) -> bool:
        value = self.raw(name, default)
        if not isinstance(value, bool):
            raise InputError(self.file, self.path(name), value, "expected true or false")
        return value

    def section(self, name: str) -> "Section":
        return Section(self.raw(name), self.file, self.path(name))

    def done(self) -> None:
        """Raise on the first key that nobody read."""
        for name in self.data:
            if name not in self._seen:
                raise InputError(self.file, self.path(str(name)), self.data[name], "unknown key")


def check_number(value: Any, file, key: str, *, minimum: float | None = None,
                 maximum: float | None = None, strict_min: bool = False) -> float:
    """A finite real number within bounds, or an InputError naming the key."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InputError(file, key, value, "expected a finite number")
    if minimum is not None and (value < minimum or (strict_min and value == minimum)):
        op = ">" if strict_min else ">="
        raise InputError(file, key, value, f"must be {op} {minimum}")
    if maximum is not None and value > maximum:
        raise InputError(file, key, value, f"must be <= {maximum}")
    return value
