"""Launch configs for the DSpark kernels: search spaces and tuned per-GPU profiles.

A profile is ``profiles/<gpu>/kernels.json`` (``<gpu>`` from :func:`device_slug`, e.g.
``h200``), laid out like SGLang's and vLLM's fused-MoE config files::

    {"device_name": "NVIDIA H200", "provenance": {...},
     "kernels": {"accept_row_stats": {"V=151936,N=256": {"BLOCK_V": 4096, "SPLITS": 2,
                                                         "num_warps": 8, "num_stages": 1}, ...}}}

At run time :func:`lookup` takes the entry nearest to the call's shape (log distance,
first key first); a GPU with no profile gets :func:`default_config`. Nothing is tuned
at start. ``python -m dspark_sim.kernels.tuning --out profiles/<gpu>/kernels.json``
tunes the current GPU and writes its file (:mod:`.tuning`).
``DSPARK_KERNELS_PROFILE=path`` overrides the file looked up.
"""

from __future__ import annotations

import functools
import importlib.resources
import json
import math
import os
import re
from pathlib import Path

PROFILE_ENV = "DSPARK_KERNELS_PROFILE"
KERNELS = ("accept_row_stats", "accept_row_stats_greedy", "accept_residual", "schedule_verify")


# ----------------------------------------------------------------------------- spaces


def _split_choices(n_programs: int, n_sm: int, vocab: int, block_v: int) -> list[int]:
    """Splits of a row over V that give about 1, 2, 4 and 8 waves, plus no split."""
    out = {1}
    for waves in (1, 2, 4, 8):
        s = triton_next_pow2(math.ceil(waves * n_sm / max(n_programs, 1)))
        out.add(max(1, min(s, vocab // block_v, 128)))
    return sorted(out)


def row_stats_space(n_rows: int, vocab: int, n_sm: int) -> list[dict]:
    """Row-statistics pass (one read of every logit): block, warps, splits of V."""
    pairs = [(1024, 4), (2048, 4), (2048, 8), (4096, 8), (4096, 16)]  # 8 or 16 logits per thread
    return [
        {"BLOCK_V": bv, "SPLITS": s, "num_warps": w, "num_stages": 1, "PREFETCH": 0}
        for bv, w in pairs
        for s in _split_choices(n_rows, n_sm, vocab, bv)
    ]


def residual_space(n_requests: int, vocab: int, n_sm: int) -> list[dict]:
    """Residual / bonus row pass (one row per request): block, warps, splits of V."""
    pairs = [(1024, 4), (2048, 4), (2048, 8), (4096, 8)]
    return [
        {"BLOCK_V": bv, "SPLITS": s, "num_warps": w, "num_stages": 1}
        for bv, w in pairs
        for s in _split_choices(n_requests, n_sm, vocab, bv)
    ]


def schedule_space(block_r: int, block_g: int) -> list[dict]:
    """Single-program scheduler: only the warp count matters."""
    return [{"num_warps": w} for w in (4, 8, 16) if w * 32 <= block_r * block_g]


def refinements(cfg: dict) -> list[dict]:
    """Second tuning round for the winner: the explicit next-block prefetch of the row
    statistics pass, or other software-pipelining depths of the residual pass."""
    if "PREFETCH" in cfg:
        return [dict(cfg, PREFETCH=1 - cfg["PREFETCH"])]
    if "num_stages" in cfg:
        return [dict(cfg, num_stages=s) for s in (2, 3) if s != cfg["num_stages"]]
    return []


# ----------------------------------------------------------------------------- defaults


def triton_next_pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


def default_config(kernel: str, shape: dict, n_sm: int, interpret: bool) -> dict:
    """A reasonable config when no profile entry exists (and small blocks on the CPU interpreter)."""
    if kernel == "schedule_verify":
        return {"num_warps": 8 if shape["R"] * shape["G"] >= 1024 else 4}
    block_v = 256 if interpret else (4096 if kernel.startswith("accept_row_stats") else 2048)
    rows = max(1, shape["N"] if "N" in shape else shape["R"])  # a call with no rows still gets a config
    splits = max(1, min(triton_next_pow2(math.ceil(2 * n_sm / rows)), shape["V"] // block_v, 128))
    return {"BLOCK_V": block_v, "SPLITS": splits, "num_warps": 8 if block_v >= 4096 else 4, "num_stages": 1}


# ----------------------------------------------------------------------------- profiles


def device_slug(device_name: str) -> str:
    """'NVIDIA H200' -> 'h200', 'NVIDIA H100 80GB HBM3' -> 'h100', 'NVIDIA A100-SXM4-80GB' -> 'a100'."""
    words = [w for w in re.split(r"[\s\-_]+", device_name.lower()) if w not in ("nvidia", "geforce", "tesla", "")]
    picked = []
    for w in words:
        picked.append(w)
        if any(ch.isdigit() for ch in w):
            break
    return "_".join(picked) or "unknown"


def profile_path(device_name: str) -> Path:
    env = os.environ.get(PROFILE_ENV)
    if env:
        return Path(env)
    return Path(str(importlib.resources.files("dspark_sim.profiles"))) / device_slug(device_name) / "kernels.json"


@functools.lru_cache(maxsize=None)
def load_profile(device_name: str) -> dict:
    """The profile for a device name, or {} when none exists."""
    path = profile_path(device_name)
    if not path.is_file():
        return {}
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def shape_key(shape: dict) -> str:
    return ",".join(f"{k}={int(v)}" for k, v in shape.items())


def parse_shape_key(key: str) -> dict:
    return {k: int(v) for k, v in (part.split("=") for part in key.split(","))}


def nearest_entry(entries: dict, shape: dict) -> dict | None:
    """The entry whose shape is nearest in log2 distance, the first key weighing most."""
    best, best_d = None, None
    for key, cfg in entries.items():
        other = parse_shape_key(key)
        if set(other) != set(shape):
            continue
        d = tuple(abs(math.log2(max(shape[k], 1)) - math.log2(max(other[k], 1))) for k in shape)
        if best_d is None or d < best_d:
            best, best_d = cfg, d
    return best


@functools.lru_cache(maxsize=None)
def _device_facts(device_str: str) -> tuple[str, int, bool]:
    interpret = os.environ.get("TRITON_INTERPRET", "0") == "1"
    if device_str.startswith("cuda") and not interpret:
        import torch

        props = torch.cuda.get_device_properties(torch.device(device_str))
        return props.name, props.multi_processor_count, False
    return "cpu", 4, True


def lookup(kernel: str, shape: dict, device) -> dict:
    """The launch config for ``kernel`` at ``shape`` on ``device`` (a torch.device or str)."""
    name, n_sm, interpret = _device_facts(str(device))
    return _lookup(kernel, tuple(shape.items()), name, n_sm, interpret)


@functools.lru_cache(maxsize=4096)
def _lookup(kernel: str, shape_items: tuple, name: str, n_sm: int, interpret: bool) -> dict:
    shape = dict(shape_items)
    entry = None if interpret else nearest_entry(load_profile(name).get("kernels", {}).get(kernel, {}), shape)
    return dict(entry) if entry else default_config(kernel, shape, n_sm, interpret)


def clear_caches() -> None:
    load_profile.cache_clear()
    _lookup.cache_clear()
