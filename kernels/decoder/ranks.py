"""One scheduler for a tensor-parallel group: rank 0 decides, every rank runs the step.

As SGLang broadcasts each step's requests from its rank-0 scheduler, rank 0 here runs the
serving loop, scheduler and page allocator on a :class:`Leader` (the decoder, with every
host-side change it makes logged); before each step it broadcasts the changes since the
last step and the step's requests, and the other ranks (:func:`follow`) replay them on
their own decoders and launch the same step. Each rank's host state (sequences, pages,
rows) therefore stays equal to rank 0's; the GPU work (the sharded forward, its
collectives) runs on every rank. Committing a step's tokens needs no message: every rank
holds rank 0's tokens (:meth:`Decoder.agree`) and commits them the same way.

Messages go over a CPU (gloo) group, as SGLang's ``broadcast_pyobj``; the ops are
``attach`` (a sequence, new or re-admitted), ``reserve``, ``release``, ``cached`` and
``put`` (prompts marked cached without running, for timing) and ``clear_graphs`` (every
rank captures the same CUDA graphs in the same order: a capture's warm-up runs the step's
collectives). At the end rank 0 sends a
digest of every sequence's tokens and a rank that disagrees fails.
"""
from __future__ import annotations

import hashlib

import torch.distributed as dist

from dspark_sim.kernels.decoder.sequence import Sequence


def _send(msg, group) -> None:
    dist.broadcast_object_list([msg], src=0, group=group)


def _recv(group):
    box = [None]
    dist.broadcast_object_list(box, src=0, group=group)
    return box[0]


def digest(tokens: list[int]) -> str:
    """A short fingerprint of a token list (the end-of-run agreement check)."""
    return hashlib.blake2b(repr(tokens).encode(), digest_size=8).hexdigest()


class _LoggedPages:
    """Rank 0's page allocator: what it hands out and takes back is logged for the followers."""

    def __init__(self, pages, leader: "Leader"):
        self._pages, self._leader = pages, leader

    def __getattr__(self, name):
        return getattr(self._pages, name)

    def attach(self, seq) -> None:
        self._pages.attach(seq)
        self._leader.log("attach", seq)

    def reserve(self, seq, tokens: int) -> bool:
        ok = self._pages.reserve(seq, tokens)
        if ok:
            self._leader.log("reserve", seq, tokens)
        return ok

    def truncate(self, seq, tokens: int) -> None:
        self._pages.truncate(seq, tokens)
        self._leader.log("truncate", seq, tokens)

    def release(self, seq) -> None:
        self._pages.release(seq)
        self._leader.log("release", seq)


class _LoggedGraphs:
    """Rank 0's CUDA graphs: dropping them is logged, so every rank captures the same graphs
    in the same order (a capture runs the step's collectives once, eagerly, first)."""

    def __init__(self, graphs, leader: "Leader"):
        self._graphs, self._leader = graphs, leader

    def __getattr__(self, name):
        return getattr(self._graphs, name)

    def __call__(self, *args):
        return self._graphs(*args)

    def clear(self) -> None:
        self._graphs.clear()
        self._leader.log("clear_graphs", None)


class Leader:
    """Rank 0's decoder: the :class:`~.decoder.Decoder` API (the serving loop, the scheduler
    and the profiler drive it unchanged), each step and host change broadcast first."""

    def __init__(self, decoder, group):
        self.decoder, self.group = decoder, group
        decoder.pages = _LoggedPages(decoder.pages, self)
        decoder.graphs = _LoggedGraphs(decoder.graphs, self)
        self._ops: list = []
        self._keys: dict = {}  # sequence (by identity) -> the key the followers know it by
        self._seen: dict[int, Sequence] = {}
        self._steps = 0
        self._muted = 0

    def __getattr__(self, name):
        return getattr(self.decoder, name)

    def _key(self, seq) -> tuple[int, tuple | None]:
        key = self._keys.get(seq)
        if key is None:
            key = self._keys[seq] = len(self._seen)
            self._seen[key] = seq
            return key, (list(seq.tokens), seq.max_tokens, seq.temperature, seq.domain, seq.eos, seq.prompt_len)
        return key, None

    def log(self, op: str, seq, *args) -> None:
        """Record a host change (silent inside :meth:`finish`, which every rank runs itself)."""
        if not self._muted:
            key, new = self._key(seq) if seq is not None else (None, None)
            self._ops.append((op, key, new, args))

    def _broadcast(self, **msg) -> None:
        ops, self._ops = self._ops, []
        _send({"ops": ops, **msg}, self.group)

    def launch(self, decode: list, prefill: list):
        """Broadcast the step and the host changes before it, then launch it here."""
        keys = [self._key(s)[0] for s in decode], [(self._key(s)[0], int(n)) for s, n in prefill]
        self._broadcast(launch=keys, step=self._steps)
        pending = self.decoder.launch(decode, prefill)
        pending.tp_step = self._steps
        self._steps += 1
        return pending

    def finish(self, pending):
        """Tell the followers to finish the step too, then finish it here."""
        self._broadcast(finish=pending.tp_step)
        self._muted += 1
        try:
            return self.decoder.finish(pending)
        finally:
            self._muted -= 1

    def fake_requests(self, count: int, context: int, rng, temperature: float = 1.0, domain: int = 0):
        """Timing requests marked cached (:meth:`Decoder.fake_requests`), mirrored on every rank."""
        seqs = self.decoder.fake_requests(count, context, rng, temperature, domain)
        for s in seqs or ():
            self.log("cached", s, s.num_cached)
        if seqs:
            self.log("put", seqs[0], [self._key(s)[0] for s in seqs])
        return seqs

    def warmup(self) -> dict:
        """Every rank warms up the same shapes in the same order."""
        self._broadcast(warmup=True)
        self._muted += 1
        try:
            return self.decoder.warmup()
        finally:
            self._muted -= 1

    def decode(self, seqs: list):
        """One decode step over ``seqs``, waited for."""
        return self.finish(self.launch(seqs, []))

    def prefill(self, work: list):
        """Prompt chunks ``work``, waited for."""
        return self.finish(self.launch([], work))

    def stop(self) -> None:
        """End the followers' loops; they check their tokens against rank 0's."""
        self._broadcast(stop={k: digest(s.tokens) for k, s in self._seen.items()})


def follow(decoder, group) -> dict[int, Sequence]:
    """Replay rank 0's steps on this rank's ``decoder`` until it stops; returns the mirrored
    sequences by key. Raises RuntimeError when this rank's tokens differ from rank 0's."""
    mirrors: dict[int, Sequence] = {}
    flights: dict = {}
    while True:
        msg = _recv(group)
        for op, key, new, args in msg["ops"]:
            if new is not None:
                tokens, max_tokens, temp, domain, eos, prompt_len = new
                seq = mirrors[key] = Sequence(key, tokens, max_tokens, temp, domain, eos)
                seq.prompt_len = prompt_len
            _apply(decoder, op, mirrors.get(key), args, mirrors)
        if "launch" in msg:
            dec_keys, pre = msg["launch"]
            flights[msg["step"]] = decoder.launch([mirrors[k] for k in dec_keys],
                                                  [(mirrors[k], n) for k, n in pre])
        elif "finish" in msg:
            decoder.finish(flights.pop(msg["finish"]))
        elif "warmup" in msg:
            decoder.warmup()
        elif "stop" in msg:
            bad = [k for k, d in msg["stop"].items() if digest(mirrors[k].tokens) != d]
            if bad:
                raise RuntimeError(f"rank {dist.get_rank()} holds other tokens than rank 0 for "
                                   f"{len(bad)} sequences (first: {bad[0]})")
            return mirrors


def _apply(decoder, op: str, seq, args, mirrors) -> None:
    if op == "attach":
        decoder.admit(seq)
    elif op == "reserve":
        if not decoder.pages.reserve(seq, *args):
            raise RuntimeError(f"rank {dist.get_rank()} ran out of KV pages where rank 0 did not")
    elif op == "truncate":
        decoder.pages.truncate(seq, *args)
    elif op == "release":
        decoder.release(seq)
    elif op == "cached":
        seq.num_cached = args[0]
    elif op == "put":
        decoder.pages.flush()
        decoder.rows.put([mirrors[k] for k in args[0]])
    elif op == "clear_graphs":
        decoder.graphs.clear()
    else:
        raise RuntimeError(f"unknown op {op!r} from rank 0")


__all__ = ["Leader", "follow", "digest"]
