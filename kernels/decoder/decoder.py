"""The decoder: target + drafter + caches, and the GPU work of one step.

A decode step is draft -> schedule -> verify -> accept -> rollback:

1. the drafter proposes ``block_size`` tokens per request (a CUDA graph per request tier),
   from the anchors the device keeps per request (:class:`~.rows.RowState`);
2. ``schedule_verify`` picks each request's verify length from the confidences
   (the whole block for static chains, one token without speculation); DSpark's
   production budget comes from the host, sized from lagged confidences;
3. one target forward runs every request's window (anchor + verified drafts)
   over the paged cache and, in the same graph, writes the drafter's context
   keys for those tokens (a graph per (token tier, request tier)); its metadata
   is built on the device from the verify lengths;
4. ``accept`` runs rejection sampling (greedy requests: argmax match);
5. the device moves each anchor past the accepted tokens; the host reads them a
   step later and returns the pages past them (rejected keys beyond the length
   are never read and are overwritten by the next step).

Prompt chunks run in the same table of requests (:mod:`.step`): alone (``prefill_first``
batching) or beside the decode windows (``mixed``). :meth:`Decoder.launch` enqueues a step
and returns; :meth:`Decoder.finish` commits its tokens; :meth:`Decoder.decode` and
:meth:`Decoder.prefill` do both.
"""
from __future__ import annotations

from collections import deque

import numpy as np
import torch

from dspark_sim.kernels.decoder import step as steps
from dspark_sim.kernels.decoder.attention import plan
from dspark_sim.kernels.decoder.batch import expand, ragged_batch
from dspark_sim.kernels.decoder.graphs import Graphs, token_tier
from dspark_sim.kernels.decoder.model import build_caches, build_models
from dspark_sim.kernels.decoder.rows import RowState
from dspark_sim.kernels.decoder.step import StepStats
from dspark_sim.kernels.decoder.synthetic import Synthetic

__all__ = ["Decoder", "StepStats"]

# Programs a CPU launch plans for (a GPU's are its SMs): the CPU runs Triton programs one after
# another, so splitting keys over a GPU's 16 splits only multiplies the work; 4 keeps the
# split-and-combine path in use.
CPU_PROGRAMS = 4


class Decoder:
    """Target + drafter + caches for one model; steps launched and finished."""

    def __init__(self, spec, conf, sps=None, checkpoint=None, draft_checkpoint=None,
                 init_std: float = 0.02, acceptance=None, shard=None):
        self.spec, self.conf, self.shard = spec, conf, shard
        self.device = torch.device(conf.device)
        self.target, self.drafter = build_models(spec, conf, checkpoint, draft_checkpoint, init_std)
        if shard is not None:  # one rank of a tensor-parallel group: keep its slice (:mod:`.shard`)
            from dspark_sim.kernels.decoder.shard import local_spec, shard_models
            shard_models(self.target, self.drafter, shard)
            self.spec = local_spec(spec, shard.world)
            for model in (self.target, self.drafter):
                if model is not None:
                    model.spec = self.spec
        self.logit_buffers = self._logit_buffers()  # before the KV cache takes the free memory
        self.cache, self.draft_cache, self.pages, self.rope = build_caches(self.spec, conf, self.drafter, shard)
        self.rows = RowState(conf.max_running_requests, self.device)
        self.num_sms = (torch.cuda.get_device_properties(self.device).multi_processor_count
                        if self.device.type == "cuda" else CPU_PROGRAMS)
        self._setup(sps, acceptance)

    def _setup(self, sps, acceptance) -> None:
        """The per-method state: graphs, SPS table, lag, synthetic acceptance, kernels."""
        conf, spec = self.conf, self.spec
        # the torch MoE reference splits tokens by expert on the host: no graphs for it
        self.graphs = Graphs(conf.cuda_graphs and self.device.type == "cuda"
                             and not (spec.is_moe and conf.attention == "torch"))
        self.pad_prefill = self.graphs.enabled  # small prompt steps padded to graph tiers (tests: eager too)
        self.sps = sps.to(self.device) if sps is not None else None
        if conf.method == "dspark" and conf.scheduler != "full" and sps is None:
            raise ValueError("the dspark scheduler needs an SPS table (sps=...)")
        self.sps_host = _host_table(sps) if sps is not None else None
        self.lag: deque = deque(maxlen=conf.lag_steps + 1)
        drafter_name = "mtp" if conf.method == "static" else "dspark"
        self.synthetic = Synthetic(spec.name, drafter_name, conf.seed, acceptance) \
            if conf.synthetic else None
        # A synthetic head already reports STS-calibrated confidences (calibration "sts").
        temps = conf.temperatures
        if self.synthetic is not None and self.synthetic.calibrated:
            temps = (1.0,) * len(temps)
        self.temps_host = np.array(temps, np.float64)
        self.temps = torch.tensor(temps, dtype=torch.float32, device=self.device)
        self._kernels()

    def set_sps(self, sps) -> None:
        """Schedule from another SPS table (device tensors; the host's copy follows)."""
        self.sps, self.sps_host = sps.to(self.device), _host_table(sps)

    def _logit_buffers(self):
        """``(half, full)`` logits buffers of the largest graph's rows, shared by the verify
        and prefill graphs; None without CUDA graphs (eager steps allocate their own)."""
        if not self.conf.cuda_graphs:
            return None
        rows = max(token_tier(self.conf.max_running_requests * self.conf.window), steps.PREFILL_GRAPH_TOKENS)
        V, dtype = self.spec.vocab_size, self.target.embed.dtype
        return (torch.empty(rows, V, dtype=dtype, device=self.device),
                torch.empty(rows, V, dtype=torch.float32, device=self.device))

    def warmup(self) -> dict:
        """Compile and capture every step shape before serving (see :mod:`.warmup`)."""
        from dspark_sim.kernels.decoder.warmup import warm_up
        return warm_up(self)

    def variant(self, conf, drafter, sps=None, acceptance=None) -> "Decoder":
        """A decoder running ``conf``'s method with ``drafter`` (or None) over this one's
        target, caches and pages (timing several methods on one copy of the weights).
        The drafter's layers must fit the draft cache."""
        if drafter is not None and len(drafter.layers) > len(self.draft_cache.k):
            raise ValueError("the drafter has more layers than the draft cache")
        other = object.__new__(Decoder)
        for name in ("spec", "device", "target", "cache", "draft_cache", "pages", "rope", "num_sms",
                     "logit_buffers", "rows", "shard"):
            setattr(other, name, getattr(self, name))
        other.conf, other.drafter = conf, drafter
        other._setup(sps, acceptance)
        self.pages.drop_cached()  # cached pages hold this drafter's context keys, not the variant's
        return other

    def _kernels(self) -> None:
        if self.conf.kernels == "triton":
            from dspark_sim.kernels.accept import accept
            from dspark_sim.kernels.schedule_verify import schedule_verify
        else:
            from dspark_sim.kernels.reference import accept_ref as accept
            from dspark_sim.kernels.reference import schedule_verify_ref as schedule_verify
        self._accept, self._schedule = accept, schedule_verify

    # -- admission -------------------------------------------------------------
    def admit(self, seq) -> None:
        """Give ``seq`` a page-table row, the cached pages its prompt starts with (prefix
        cache: ``num_cached`` > 0), and a difficulty in synthetic mode."""
        self.pages.attach(seq)
        self.pages.match(seq)
        if self.synthetic is not None and seq.difficulty is None:
            self.synthetic.admit(seq)

    def release(self, seq) -> None:
        """Return ``seq``'s pages and row (finished or preempted)."""
        self.pages.release(seq)
        seq.num_cached = 0

    def _features(self) -> tuple[int, ...]:
        """The target layers whose outputs the drafter reads (none without a drafter)."""
        return self.drafter.features if self.drafter is not None else ()

    def sync(self) -> None:
        """Wait for the device (step timing)."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def group(self) -> int:
        return self.spec.num_heads // self.spec.num_kv_heads

    def agree(self, *tensors: torch.Tensor) -> None:
        """Make every rank hold rank 0's ``tensors`` (in place): decisions drawn from a random
        stream (drafts, accepted tokens), as SGLang's DSpark worker broadcasts them across its
        TP group. Nothing on one GPU."""
        if self.shard is not None:
            for t in tensors:
                self.shard.broadcast_(t)

    # -- steps --------------------------------------------------------------------
    def launch(self, decode: list, prefill: list):
        """Enqueue a step (decode windows of ``decode``, prompt chunks ``prefill``) and
        return its :class:`~.step.Pending` without waiting."""
        return steps.launch(self, decode, prefill)

    def finish(self, pending) -> StepStats:
        """Wait for a launched step and commit its tokens."""
        return steps.finish(self, pending)

    def prefill(self, work: list[tuple[object, int]]) -> StepStats:
        """Run ``n`` more prompt tokens for each ``(seq, n)`` and wait; sample the first token
        of sequences whose prompt is complete. Pages must have been reserved."""
        return self.finish(self.launch([], work))

    def decode(self, seqs: list) -> StepStats:
        """One speculative step over ``seqs`` and wait (pages for ``len + block_size`` reserved)."""
        return self.finish(self.launch(seqs, []))

    def _draft(self, rows, temp, rp: int):
        """``(window [rp, block_size + 1]: anchor then drafts, their distributions [rp, block_size, V],
        confidence logits [rp, block_size])`` for the requests of ``rows [rp]``."""
        def fn(rows, temp):
            anchors, pos = self.rows.gather(rows)
            batch = self.drafter.batch(pos, rows, self.pages)
            drafts, probs, conf = self.drafter(anchors, batch, temp, self.rope, self.draft_cache,
                                               self.conf.attention, self.num_sms)
            return torch.cat([anchors[:, None], drafts], dim=1), probs, conf
        return self.graphs(("draft", rp, self.drafter.block_size), fn, rows, temp)

    def _verify_lengths(self, seqs, rp: int, conf_logit):
        """``(verify_len [rp] int32 on the device, a bound on its sum the host knows, the
        synthetic accept runs [R] or None, the budget tensor or None)``."""
        conf, R, g = self.conf, len(seqs), self.conf.block_size
        top = conf.max_verify_len or g + 1
        vlen = torch.zeros(rp, dtype=torch.int32, device=self.device)
        run = None
        if self.synthetic is not None and g:
            p_true, c = self.synthetic.step(seqs, g)
            run = torch.from_numpy(self.synthetic.accept(p_true, g)).to(self.device, non_blocking=True)
            confidence = torch.from_numpy(c.astype(np.float32)).to(self.device, non_blocking=True)
        elif conf_logit is not None:
            c, confidence = None, torch.sigmoid(conf_logit[:R])
        if g == 0 or conf.method == "static" or conf.scheduler == "full":
            vlen[:R] = 1 if g == 0 else top
            return vlen, R * (1 if g == 0 else top), run, None
        self.lag.append(c if c is not None else _LagCopy(confidence))
        kw = dict(min_verify_len=conf.min_verify_len, max_verify_len=conf.max_verify_len,
                  survival_eps=conf.survival_eps)
        bound = R * top
        if conf.scheduler == "algorithm1" or conf.lag_steps == 0:
            lens, budget, _ = self._schedule(confidence, self.temps, self.sps, mode=conf.scheduler, **kw)
        elif len(self.lag) > conf.lag_steps:  # the host sizes K from lag_steps steps ago
            k = host_budget(_numpy(self.lag[0]), R, self.temps_host, self.sps_host,
                            self.sps.max_batch_tokens, conf)
            lens, budget, _ = self._schedule(confidence, self.temps, self.sps, budget_k=k, **kw)
            bound = min(bound, R * conf.min_verify_len + k)
        else:  # until then the current confidences size it, as the lag will (same kernel)
            lens, budget, _ = self._schedule(confidence, self.temps, self.sps, lag_conf=confidence, **kw)
        vlen[:R] = lens
        return vlen, bound, run, budget

    def _forward(self, src, q_len, start, rows, src_start, nl, T: int, L: int, shape):
        """Target logits ``[L, V]`` of a request table: ``T`` tokens laid out by ``q_len`` and
        ``start``, ids gathered from ``src``; logit rows ``nl[r]`` per request (its last
        ones), or every token when ``nl`` is None. Writes the drafter's context too."""
        batch = ragged_batch(q_len, start, rows, T, src_start, self.pages)
        hidden, feats = self.target(src[batch.input_ids], batch, self.cache, self.rope, shape,
                                    self.conf.attention, self._features())
        if self.drafter is not None:
            self.drafter.append_context(feats, batch, batch.slots(), self.rope, self.draft_cache,
                                        self.conf.attention)
        if nl is not None:
            own, k, valid, _ = expand(nl.to(torch.int32), L)
            first = batch.q_start + batch.q_len - nl.to(torch.int32)
            hidden = hidden[torch.where(valid, first[own] + k, 0).long()]
        else:  # padded tokens: the attention leaves them unwritten; their (sink) logits must be finite
            hidden = torch.where((batch.token_rows != self.pages.dummy_row)[:, None], hidden, 0)
        bufs = self.logit_buffers
        if bufs is not None and hidden.shape[0] <= bufs[0].shape[0]:
            return self.target.logits_into(hidden, *bufs)
        return self.target.logits(hidden)

    def _verify(self, win, vlen, rows, tp: int, rp: int):
        """Target logits ``[tp, V]`` of every window row (a graph per (token tier, request
        tier)); ``win [rp, width]`` anchor then drafts, ``vlen [rp]`` rows of each verified."""
        width = win.shape[1]
        shape = plan(width, rp, self.spec.num_kv_heads, self.group(), self.num_sms)

        def fn(win, vlen, rows):
            src_start = torch.arange(rp, dtype=torch.int32, device=win.device) * width
            return self._forward(win.reshape(-1), vlen, self.rows.pos[rows], rows, src_start, None,
                                 tp, tp, shape)
        return self.graphs(("verify", tp, rp), fn, win, vlen, rows)

    def _prefill_forward(self, src, q_len, start, rows, src_start, nl, T: int, L: int, S: int,
                         max_q: int, graph: bool):
        """Logits ``[L, V]`` of a step with prompt chunks (requests of at most ``max_q``
        tokens): a graph per (T, S) tier, else eager."""
        shape = plan(max_q, S, self.spec.num_kv_heads, self.group(), self.num_sms)

        def fn(src, q_len, start, rows, src_start, nl):
            return self._forward(src, q_len, start, rows, src_start, nl, T, L, shape)
        if graph:
            return self.graphs(("prefill", T, S), fn, src, q_len, start, rows, src_start, nl)
        return fn(src, q_len, start, rows, src_start, nl)

    # -- timing helpers -------------------------------------------------------------
    def fake_prefill(self, seq) -> bool:
        """Mark ``seq``'s prompt as cached without running it (timing only: the cache
        keeps whatever it holds). Returns False when pages run out."""
        if seq.row is None:
            self.admit(seq)
        if not self.pages.reserve(seq, len(seq.tokens) + self.conf.block_size):
            return False
        seq.num_cached = seq.prefill_target
        return True

    def fake_requests(self, count: int, context: int, rng, temperature: float = 1.0,
                      domain: int = 0) -> list | None:
        """``count`` decoding sequences (timing and warm-up): ``context`` random prompt tokens
        marked cached (not run) and an anchor, which the device takes; None, with nothing
        left admitted, when pages run out."""
        from dspark_sim.kernels.decoder.sequence import Sequence

        vocab, seqs = self.spec.vocab_size, []
        for i in range(count):
            s = Sequence(i, rng.integers(0, vocab, context).tolist(), 1 << 30, temperature, domain)
            s.tokens.append(int(rng.integers(0, vocab)))
            seqs.append(s)
            if not self.fake_prefill(s):  # admits: a row, and a synthetic difficulty
                for t in seqs:
                    self.release(t)
                return None
        self.pages.flush()
        self.rows.put(seqs)
        return seqs

    def randomize_cache(self, seed: int = 0) -> None:
        """Fill both caches with N(0, 1) values, so timing never runs on zeros."""
        gen = torch.Generator(device=self.device).manual_seed(seed)
        if hasattr(self.target, "randomize_cache"):  # caches a target keeps itself (DeepSeek-V4)
            self.target.randomize_cache(gen)
        for c in (self.cache, self.draft_cache):
            if c is None:
                continue
            for t in (c.k, c.v):
                for layer in t:
                    layer.normal_(generator=gen)

    # -- inspection -----------------------------------------------------------------
    def score(self, tokens: list[int], last: int | None = None) -> torch.Tensor:
        """Target logits ``[len(tokens), V]`` fp32 of a whole sequence in one eager forward (a
        scratch row); ``last``: only the last rows' (a long sequence's logits would not fit)."""
        from dspark_sim.kernels.decoder.scoring import score_steps, whole

        n = len(tokens)
        return score_steps(self, [tokens], whole(n), [range(n - (last or n), n)])[0]

    def cached_kv(self, seq) -> tuple[torch.Tensor, torch.Tensor]:
        """Target keys and values of ``seq``'s cached positions ``[L, num_cached, KVH, D]``."""
        pos = torch.arange(seq.num_cached, device=self.device)
        table = torch.tensor(seq.pages, dtype=torch.int64, device=self.device)
        P = self.pages.page_size
        slots = table[pos // P] * P + pos % P
        return self.cache.k[:, slots], self.cache.v[:, slots]


class _LagCopy:
    """Confidences on their way to the host: a pinned copy and the event that ends it."""

    def __init__(self, confidence: torch.Tensor):
        self.host = torch.empty(confidence.shape, dtype=confidence.dtype, pin_memory=confidence.is_cuda)
        self.host.copy_(confidence, non_blocking=True)
        self.event = None
        if confidence.is_cuda:
            self.event = torch.cuda.Event()
            self.event.record()

    def numpy(self) -> np.ndarray:
        if self.event is not None:
            self.event.synchronize()  # long passed with a lag of two steps: the step ran
        return self.host.numpy().astype(np.float64)


def _numpy(entry) -> np.ndarray:
    return entry.numpy() if isinstance(entry, _LagCopy) else np.asarray(entry, np.float64)


def _host_table(sps):
    """The SPS table ``sps`` (device tensors) as the simulator's host table."""
    from dspark_sim.cost.sps import SpsAdditiveCostTable, SpsCostTable

    d = sps.to_json_dict()
    return SpsAdditiveCostTable.from_json_dict(d) if "bias_seconds" in d else SpsCostTable.from_json_dict(d)


def host_budget(lag_conf: np.ndarray, num_reqs: int, temps: np.ndarray, table, max_batch_tokens, conf) -> int:
    """DSpark's production budget K on the host (``schedule_verify``'s rule): the first argmax
    of Theta over the lagged confidences ``[R_lag, block_size]`` after STS, with ``num_reqs``
    requests now."""
    from dspark_sim.speculation.dspark import VerifyLimits, candidates, production_budget

    c = np.clip(lag_conf, 0.0, 1.0)
    with np.errstate(divide="ignore", over="ignore"):
        calibrated = 1.0 / (1.0 + ((1.0 - c) / c) ** (1.0 / temps[None, :c.shape[1]]))
    top = conf.max_verify_len or conf.block_size + 1
    limits = VerifyLimits(0, top - 1, conf.survival_eps, max_batch_tokens or (1 << 30))
    cands = candidates(np.cumprod(calibrated, axis=1), limits)
    return production_budget(cands, num_reqs, table.steps_per_sec_array, limits)
