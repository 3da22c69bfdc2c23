"""Random but realistic inputs for the DSpark kernels, shared by tests, tuner and benchmark."""

from __future__ import annotations

import torch

from .sps_tensors import SpsTensors

__all__ = ["batch_size_sweep", "synthetic_sps_table", "schedule_case", "accept_case"]


def batch_size_sweep(max_tokens: int) -> list[int]:
    """SGLang's default probe sweep (DSPARK.md section 5), capped at max_tokens."""
    raw = [1, 2, 4, 8, *range(12, 128, 4), *range(128, 256, 16), *range(256, 1024, 32), *range(1024, 2048, 128),
           *range(2048, max_tokens + 1, 256)]
    sweep = sorted({b for b in raw if 1 <= b <= max_tokens})
    return sweep if sweep[-1] == max_tokens else sweep + [max_tokens]


def synthetic_sps_table(max_batch_tokens: int = 4096, device="cpu") -> SpsTensors:
    """An H200-like curve: flat while memory-bound, then rising step time past a ridge at
    ~256 tokens, with small cliffs every 128 tokens (graph tiers) to make Theta jagged."""
    probes = batch_size_sweep(max_batch_tokens)
    step_s = [0.012 + max(0, b - 256) * 2.5e-5 + 0.0004 * (b // 128) for b in probes]
    return SpsTensors(
        torch.tensor(probes, dtype=torch.int32, device=device),
        torch.tensor([1.0 / s for s in step_s], dtype=torch.float32, device=device),
        max_batch_tokens,
    )


def _generator(device, seed: int) -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)


def draft_confidences(R: int, block_size: int, device, seed: int) -> torch.Tensor:
    """fp32 [R, block_size]: sigmoid(mu_j + d_r + noise), easy and hard requests, decaying by position."""
    g = _generator(device, seed)
    mu = torch.linspace(2.5, 0.5, block_size, device=device)
    d = torch.randn(R, 1, generator=g, device=device)
    return torch.sigmoid(mu + d + 0.7 * torch.randn(R, block_size, generator=g, device=device)).float()


def schedule_case(R: int, block_size: int, device="cpu", seed: int = 0, lag: bool = False, sps=None) -> dict:
    """Keyword arguments for schedule_verify (mode and bounds left at their defaults)."""
    g = _generator(device, seed + 1)
    return dict(
        conf=draft_confidences(R, block_size, device, seed),
        temperatures=(0.8 + 0.6 * torch.rand(block_size, generator=g, device=device)).float(),
        sps=sps if sps is not None else synthetic_sps_table(device=device),
        lag_conf=draft_confidences(R, block_size, device, seed + 7) if lag else None,
    )


def accept_case(
    R: int, block_size: int, V: int, device="cpu", seed: int = 0, *, logits_dtype=torch.bfloat16,
    probs_dtype=torch.float32, temperature: float = 1.0, ragged: bool = False, sharpness: float = 4.0,
) -> tuple[dict, int]:
    """(keyword arguments for accept, max_window). Drafts come from a perturbed target, so
    acceptance is neither certain nor hopeless; ragged draws window lengths in 1..block_size+1."""
    g = _generator(device, seed)
    W = block_size + 1
    lengths = torch.randint(1, W + 1, (R,), generator=g, device=device) if ragged else torch.full((R,), W, device=device)
    indptr = torch.zeros(R + 1, dtype=torch.int32, device=device)
    indptr[1:] = torch.cumsum(lengths, 0).to(torch.int32)
    N = int(indptr[-1])
    logits = sharpness * torch.randn(N, V, generator=g, device=device)
    draft_logits = logits + 1.5 * torch.randn(N, V, generator=g, device=device)
    t = max(temperature, 1e-3)
    q = torch.softmax(draft_logits / t, -1)
    drafts = torch.multinomial(q, 1, generator=g).view(-1)
    args = dict(
        target_logits=logits.to(logits_dtype),
        indptr=indptr,
        draft_tokens=drafts,
        draft_probs=q.to(probs_dtype),
        temperature=torch.full((R,), temperature, dtype=torch.float32, device=device),
        uniforms=torch.rand(N, generator=g, device=device),
        resample_uniforms=torch.rand(R, generator=g, device=device),
    )
    return args, W
