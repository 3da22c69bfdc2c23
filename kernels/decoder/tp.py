"""Processes of a tensor-parallel decoder: one per GPU, started here or by ``torchrun``.

:func:`run_ranks` starts ``world`` processes (``multiprocessing`` forkserver), joins them
through a rendezvous file in a temporary directory (no fixed port: parallel runs never
collide), runs ``job(ctx, *args)`` in each and returns rank 0's result. A rank that fails
ends the run: the others are stopped and :class:`RankFailed` carries the failing rank's
one-line error; a run past ``timeout_s`` is stopped the same way, so nothing hangs.
Collectives run over NCCL on GPUs and gloo on the CPU (tests), the control messages of
:mod:`.ranks` over gloo. Under ``torchrun`` (``WORLD_SIZE`` and ``RANK`` set),
:func:`context_from_env` joins the group torchrun made instead.
"""
from __future__ import annotations

import datetime
import multiprocessing as mp
import os
import queue
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist

from dspark_sim.kernels.decoder.shard import Shard

COLLECTIVE_TIMEOUT_S = 600.0  # a collective waiting longer than this raises on its rank


class RankFailed(RuntimeError):
    """A rank ended with an error (``line``: its one-line message; ``code``: 2 for bad input)."""

    def __init__(self, rank: int | None, line: str, code: int = 1):
        super().__init__(line if rank is None else f"rank {rank} failed: {line}")
        self.rank, self.line, self.code = rank, line, code


@dataclass(frozen=True)
class RankContext:
    """This process in the group: its shard, device and the CPU group of control messages."""

    rank: int
    world: int
    device: str
    shard: Shard
    control: object

    @property
    def leader(self) -> bool:
        """Rank 0: runs the scheduler and writes the outputs."""
        return self.rank == 0


def _join(rank: int, world: int, device_kind: str, init_method: str, moe_comm: str,
          local_rank: int) -> RankContext:
    """Join the process group and name this rank's device."""
    cuda = device_kind == "cuda"
    device = f"cuda:{local_rank}" if cuda else "cpu"
    if cuda:
        torch.cuda.set_device(local_rank)
    timeout = datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S)
    dist.init_process_group("nccl" if cuda else "gloo", init_method=init_method, rank=rank,
                            world_size=world, timeout=timeout)
    control = dist.new_group(backend="gloo", timeout=timeout) if cuda else None
    warm = torch.ones(1, device=device)
    dist.all_reduce(warm)  # communicators exist before any CUDA graph captures a collective
    return RankContext(rank, world, device, Shard(rank, world, None, moe_comm), control)


def context_from_env(device_kind: str, moe_comm: str = "allreduce") -> RankContext | None:
    """This process's context when ``torchrun`` started it (None otherwise)."""
    if "WORLD_SIZE" not in os.environ or "RANK" not in os.environ:
        return None
    return _join(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), device_kind, "env://", moe_comm,
                 int(os.environ.get("LOCAL_RANK", os.environ["RANK"])))


def _entry(rank, world, device_kind, init_method, moe_comm, job, args, results) -> None:
    from dspark_sim.errors import InputError

    try:
        ctx = _join(rank, world, device_kind, init_method, moe_comm, rank)
        out = job(ctx, *args)
        results.put(("ok", rank, out))
        dist.barrier(group=ctx.control)
        dist.destroy_process_group()
    except InputError as err:
        _last_word(results, ("error", rank, str(err), 2))
    except BaseException as err:  # noqa: BLE001 - one line for the launcher, the trace on stderr
        traceback.print_exc()
        line = str(err).strip().splitlines()[-1] if str(err).strip() else type(err).__name__
        _last_word(results, ("error", rank, f"{type(err).__name__}: {line}", 1))


def _last_word(results, item) -> None:
    """Post ``item`` and exit at once with its code (no waiting on peers stuck in collectives)."""
    results.put(item)
    results.close()
    results.join_thread()  # the queue's feeder thread has written it
    os._exit(item[3])


def run_ranks(world: int, job, args: tuple = (), *, device_kind: str = "cpu", timeout_s: float = 600.0,
              moe_comm: str = "allreduce"):
    """Run ``job(ctx, *args)`` on ``world`` ranks (``job`` a module-level function); rank 0's
    return value. Raises :class:`RankFailed` when a rank fails or the run outlives
    ``timeout_s``; every rank is stopped before it returns."""
    spawn = _context(job)
    with tempfile.TemporaryDirectory(prefix="dspark-tp-") as tmp:
        init = f"file://{Path(tmp) / 'rendezvous'}"
        results = spawn.Queue()
        procs = [spawn.Process(target=_entry, args=(r, world, device_kind, init, moe_comm, job, args, results),
                               daemon=True) for r in range(world)]
        for p in procs:
            p.start()
        try:
            return _wait(procs, results, time.monotonic() + timeout_s, timeout_s)
        finally:
            for p in procs:
                if p.is_alive():
                    p.kill()
                p.join(5)


def _context(job):
    """Processes forked from a server that imported torch and the job's module once (a fresh
    interpreter per rank would import them again for every run); the server never touches a GPU."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["torch", "torch.distributed", __name__, job.__module__])
    return ctx


def _wait(procs, results, deadline: float, timeout_s: float):
    """Rank 0's result once every rank is done; the first failure otherwise (a rank that died
    without a word, e.g. killed, before the collective errors it caused on the others)."""
    out, done = None, set()
    while len(done) < len(procs):
        item = _get(results, 0.1)
        dead = [r for r, p in enumerate(procs) if p.exitcode not in (None, 0)]
        if (item is not None and item[0] == "error") or dead:
            _fail(procs, results, item)
        if item is not None:
            done.add(item[1])
            out = item[2] if item[1] == 0 else out
        elif time.monotonic() > deadline:
            raise RankFailed(None, f"the run outlived its {timeout_s:g} s limit; every rank stopped")
    return out


def _fail(procs, results, item) -> None:
    """Raise the failure that started it: give the ranks a moment to report, then prefer a
    rank that ended without a message."""
    time.sleep(1.0)
    errors = [item] if item is not None and item[0] == "error" else []
    while (more := _get(results, 0.2)) is not None:
        if more[0] == "error":
            errors.append(more)
    said = {e[1] for e in errors}
    silent = [r for r, p in enumerate(procs) if p.exitcode not in (None, 0) and r not in said]
    if silent:
        raise RankFailed(silent[0], _exit_line(procs[silent[0]].exitcode))
    rank, line, code = errors[0][1:]
    raise RankFailed(rank, line, code)


def _get(results, wait_s: float):
    try:
        return results.get(timeout=wait_s)
    except queue.Empty:
        return None


def _exit_line(code: int) -> str:
    return f"killed by signal {-code}" if code < 0 else f"exited with code {code}"


__all__ = ["RankContext", "RankFailed", "run_ranks", "context_from_env", "COLLECTIVE_TIMEOUT_S"]
