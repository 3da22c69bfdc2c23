"""Reading what a user gives ``dspark-sim calibrate``: a confidence log or a table of acceptance numbers.

Log (CSV with a header, or JSONL), one row per request-step as an engine
records it, the whole block verified:
  CSV:   c1..cG (raw confidences in [0, 1]) or logit1..logitG (raw logits),
         and accepted (drafts accepted, 0..G) or accept_len (bonus included, 1..G+1);
  JSONL: {"confidences": [...]} or {"logits": [...]}, and "accepted" or "accept_len".
Table (CSV or YAML), numbers measured with the whole block verified:
  accepted length per dataset:    CSV columns dataset, accept_len[, domain];
                                  YAML accept_len: {gsm8k: 6.1, mychat: 3.2}, domains: {mychat: chat}
  acceptance by position:         CSV columns position, accept_rate (or conditional_rate)[, domain];
                                  YAML accept_rate: [0.74, 0.48, ...] or {math: [...], chat: [...]}
A dataset is a Table 1 name (its domain is known), a domain name, or any name
with its domain given. Every problem is an InputError naming file, key, value.
"""
from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dspark_sim.acceptance.paper import DATASETS, FIT_POSITIONS
from dspark_sim.acceptance.preset import MAX_POSITIONS
from dspark_sim.config import parse_yaml
from dspark_sim.errors import InputError
from dspark_sim.names import DOMAINS
from dspark_sim.userfiles import parse_json, read_text

MIN_LOG_ROWS = 100
_CLIP = 1e-6  # confidences of exactly 0 or 1 have no logit


@dataclass(frozen=True, slots=True)
class ConfidenceLog:
    """Raw confidence logits [n, block_size] and accepted drafts [n] (int64) of n request-steps."""

    logits: np.ndarray
    accepted: np.ndarray


@dataclass(frozen=True, slots=True)
class AcceptanceTable:
    """Per domain either a mean accepted length (bonus included) or an unconditional curve by position."""

    accept_len: dict[str, float]
    accept_curve: dict[str, np.ndarray]


def read_log(path: str | Path) -> ConfidenceLog:
    """A confidence log from CSV or JSONL (by extension)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".csv":
        rows = [(f"line {i}", r) for i, r in enumerate(_read_csv(path, "log"), start=2)]
    elif suffix in (".jsonl", ".ndjson"):
        rows = list(_read_jsonl(path))
    else:
        raise InputError(path, None, suffix or path.name, "a log must be .csv or .jsonl")
    if len(rows) < MIN_LOG_ROWS:
        raise InputError(path, None, len(rows), f"need at least {MIN_LOG_ROWS} request-steps")
    parsed = [_log_row(path, where, row) for where, row in rows]
    block_size = len(parsed[0][0])
    for (where, _), (logits, _) in zip(rows, parsed):
        if len(logits) != block_size:
            raise InputError(path, where, len(logits), f"confidences for {block_size} positions expected")
    accepted = np.array([p[1] for p in parsed], dtype=np.int64)
    _check_each_position_decides(path, accepted, block_size)
    return ConfidenceLog(np.array([p[0] for p in parsed]), accepted)


def _check_each_position_decides(path: Path, accepted: np.ndarray, block_size: int) -> None:
    """Every position must see both outcomes among the steps that reached it: a position always
    accepted (or never) has a conditional acceptance of exactly 1 (or 0), which no preset has."""
    for k in range(1, block_size + 1):
        reached, passed = int((accepted >= k - 1).sum()), int((accepted >= k).sum())
        if passed == 0 or passed == reached:
            outcome = "accepted" if passed else "rejected"
            raise InputError(path, f"position {k}", None,
                             f"the draft was {outcome} in all {reached} request-steps that reached it; fitting "
                             f"acceptance needs both outcomes at every position (log more steps)")


def read_table(path: str | Path) -> AcceptanceTable:
    """An acceptance table from CSV or YAML (by extension)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".csv":
        return _table_from_csv(path, _read_csv(path, "table"))
    if suffix in (".yaml", ".yml"):
        doc = parse_yaml(read_text(path, "table"), path)
        if not isinstance(doc, dict):
            raise InputError(path, None, type(doc).__name__, "must be a mapping")
        return _table_from_yaml(path, doc)
    raise InputError(path, None, suffix or path.name, "a table must be .csv, .yaml or .yml")


def _read_csv(path: Path, kind: str) -> list[dict]:
    """The rows of a CSV file (a ``kind`` of :data:`dspark_sim.userfiles.MAX_BYTES`) by lower-case column."""
    try:
        rows = list(csv.DictReader(io.StringIO(read_text(path, kind), newline="")))
    except csv.Error as err:
        raise InputError(path, None, None, f"not valid CSV: {err}") from None
    if not rows:
        raise InputError(path, None, None, "no data rows")
    return [{k.strip().lower(): (v or "").strip() for k, v in r.items() if k is not None} for r in rows]


def _read_jsonl(path: Path):
    for i, line in enumerate(read_text(path, "log").splitlines(), start=1):
        if not line.strip():
            continue
        row = parse_json(line, path, f"line {i}")
        if not isinstance(row, dict):
            raise InputError(path, f"line {i}", row, "each line must be a JSON object")
        yield f"line {i}", row


def _log_row(path: Path, where: str, row: dict) -> tuple[np.ndarray, int]:
    """(raw logits, accepted drafts) of one log row, CSV or JSONL."""
    conf, logits = row.get("confidences"), row.get("logits")
    if conf is None and logits is None:
        conf, logits = _numbered(row, "c"), _numbered(row, "logit")
    if (conf is None) == (logits is None):
        raise InputError(path, where, None, "give either confidences (c1..cG) or logits (logit1..logitG)")
    given = conf if conf is not None else logits
    if not isinstance(given, list):
        raise InputError(path, where, given, "confidences or logits must be a list")
    values = _floats(path, where, given)
    if not 1 <= len(values) <= MAX_POSITIONS:
        raise InputError(path, where, len(values), f"1..{MAX_POSITIONS} positions expected")
    if conf is not None:
        if np.any((values < 0) | (values > 1)):
            raise InputError(path, where, conf, "confidences must be in [0, 1]")
        values = np.log(np.clip(values, _CLIP, 1 - _CLIP)) - np.log1p(-np.clip(values, _CLIP, 1 - _CLIP))
    return values, _accepted(path, where, row, len(values))


def _numbered(row: dict, prefix: str) -> list | None:
    """Columns prefix1, prefix2, ... of a CSV row, in order; None if there is no prefix1."""
    out, k = [], 1
    while f"{prefix}{k}" in row:
        out.append(row[f"{prefix}{k}"])
        k += 1
    return out or None


def _floats(path: Path, where: str, values) -> np.ndarray:
    try:
        out = np.array([float(v) for v in values], dtype=np.float64)
    except (TypeError, ValueError):
        raise InputError(path, where, values, "not numbers") from None
    if not np.all(np.isfinite(out)):
        raise InputError(path, where, values, "not finite")
    return out


def _accepted(path: Path, where: str, row: dict, block_size: int) -> int:
    """Accepted drafts of a row from 'accepted' (0..block_size) or 'accept_len' (1..block_size+1)."""
    has_acc, has_len = row.get("accepted") not in (None, ""), row.get("accept_len") not in (None, "")
    if has_acc == has_len:
        raise InputError(path, where, None, "give exactly one of accepted, accept_len")
    key = "accepted" if has_acc else "accept_len"
    try:
        value = float(row[key])
    except (TypeError, ValueError):
        raise InputError(path, f"{where} {key}", row[key], "not a number") from None
    accepted = value - (0 if has_acc else 1)
    if accepted != int(accepted) or not 0 <= accepted <= block_size:
        raise InputError(path, f"{where} {key}", row[key], f"must be a whole number of drafts in 0..{block_size}")
    return int(accepted)


def _check_domain(path: Path, key: str, domain: str) -> str:
    if domain not in DOMAINS:
        raise InputError(path, key, domain, f"unknown domain; known: {', '.join(DOMAINS)}")
    return domain


def _domain_of(path: Path, key: str, name: str, given: str | None) -> str:
    """The domain of a dataset: as given, else the name itself if a domain, else Table 1's."""
    if given:
        return _check_domain(path, key, given)
    if name in DOMAINS:
        return name
    if name in DATASETS:
        return DATASETS[name]
    raise InputError(path, key, name, f"unknown dataset; give its domain ({', '.join(DOMAINS)})")


def _accept_len(path: Path, key: str, value) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise InputError(path, key, value, "not a number") from None
    if not 1.0 < out < 1.0 + FIT_POSITIONS:
        raise InputError(path, key, value, f"an accepted length (bonus included) in (1, {1 + FIT_POSITIONS}): "
                         f"the preset's block has {FIT_POSITIONS} drafts, and a length of {1 + FIT_POSITIONS} "
                         "(every draft always accepted) is no acceptance curve")
    return out


def _curve(path: Path, key: str, values, conditional: bool) -> np.ndarray:
    """Unconditional acceptance by position from a list of rates (conditional ones are multiplied up)."""
    if not isinstance(values, (list, tuple)) or not 1 <= len(values) <= MAX_POSITIONS:
        raise InputError(path, key, values, f"a list of 1..{MAX_POSITIONS} rates")
    rates = _floats(path, key, values)
    if np.any((rates <= 0) | (rates >= 1)):
        raise InputError(path, key, values, "rates must be in (0, 1)")
    curve = np.cumprod(rates) if conditional else rates
    if np.any(np.diff(curve) >= 0):
        raise InputError(path, key, values, "unconditional acceptance cannot rise with position, nor stay level "
                         "(a draft after one always accepted)")
    return curve


def _table_from_csv(path: Path, rows: list[dict]) -> AcceptanceTable:
    cols = set(rows[0])
    if {"dataset", "accept_len"} <= cols:
        lens: dict[str, list[float]] = {}
        seen: dict[str, int] = {}
        for i, r in enumerate(rows, start=2):
            _once(path, seen, (r["dataset"].lower(), r.get("domain", "").lower()), f"line {i} dataset", i)
            domain = _domain_of(path, f"line {i} dataset", r["dataset"].lower(), r.get("domain", "").lower())
            lens.setdefault(domain, []).append(_accept_len(path, f"line {i} accept_len", r["accept_len"]))
        return AcceptanceTable({d: float(np.mean(v)) for d, v in lens.items()}, {})
    rate_col = "accept_rate" if "accept_rate" in cols else "conditional_rate" if "conditional_rate" in cols else None
    if "position" not in cols or rate_col is None:
        raise InputError(path, "header", sorted(cols),
                         "need columns dataset, accept_len or position, accept_rate (or conditional_rate)")
    by_domain: dict[str, dict[int, str]] = {}
    seen: dict = {}
    for i, r in enumerate(rows, start=2):
        domain = _check_domain(path, f"line {i} domain", r["domain"].lower()) if r.get("domain") else "any"
        try:
            position = int(r["position"])
        except ValueError:
            raise InputError(path, f"line {i} position", r["position"], "not a whole number") from None
        _once(path, seen, (domain, position), f"line {i} position", i)
        by_domain.setdefault(domain, {})[position] = r[rate_col]
    curves = {}
    for domain, rates in by_domain.items():
        if sorted(rates) != list(range(1, len(rates) + 1)):
            raise InputError(path, "position", sorted(rates), "positions must run 1, 2, ... without gaps")
        curves[domain] = _curve(path, rate_col, [rates[k] for k in sorted(rates)], rate_col == "conditional_rate")
    return AcceptanceTable({}, _spread_any(curves))


def _once(path: Path, seen: dict, row_key: tuple, where: str, line: int) -> None:
    """A table row may not repeat an earlier one's dataset (or domain and position)."""
    if row_key in seen:
        raise InputError(path, where, "/".join(str(k) for k in row_key if k != ""),
                         f"duplicate row: line {seen[row_key]} gives it already")
    seen[row_key] = line


def _table_from_yaml(path: Path, doc: dict) -> AcceptanceTable:
    known = {"accept_len", "accept_rate", "conditional_rate", "domains"}
    for key in doc:
        if key not in known:
            raise InputError(path, str(key), doc[key], f"unknown key; known: {', '.join(sorted(known))}")
    given = doc.get("domains") or {}
    if not isinstance(given, dict):
        raise InputError(path, "domains", given, "a mapping dataset -> domain")
    lens: dict[str, list[float]] = {}
    raw_lens = doc.get("accept_len") or {}
    if not isinstance(raw_lens, dict):
        raise InputError(path, "accept_len", raw_lens, "a mapping dataset -> accepted length")
    for name, value in raw_lens.items():
        domain = _domain_of(path, f"accept_len.{name}", str(name).lower(), given.get(name))
        lens.setdefault(domain, []).append(_accept_len(path, f"accept_len.{name}", value))
    curves = {}
    for key in ("accept_rate", "conditional_rate"):
        value = doc.get(key)
        if value is None:
            continue
        items = value.items() if isinstance(value, dict) else [("any", value)]
        for domain, rates in items:
            domain = domain if domain == "any" else _check_domain(path, f"{key}.{domain}", str(domain))
            curves[domain] = _curve(path, f"{key}.{domain}", rates, key == "conditional_rate")
    if not lens and not curves:
        raise InputError(path, None, None, "needs accept_len, accept_rate or conditional_rate")
    overlap = set(lens) & set(_spread_any(curves))
    if overlap:
        raise InputError(path, "accept_len", sorted(overlap), "a domain has both a length and a curve")
    return AcceptanceTable({d: float(np.mean(v)) for d, v in lens.items()}, _spread_any(curves))


def _spread_any(curves: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A curve given for no particular domain ('any') applies to every domain without its own."""
    if "any" not in curves:
        return curves
    out = {d: curves["any"] for d in DOMAINS}
    out.update({d: c for d, c in curves.items() if d != "any"})
    return out
