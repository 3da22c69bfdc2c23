"""What a serving step spent outside its kernels: Triton compiles and allocator retries.

A Triton kernel compiles on the first launch of each specialisation (its constexprs
and the divisibility of its integer and pointer arguments); inside a serving step
that is a stall of a second or more. :class:`StallLog` records every compile while
it is active (through Triton's ``jit_post_compile_hook``) and reads the CUDA
caching allocator's counters, so a run can say which step stalled and why.
"""
from __future__ import annotations

import time

import torch

ALLOC_COUNTERS = ("num_alloc_retries", "num_ooms", "num_device_alloc", "num_device_free")


def runtime_knobs():
    """Triton's runtime knobs when they carry the post-compile hook (Triton 3.4 and later), else None."""
    try:
        from triton import knobs
        return knobs.runtime if hasattr(knobs.runtime, "jit_post_compile_hook") else None
    except ImportError:  # Triton before 3.4 has no knobs
        return None


class StallLog:
    """Context manager: ``compiles`` ([(perf_counter seconds, kernel, specialisation)])
    and :meth:`alloc` (the allocator's counters now)."""

    def __init__(self, device: torch.device | None = None):
        self.device = device
        self.compiles: list[tuple[float, str, str]] = []
        self.available = runtime_knobs() is not None
        self._previous = None

    def __enter__(self) -> "StallLog":
        rt = runtime_knobs()
        if rt is not None:
            self._previous = rt.jit_post_compile_hook
            rt.jit_post_compile_hook = self._hook
        return self

    def __exit__(self, *exc) -> None:
        rt = runtime_knobs()
        if rt is not None:
            rt.jit_post_compile_hook = self._previous

    def _hook(self, *, key=None, repr=None, fn=None, compile=None, is_manual_warmup=False,
              already_compiled=False, **_):
        name = getattr(fn, "name", None) or str(repr).split("[", 1)[0]
        c = compile if isinstance(compile, dict) else {}
        spec = f"{repr} constants={c.get('constants')} attrs={c.get('configs')}"
        self.compiles.append((time.perf_counter(), name, spec[:1500]))
        if self._previous is not None:
            return self._previous(key=key, repr=repr, fn=fn, compile=compile,
                                  is_manual_warmup=is_manual_warmup, already_compiled=already_compiled)
        return None

    def alloc(self) -> dict:
        """The caching allocator's retry, out-of-memory and device malloc/free counts."""
        if self.device is None or self.device.type != "cuda":
            return {}
        stats = torch.cuda.memory_stats(self.device)
        return {k: int(stats.get(k, 0)) for k in ALLOC_COUNTERS}
