"""Read the tuner's exported ``dspark.yaml`` (a simulator scenario) for the decoder.

Only what a one-GPU decoder can honour is read; anything else is rejected with
one InputError line naming the file, the key and why. Paths are relative to
the file.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from dspark_sim.config import Section, load_yaml
from dspark_sim.errors import InputError
from dspark_sim.kernels.decoder.config import DecoderConfig
from dspark_sim.scenario import DOMAINS

IGNORED_TOP = ("name", "gpu", "slo")  # describe the scenario; nothing for the decoder to do


@dataclass(frozen=True, slots=True)
class Settings:
    """What ``dspark-decode`` takes from the YAML file."""

    model: str
    decoder: DecoderConfig
    sps: dict | None
    trace: Path | None
    trace_format: str | None
    time_scale: float
    max_requests: int | None
    domains: tuple[tuple[str, float], ...]
    acceptance: dict


def load_settings(path, model: str | None = None, **overrides) -> Settings:
    """Parse ``path``; ``model`` (``--model``) must match the file's ``model``.

    ``overrides`` are :class:`DecoderConfig` fields set by the command line.
    """
    path = Path(path)
    top = Section(load_yaml(path), path, "")
    for key in IGNORED_TOP:
        top.raw(key)
    file_model = (top.string("model") or "").lower() or None
    if model and file_model and model.lower() != file_model:
        raise InputError(path, "model", file_model, f"config was tuned for {file_model}, not --model {model}")
    model = (model or file_model)
    if not model:
        raise InputError(path, "model", None, "missing: name a model here or with --model")
    dep = _deployment(top.section("deployment"))
    spec_kw, sps, acceptance = _speculation(top.section("speculation"), path.parent)
    work = _workload(top.section("workload"), path.parent)
    seed = top.integer("seed", 0, minimum=0)
    top.done()
    try:
        conf = DecoderConfig(**dep, **spec_kw, seed=seed, source=str(path), **overrides)
    except TypeError as err:
        raise InputError(path, None, None, str(err)) from None
    _check_fit(conf, sps, path)
    return Settings(model, conf, sps, *work, acceptance)


def _deployment(s: Section) -> dict:
    for key, why in (("replicas", "the decoder drives one GPU"), ("tp", "no tensor parallelism")):
        value = s.integer(key, 1, minimum=1)
        if value != 1:
            raise InputError(s.file, s.path(key), value, why)
    for key in ("router", "gpu_memory_fraction"):
        s.raw(key)
    batching = s.string("batching", "prefill_first")
    if batching != "prefill_first":
        raise InputError(s.file, s.path("batching"), batching,
                         "the decoder batches prefill_first (prefill-only steps while prompts are pending)")
    out = {"max_running_requests": s.integer("max_running_requests", 64, minimum=1),
           "max_batched_tokens": s.integer("max_batched_tokens", 8192, minimum=1)}
    chunk = s.integer("chunked_prefill_tokens", None, minimum=1)
    if chunk is not None:
        out["max_batched_tokens"] = min(chunk, out["max_batched_tokens"])
    page = s.integer("kv_block_tokens", 16, minimum=1)
    if page & (page - 1):
        raise InputError(s.file, s.path("kv_block_tokens"), page, "the decoder's pages need a power of two")
    out["kv_block_tokens"] = page
    s.done()
    return out


def _speculation(s: Section, base: Path) -> tuple[dict, dict | None, dict]:
    method = s.string("method", "none")
    if method not in ("none", "static", "dspark"):
        raise InputError(s.file, s.path("method"), method, "the decoder runs none, static or dspark")
    drafter = s.string("drafter", None)
    want = {"dspark": "dspark", "static": "mtp"}.get(method)
    if drafter is not None and want is not None and drafter != want:
        raise InputError(s.file, s.path("drafter"), drafter, f"method {method} drafts with {want} here")
    for key in ("threshold", "schedule", "graph_tiers", "pad_to_graph_tier"):
        if s.raw(key) not in (None, [], False):
            raise InputError(s.file, s.path(key), s.raw(key), "not supported by the decoder")
    k = s.integer("block_size", None, minimum=1, maximum=16) or s.integer("num_draft_tokens", None,
                                                                           minimum=1, maximum=16)
    out = {"method": method, "block_size": k or (7 if method == "dspark" else 3),
           "scheduler": s.string("scheduler", "production", choices=("production", "algorithm1", "full")),
           "lag_steps": s.integer("lag_steps", 2, minimum=0, maximum=16),
           "min_verify_len": s.integer("min_verify_len", 1, minimum=1, maximum=17),
           "max_verify_len": s.integer("max_verify_len", None, minimum=1, maximum=17),
           "survival_eps": s.number("survival_eps", 1e-6, minimum=0, maximum=1)}
    sps = _json(s, "sps_table", base)
    sts = _json(s, "sts", base)
    if sts is not None:
        temps = sts.get("temperatures")
        if not isinstance(temps, list) or not temps:
            raise InputError(s.file, s.path("sts"), None, "STS file needs a list 'temperatures'")
        out["sts_temperatures"] = tuple(float(t) for t in temps)
    acceptance = dict(s.raw("acceptance") or {})
    s.done()
    return out, sps, acceptance


def _json(s: Section, key: str, base: Path) -> dict | None:
    name = s.string(key)
    if name is None:
        return None
    p = (base / name).resolve()
    try:
        return json.loads(p.read_text())
    except FileNotFoundError:
        raise InputError(s.file, s.path(key), name, "file not found") from None
    except json.JSONDecodeError as err:
        raise InputError(s.file, s.path(key), name, f"not JSON: {err.msg}") from None


def _workload(s: Section, base: Path):
    if s.raw("synthetic") is not None:
        raise InputError(s.file, s.path("synthetic"), "...", "the decoder replays traces: give workload.trace or --trace")
    trace = s.string("trace")
    fmt = s.string("format", None, choices=("azure", "mooncake", "burstgpt"))
    scale = s.number("time_scale", 1.0, minimum=0, strict_min=True)
    max_requests = s.integer("max_requests", None, minimum=1)
    dom = s.raw("domain", "chat")
    mix = {dom: 1.0} if isinstance(dom, str) else dict(dom or {})
    for name in mix:
        if name not in DOMAINS:
            raise InputError(s.file, s.path("domain"), name, f"unknown domain; expected {DOMAINS}")
    total = sum(float(w) for w in mix.values())
    if total <= 0:
        raise InputError(s.file, s.path("domain"), dom, "domain weights must sum to more than 0")
    s.done()
    path = (base / trace).resolve() if trace else None
    return path, fmt, scale, max_requests, tuple((k, float(w) / total) for k, w in mix.items())


def _check_fit(conf: DecoderConfig, sps: dict | None, path: Path) -> None:
    """Reject combinations the decoder cannot run."""
    if conf.method == "dspark" and conf.scheduler != "full" and sps is None:
        raise InputError(path, "speculation.sps_table", None, f"scheduler {conf.scheduler} needs an SPS table")
    if sps is not None:
        try:
            from dspark_sim.kernels.sps_tensors import sps_from_json_dict
            table = sps_from_json_dict(sps)
        except (KeyError, ValueError, TypeError) as err:
            raise InputError(path, "speculation.sps_table", None, f"bad SPS table: {err}") from None
        cap = table.max_batch_tokens
        if cap is not None and cap < conf.max_running_requests:
            raise InputError(path, "speculation.sps_table", cap, "max_batch_tokens below "
                             f"max_running_requests={conf.max_running_requests}: anchors alone overflow it")
