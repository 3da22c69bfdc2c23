"""A CUDA error while serving, as one line naming the step that met it.

The GPU reports a fault asynchronously: at the next call that waits for it (the end of the
step, a copy), or at a launch after it. The serving loop wraps each launch and each wait in
:func:`device_faults`, which turns such an error into a :class:`~dspark_sim.errors.DeviceFault`
naming the step being launched or finished and the step still in flight, so the command
ends with that line (exit code 1) before writing anything.
"""
from __future__ import annotations

from contextlib import contextmanager

from dspark_sim.errors import DeviceFault

# Words a device error's message carries (torch's CUDA checks, cuBLAS, Triton's launcher, NCCL).
DEVICE_WORDS = ("CUDA", "CUBLAS", "cuBLAS", "cuDNN", "NCCL", "illegal memory access", "device-side assert")


def is_device_error(err: BaseException) -> bool:
    """Whether ``err`` is the GPU failing (not bad input or a bug on the host)."""
    import torch

    accelerator = getattr(torch, "AcceleratorError", None)
    if accelerator is not None and isinstance(err, accelerator):
        return True
    return isinstance(err, RuntimeError) and any(w in str(err) for w in DEVICE_WORDS)


def step_shape(plan, window: int) -> str:
    """A step's work in words: decode requests, prefill chunks and the tokens they make up
    (decode windows at their widest, ``window`` tokens: the verify lengths are on the device)."""
    chunks = [int(n) for _, n in plan.prefill]
    listed = ", ".join(map(str, chunks[:4])) + (", ..." if len(chunks) > 4 else "")
    verify = len(plan.decode) * window
    return (f"{len(plan.decode)} decode requests (at most {verify} verify tokens), {len(chunks)} prefill chunks"
            + (f" ({listed} tokens)" if chunks else "") + f": at most {verify + sum(chunks)} tokens")


@contextmanager
def device_faults(what):
    """Turn a device error inside into a DeviceFault: "GPU fault while <what>: <the error's first
    line>" (``what`` a string, or a function making it only when needed)."""
    try:
        yield
    except Exception as err:
        if not is_device_error(err):
            raise
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise DeviceFault(f"GPU fault while {what() if callable(what) else what}: {first}") from None


def serving(launching, in_flight):
    """The words of :func:`device_faults` in the serving loop: the step being launched (a plan,
    or None while finishing) and the step in flight (its :func:`step_shape` words, or None)."""
    def words() -> str:
        parts = [f"launching a step of {launching}"] if launching is not None else []
        if in_flight is not None:
            parts.append(f"{'with' if parts else 'finishing'} the step in flight of {in_flight}")
        return "serving, " + "; ".join(parts)
    return words
