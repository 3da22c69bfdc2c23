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
from dspark_sim.userfiles import read_text


class _DuplicateKey(yaml.YAMLError):
    def __init__(self, key, line: int):
        super().__init__(key, line)
        self.key, self.line = key, line


class _TooLarge(yaml.YAMLError):
    def __init__(self, why: str, line: int | None):
        super().__init__(why, line)
        self.why, self.line = why, line


# A YAML document's bounds, checked before it is built into Python values: its nesting, and the
# values it holds once every alias (*name) is expanded. A scenario nests 4 levels and holds ~50
# values; a 780-byte "billion laughs" file names billions of values through aliases.
MAX_YAML_DEPTH = 64
MAX_YAML_VALUES = 1_000_000


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, except that a key given twice in one mapping is an error
    (YAML requires unique keys; PyYAML would keep the last silently), and that a document
    nested deeper than MAX_YAML_DEPTH is refused while it is composed."""

    _depth = 0

    def compose_node(self, parent, index):
        self._depth += 1
        try:
            if self._depth > MAX_YAML_DEPTH:
                raise _TooLarge(f"nested more than {MAX_YAML_DEPTH} levels deep", self.peek_event().start_mark.line + 1)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

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


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return list(node.value) if isinstance(node, yaml.SequenceNode) else []


def _check_expanded(root: yaml.Node) -> None:
    """Raise _TooLarge when the node graph, its aliases expanded, holds more than MAX_YAML_VALUES
    values, nests deeper than MAX_YAML_DEPTH, or contains itself. Each node is visited once
    (sizes and depths of shared nodes are kept), without recursion."""
    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    open_ = set()  # the nodes on the path from the root to the one being expanded
    stack = [(root, False)]
    while stack:
        node, closing = stack.pop()
        key = id(node)
        if closing:
            kids = _children(node)
            size[key] = 1 + sum(size[id(k)] for k in kids)
            depth[key] = 1 + max((depth[id(k)] for k in kids), default=0)
            open_.discard(key)
            line = node.start_mark.line + 1
            if size[key] > MAX_YAML_VALUES:
                raise _TooLarge(f"expands to more than {MAX_YAML_VALUES:,} values through YAML aliases (*name)", line)
            if depth[key] > MAX_YAML_DEPTH:
                raise _TooLarge(f"nested more than {MAX_YAML_DEPTH} levels deep once YAML aliases (*name) are "
                                "expanded", line)
            continue
        if key in size:
            continue
        if key in open_:
            raise _TooLarge("a YAML alias (*name) inside the value it names", node.start_mark.line + 1)
        open_.add(key)
        stack.append((node, True))
        stack.extend((k, False) for k in _children(node) if id(k) not in size)


def parse_yaml(text: str, path: str | Path | None) -> Any:
    """YAML text into Python values; malformed YAML, a duplicate key, or a document beyond the
    bounds above is one InputError naming ``path``."""
    try:
        return _load_bounded(text)
    except _DuplicateKey as err:
        raise InputError(path, f"line {err.line}: {err.key}", None, "duplicate key: given twice in one mapping") \
            from None
    except _TooLarge as err:
        raise InputError(path, f"line {err.line}" if err.line else None, None, err.why) from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark else None
        problem = getattr(err, "problem", None) or getattr(err, "reason", None) or "malformed YAML"
        raise InputError(path, where, None, f"malformed YAML: {problem}") from None
    except ValueError as err:  # an integer of more than 4,300 digits, a date out of range
        raise InputError(path, None, None, f"malformed YAML: {str(err).split(';')[0]}") from None


def _load_bounded(text: str) -> Any:
    """The document in ``text``, its node graph checked (:func:`_check_expanded`) before it is built."""
    loader = _UniqueKeyLoader(text)  # the reader refuses control characters here already
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expanded(node)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def load_yaml(path: str | Path) -> dict:
    """Read a YAML mapping (at most MAX_BYTES["yaml"]); any problem becomes one InputError line."""
    path = Path(path)
    data = parse_yaml(read_text(path, "yaml"), path)
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
