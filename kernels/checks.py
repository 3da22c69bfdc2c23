"""Argument checks shared by the kernels, their loop references and torch baselines.

Every check reads shapes, dtypes and Python numbers only: none syncs the device.
"""

from __future__ import annotations

import torch

from .sps_tensors import AdditiveSpsTensors, SpsTensors

MODES = ("algorithm1", "production")
MAX_GAMMA = 16


def _want(cond: bool, msg) -> None:
    """Raise ValueError(msg()) unless cond. msg is a callable so that the message, which
    prints shapes, is only built on failure (torch.compile would specialise on it)."""
    if not cond:
        raise ValueError(msg())


def check_schedule_args(conf, temperatures, sps, min_verify_len, max_verify_len, survival_eps, mode, lag_conf,
                        budget_k=None):
    """Validate schedule_verify's inputs; return (min_len, max_len) resolved,
    both counting the anchor (1..block_size+1)."""
    _want(conf.dim() == 2 and conf.dtype == torch.float32,
          lambda: f"conf: want fp32 [R, block_size], got {conf.dtype} {tuple(conf.shape)}")
    R, block_size = conf.shape
    _want(R >= 1 and 1 <= block_size <= MAX_GAMMA,
          lambda: f"conf: need R >= 1 and 1 <= block_size <= {MAX_GAMMA}, got {tuple(conf.shape)}")
    _want(
        temperatures.dtype == torch.float32 and tuple(temperatures.shape) == (block_size,),
        lambda: f"temperatures: want fp32 [{block_size}], got {temperatures.dtype} {tuple(temperatures.shape)}",
    )
    _want(isinstance(sps, (SpsTensors, AdditiveSpsTensors)),
          lambda: f"sps: want SpsTensors or AdditiveSpsTensors, got {type(sps)}")
    _want(mode in MODES, lambda: f"mode: want one of {MODES}, got {mode!r}")
    if lag_conf is not None:
        _want(mode == "production", lambda: "lag_conf sizes the budget in mode='production' only")
        _want(
            lag_conf.dim() == 2 and lag_conf.dtype == torch.float32 and lag_conf.shape[1] == block_size
            and lag_conf.shape[0] >= 1,
            lambda: f"lag_conf: want fp32 [R_lag, {block_size}], got {lag_conf.dtype} {tuple(lag_conf.shape)}",
        )
    if budget_k is not None:
        _want(mode == "production" and lag_conf is None,
              lambda: "budget_k replaces the budget search: mode='production' and no lag_conf")
        _want(int(budget_k) >= 0, lambda: f"budget_k must be >= 0, got {budget_k}")
    max_len = block_size + 1 if max_verify_len is None else int(max_verify_len)
    min_len = int(min_verify_len)
    _want(1 <= min_len <= max_len <= block_size + 1,
          lambda: f"need 1 <= min_verify_len ({min_len}) <= max_verify_len ({max_len}) <= block_size + 1 "
                  f"({block_size + 1})")
    _want(survival_eps >= 0, lambda: f"survival_eps must be >= 0, got {survival_eps}")
    tensors = [conf, temperatures] + ([] if lag_conf is None else [lag_conf])
    _want(len({t.device for t in tensors}) == 1, lambda: "conf, temperatures and lag_conf must share a device")
    return min_len, max_len


def check_accept_args(target_logits, indptr, draft_tokens, draft_probs, temperature, uniforms, resample_uniforms):
    """Validate accept's inputs; return (R, N, V). With draft_probs None (greedy only)
    temperature and the uniforms may be None."""
    _want(
        target_logits.dim() == 2 and target_logits.dtype in (torch.bfloat16, torch.float16, torch.float32),
        lambda: f"target_logits: want [N, V] bf16/fp16/fp32, got {target_logits.dtype} {tuple(target_logits.shape)}",
    )
    _want(target_logits.stride(1) == 1, lambda: "target_logits: rows must be contiguous (stride(1) == 1)")
    N, V = target_logits.shape
    _want(indptr.dim() == 1 and indptr.numel() >= 2 and indptr.dtype == torch.int32,
          lambda: "indptr: want int32 [R + 1], R >= 1")
    R = indptr.numel() - 1
    _want(
        draft_tokens.dim() == 1 and draft_tokens.numel() == N and draft_tokens.dtype in (torch.int32, torch.int64),
        lambda: f"draft_tokens: want int32/int64 [{N}], got {draft_tokens.dtype} {tuple(draft_tokens.shape)}",
    )
    if draft_probs is not None:
        _want(
            tuple(draft_probs.shape) == (N, V) and draft_probs.dtype in (torch.bfloat16, torch.float16, torch.float32),
            lambda: f"draft_probs: want [{N}, {V}] float, got {draft_probs.dtype} {tuple(draft_probs.shape)}",
        )
        _want(draft_probs.stride(1) == 1, lambda: "draft_probs: rows must be contiguous (stride(1) == 1)")
    per_request = {"temperature": (temperature, R), "uniforms": (uniforms, N),
                   "resample_uniforms": (resample_uniforms, R)}
    for name, (t, n) in per_request.items():
        if t is None and draft_probs is None:
            continue  # the greedy-only path needs none of them
        _want(
            t is not None and t.dtype == torch.float32 and tuple(t.shape) == (n,),
            lambda: f"{name}: want fp32 [{n}], got {None if t is None else (t.dtype, tuple(t.shape))}",
        )
    tensors = [target_logits, indptr, draft_tokens, draft_probs, temperature, uniforms, resample_uniforms]
    tensors = [t for t in tensors if t is not None]
    _want(len({t.device for t in tensors}) == 1, lambda: "accept: all tensors must share a device")
    return R, N, V


def resolve_max_window(indptr: torch.Tensor, max_window: int | None) -> int:
    """block_size + 1, the width of out_tokens. Inferring it reads indptr on the host
    (one sync); pass max_window to stay sync-free."""
    if max_window is not None:
        _want(int(max_window) >= 1, lambda: f"max_window must be >= 1, got {max_window}")
        return int(max_window)
    return max(1, int((indptr[1:] - indptr[:-1]).max().item()))


def nothing_accepted(R: int, W: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """accept's result when no request has a row to judge: ``(accepted int32 [R] of 0,
    out_tokens int32 [R, W] of -1)`` (what every window of length 0 gives)."""
    return (torch.zeros(R, dtype=torch.int32, device=device),
            torch.full((R, W), -1, dtype=torch.int32, device=device))
