"""YAML mappings into self-checking dataclasses, with errors that name the file and the key.

The pattern every configuration follows: a frozen dataclass checks its own fields in
``__post_init__`` with the ``check_*`` helpers below, which raise :class:`InputError`
naming the field; ``from_dict`` reads a YAML mapping with :class:`Section` (which reports
unknown keys) and constructs through :func:`build`, which adds the file and the full key.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from dspark_sim.errors import InputError


class _DuplicateKey(yaml.YAMLError):
    def __init__(self, key, line: int):
        super().__init__(key, line)
        self.key, self.line = key, line


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, except that a key given twice in one mapping is an error
    (YAML requires unique keys; PyYAML would keep the last silently)."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # "<<: *base" merges may be overridden by the mapping's own keys
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
            except TypeError:
                continue  # an unhashable key: the base constructor reports it
            if duplicate:
                raise _DuplicateKey(key, key_node.start_mark.line + 1)
            seen.add(key)
        return super().construct_mapping(node, deep)


def parse_yaml(text: str, path: str | Path | None) -> Any:
    """YAML text into Python values; malformed YAML or a duplicate key is one InputError naming ``path``."""
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader)
    except _DuplicateKey as err:
        raise InputError(path, f"line {err.line}: {err.key}", None, "duplicate key: given twice in one mapping") \
            from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark else None
        problem = getattr(err, "problem", None) or "malformed YAML"
        raise InputError(path, where, None, f"malformed YAML: {problem}") from None


def load_yaml(path: str | Path) -> dict:
    """Read a YAML mapping; any problem becomes one InputError line."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise InputError(path, None, None, "file not found") from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as err:
        raise InputError(path, None, None, f"cannot read: {type(err).__name__}") from None
    data = parse_yaml(text, path)
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


@contextmanager
def located(file, key: str | None, names: dict[str, str] | None = None):
    """InputErrors raised inside without a file get ``file`` and the key ``key.field``.

    ``names`` maps a field to the name the user typed instead (a command-line flag).
    An error that already names a file (a nested file's own) passes unchanged.
    """
    try:
        yield
    except InputError as err:
        if err.file is not None:
            raise
        field = err.key or ""
        where = (names or {}).get(field.split(".")[0].split("[")[0])
        full = where if where else (f"{key}.{field}" if key and field else key or field or None)
        raise InputError(file, full, err.value, err.why) from None


def build(cls, kwargs: dict, file, key: str | None, names: dict[str, str] | None = None):
    """``cls(**kwargs)`` with its own checks' errors :func:`located` in ``file`` under ``key``."""
    with located(file, key, names):
        try:
            return cls(**kwargs)
        except TypeError as err:  # a value of a type no check anticipated
            raise InputError(None, None, kwargs, f"invalid settings: {err}") from None


def is_int(value: Any) -> bool:
    """An integer, not a bool (YAML's true is not 1)."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def is_real(value: Any) -> bool:
    """A finite real number, not a bool."""
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool) \
        and math.isfinite(value)


def check_int(value: Any, key: str, minimum: int | None = None, maximum: int | None = None,
              *, optional: bool = False) -> None:
    """An integer in [minimum, maximum] (or None when ``optional``)."""
    if value is None and optional:
        return
    if not is_int(value):
        raise InputError(None, key, value, "expected an integer")
    check_number(value, None, key, minimum=minimum, maximum=maximum)


def check_real(value: Any, key: str, minimum: float | None = None, maximum: float | None = None,
               *, strict_min: bool = False, optional: bool = False) -> None:
    """A finite number in its bounds (or None when ``optional``)."""
    if value is None and optional:
        return
    check_number(value, None, key, minimum=minimum, maximum=maximum, strict_min=strict_min)


def check_choice(value: Any, key: str, choices: tuple, *, optional: bool = False) -> None:
    """One of ``choices`` (or None when ``optional``)."""
    if value is None and optional:
        return
    if not isinstance(value, str):
        raise InputError(None, key, value, "expected a string")
    if value not in choices:
        raise InputError(None, key, value, f"expected one of {', '.join(choices)}")


def check_bool(value: Any, key: str) -> None:
    """True or false."""
    if not isinstance(value, bool):
        raise InputError(None, key, value, "expected true or false")


def require(ok: bool, key: str, value: Any, why: str) -> None:
    """An InputError naming ``key`` unless ``ok``."""
    if not ok:
        raise InputError(None, key, value, why)
