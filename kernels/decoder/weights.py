"""Weights: random initialisation, and loading Hugging Face safetensors checkpoints.

The safetensors format is small enough to read directly (an 8-byte header
length, a JSON header, raw little-endian tensors), so no extra package is needed.
"""
from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import torch
from torch import nn

from dspark_sim.errors import InputError

_DTYPES = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32}
_NAMES = {v: k for k, v in _DTYPES.items()}


def init_random(module: nn.Module, std: float, seed: int) -> None:
    """Fill every matrix-shaped parameter with N(0, std); vectors (norms) stay at one."""
    gen = None
    with torch.no_grad():
        for name, p in sorted(module.named_parameters()):
            if p.dim() < 2:
                continue
            if gen is None or gen.device != p.device:
                gen = torch.Generator(device=p.device).manual_seed(seed)
            p.copy_(torch.randn(p.shape, generator=gen, device=p.device, dtype=torch.float32)
                    .mul_(std).to(p.dtype))


def read_safetensors(path: str | Path) -> dict[str, torch.Tensor]:
    """All tensors of one ``.safetensors`` file (CPU, memory-mapped where possible)."""
    raw = np.memmap(path, dtype=np.uint8, mode="r")
    (n,) = struct.unpack("<Q", bytes(raw[:8]))
    header = json.loads(bytes(raw[8:8 + n]))
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] not in _DTYPES:
            raise InputError(path, name, info["dtype"], "unsupported dtype (BF16, F16, F32)")
        lo, hi = info["data_offsets"]
        buf = raw[8 + n + lo: 8 + n + hi]
        t = torch.frombuffer(bytearray(buf), dtype=_DTYPES[info["dtype"]])
        out[name] = t.view(info["shape"]) if info["shape"] else t.reshape(())
    return out


def write_safetensors(path: str | Path, tensors: dict[str, torch.Tensor]) -> None:
    """Write ``tensors`` as one ``.safetensors`` file (tests and tiny checkpoints)."""
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        data = t.detach().contiguous().cpu().view(torch.uint8).numpy().tobytes()
        header[name] = {"dtype": _NAMES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)) + head + b"".join(blobs))


def read_checkpoint(directory: str | Path) -> dict[str, torch.Tensor]:
    """Every tensor of every ``*.safetensors`` file in ``directory``."""
    files = sorted(Path(directory).glob("*.safetensors"))
    if not files:
        raise InputError(directory, None, None, "no *.safetensors files in the checkpoint directory")
    tensors: dict[str, torch.Tensor] = {}
    for f in files:
        tensors.update(read_safetensors(f))
    return tensors


def check_hf_config(directory: str | Path, spec) -> None:
    """Raise InputError when ``config.json`` disagrees with the model preset."""
    path = Path(directory) / "config.json"
    if not path.exists():
        return
    cfg = json.loads(path.read_text())
    pairs = {"hidden_size": spec.hidden_size, "num_hidden_layers": spec.num_layers,
             "num_attention_heads": spec.num_heads, "num_key_value_heads": spec.num_kv_heads,
             "head_dim": spec.head_dim, "vocab_size": spec.vocab_size}
    if not spec.is_moe:
        pairs["intermediate_size"] = spec.intermediate_size
    for key, want in pairs.items():
        if key in cfg and cfg[key] != want:
            raise InputError(path, key, cfg[key], f"checkpoint does not match --model {spec.name} "
                             f"({key}={want})")


def assign(param: nn.Parameter, value: torch.Tensor, name: str) -> None:
    """Copy a checkpoint tensor into ``param`` after a shape check."""
    if tuple(value.shape) != tuple(param.shape):
        raise InputError(None, name, tuple(value.shape), f"expected shape {tuple(param.shape)}")
    with torch.no_grad():
        param.copy_(value.to(device=param.device, dtype=param.dtype))


def load_layer(layer, get, prefix: str) -> None:
    """Load one Qwen3 decoder layer whose tensor names start with ``prefix``."""
    a = f"{prefix}self_attn."
    assign(layer.attn.qkv, torch.cat([get(a + f"{p}_proj.weight") for p in "qkv"]), a + "qkv")
    assign(layer.attn.o, get(a + "o_proj.weight"), a + "o_proj.weight")
    if layer.attn.qk_norm:
        assign(layer.attn.q_norm, get(a + "q_norm.weight"), a + "q_norm.weight")
        assign(layer.attn.k_norm, get(a + "k_norm.weight"), a + "k_norm.weight")
    assign(layer.norm1, get(prefix + "input_layernorm.weight"), prefix + "input_layernorm")
    assign(layer.norm2, get(prefix + "post_attention_layernorm.weight"), prefix + "post_attention")
    m = f"{prefix}mlp."
    if hasattr(layer.mlp, "router"):
        assign(layer.mlp.router, get(m + "gate.weight"), m + "gate.weight")
        n = layer.mlp.router.shape[0]
        ex = [f"{m}experts.{e}." for e in range(n)]
        assign(layer.mlp.gate_up, torch.stack([
            torch.cat([get(x + "gate_proj.weight"), get(x + "up_proj.weight")]) for x in ex]),
            m + "experts")
        assign(layer.mlp.down, torch.stack([get(x + "down_proj.weight") for x in ex]), m + "experts")
    else:
        assign(layer.mlp.gate_up, torch.cat([get(m + "gate_proj.weight"), get(m + "up_proj.weight")]),
               m + "gate_up")
        assign(layer.mlp.down, get(m + "down_proj.weight"), m + "down_proj.weight")


def getter(tensors: dict[str, torch.Tensor], source) -> callable:
    """``get(name)`` over ``tensors``, accepting an optional ``model.`` prefix."""
    def get(name: str) -> torch.Tensor:
        for key in (name, "model." + name):
            if key in tensors:
                return tensors[key]
        raise InputError(source, name, None, "tensor missing from the checkpoint")
    return get
