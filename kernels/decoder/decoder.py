"""The step loop: chunked prefill, and speculative decode steps over R requests.

A decode step is draft -> schedule -> verify -> accept -> rollback:

1. the drafter proposes ``gamma`` tokens per request (a CUDA graph per request tier);
2. ``schedule_verify`` picks each request's verify length from the confidences
   (the whole block for static chains, one token without speculation);
3. one target forward runs every request's window (anchor + verified drafts)
   over the paged cache and, in the same graph, writes the drafter's context
   keys for those tokens (a graph per (token tier, request tier));
4. ``accept`` runs rejection sampling (greedy requests: argmax match);
5. each request keeps the cache of its anchor and accepted drafts; pages past
   them go back to the pool (rejected keys beyond the length are never read and
   are overwritten by the next step).
"""
from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass

import numpy as np
import torch

from dspark_sim.kernels.decoder.attention import plan
from dspark_sim.kernels.decoder.batch import make_batch
from dspark_sim.kernels.decoder.graphs import Graphs, request_tier, token_tier
from dspark_sim.kernels.decoder.model import build_caches, build_models
from dspark_sim.kernels.decoder.synthetic import Synthetic


@dataclass(slots=True)
class StepStats:
    """What one step did (the ``steps.csv`` columns the decoder knows)."""

    decode_reqs: int = 0
    prefill_tokens: int = 0
    verify_tokens: int = 0
    budget_k: int = 0
    accepted_tokens: int = 0  # tokens emitted (accepted drafts + one per request), as the simulator
    draft_s: float = 0.0
    verify_s: float = 0.0  # the target's verify forward (device time; host time on the CPU)


class Decoder:
    """Target + drafter + caches for one model; ``prefill`` and ``decode`` steps."""

    def __init__(self, spec, conf, sps=None, checkpoint=None, draft_checkpoint=None,
                 init_std: float = 0.02, acceptance=None):
        self.spec, self.conf = spec, conf
        self.device = torch.device(conf.device)
        self.target, self.drafter = build_models(spec, conf, checkpoint, draft_checkpoint, init_std)
        self.logit_buffers = self._logit_buffers()  # before the KV cache takes the free memory
        self.cache, self.draft_cache, self.pages, self.rope = build_caches(spec, conf, self.drafter)
        self.num_sms = (torch.cuda.get_device_properties(self.device).multi_processor_count
                        if self.device.type == "cuda" else 132)
        self._setup(sps, acceptance)

    def _setup(self, sps, acceptance) -> None:
        """The per-method state: graphs, SPS table, lag, synthetic acceptance, kernels."""
        conf, spec = self.conf, self.spec
        # the torch MoE reference splits tokens by expert on the host: no graphs for it
        self.graphs = Graphs(conf.cuda_graphs and self.device.type == "cuda"
                             and not (spec.is_moe and conf.attention == "torch"))
        self.sps = sps.to(self.device) if sps is not None else None
        if conf.method == "dspark" and conf.scheduler != "full" and sps is None:
            raise ValueError("the dspark scheduler needs an SPS table (sps=...)")
        self.lag: deque = deque(maxlen=conf.lag_steps + 1)
        drafter_name = "mtp" if conf.method == "static" else "dspark"
        self.synthetic = Synthetic(spec.name, drafter_name, conf.seed, acceptance) \
            if conf.synthetic else None
        # A synthetic head already reports STS-calibrated confidences (calibration "sts").
        temps = conf.temperatures
        if self.synthetic is not None and self.synthetic.calibrated:
            temps = (1.0,) * len(temps)
        self.temps = torch.tensor(temps, dtype=torch.float32, device=self.device)
        self._kernels()

    def _logit_buffers(self):
        """``(half, full)`` logits buffers of the largest verify tier, shared by the verify
        graphs; None without CUDA graphs (eager steps allocate their own)."""
        if not self.conf.cuda_graphs:
            return None
        rows = token_tier(self.conf.max_running_requests * self.conf.window)
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
                     "logit_buffers"):
            setattr(other, name, getattr(self, name))
        other.conf, other.drafter = conf, drafter
        other._setup(sps, acceptance)
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
        """Give ``seq`` a page-table row (and a difficulty, in synthetic mode)."""
        self.pages.attach(seq)
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

    # -- prefill ----------------------------------------------------------------
    def prefill(self, work: list[tuple[object, int]]) -> StepStats:
        """Run ``n`` more prompt tokens for each ``(seq, n)``; sample the first token of
        sequences whose prompt is complete. Pages must have been reserved."""
        self.pages.flush()
        seqs = [s for s, _ in work]
        n = np.array([k for _, k in work], np.int64)
        start = np.array([s.num_cached for s in seqs], np.int64)
        ids = np.concatenate([s.tokens[a:a + k] for s, a, k in zip(seqs, start, n)])
        rows = np.array([s.row for s in seqs], np.int64)
        batch = make_batch(ids, n, start + n, rows, self.pages)
        shape = plan(int(n.max()), len(seqs), self.spec.num_kv_heads, self.group(), self.num_sms)
        hidden, feats = self.target(batch.input_ids, batch, self.cache, self.rope, shape,
                                    self.conf.attention, self._features())
        if self.drafter is not None:
            self.drafter.append_context(feats, batch, batch.slots(), self.rope, self.draft_cache,
                                        self.conf.attention)
        done = [i for i, s in enumerate(seqs) if start[i] + n[i] >= s.prefill_target]
        sample = [i for i in done if not seqs[i].num_outputs]
        for s, k in zip(seqs, n):
            s.num_cached += int(k)
            s.num_steps += 1
        if sample:
            last = torch.tensor(np.cumsum(n)[sample] - 1, device=self.device)
            logits = self.target.logits(hidden[last])
            temp = torch.tensor([seqs[i].temperature for i in sample], dtype=torch.float32,
                                device=self.device)
            tokens = self._sample(logits, temp).tolist()
            for i, tok in zip(sample, tokens):
                seqs[i].extend([tok])
        return StepStats(prefill_tokens=int(n.sum()), accepted_tokens=len(sample))

    def _sample(self, logits, temp) -> torch.Tensor:
        """One token per row from target logits, through ``accept`` with no drafts."""
        R = logits.shape[0]
        indptr = torch.arange(R + 1, dtype=torch.int32, device=self.device)
        drafts = torch.zeros(R, dtype=torch.int64, device=self.device)
        u = torch.rand(R, device=self.device)
        _, out = self._accept(logits, indptr, drafts, self._no_drafts(logits, temp), temp, u,
                              torch.rand(R, device=self.device), max_window=1)
        return out[:, 0]

    # -- decode -------------------------------------------------------------------
    def decode(self, seqs: list) -> StepStats:
        """One speculative step over ``seqs`` (pages for ``len + gamma`` reserved)."""
        conf, g = self.conf, self.conf.gamma
        R = len(seqs)
        rp = request_tier(R, conf.max_running_requests)
        self.pages.flush()
        rows = np.full(rp, self.pages.dummy_row, np.int64)
        rows[:R] = [s.row for s in seqs]
        pos = np.zeros(rp, np.int64)
        pos[:R] = [len(s.tokens) - 1 for s in seqs]
        host = np.zeros((2, rp), np.float64)
        host[0, :R] = [s.tokens[-1] for s in seqs]
        host[1, :R] = [s.temperature for s in seqs]
        dev = torch.from_numpy(host).to(self.device)
        anchors, temp = dev[0].long(), dev[1].float()
        stats = StepStats(decode_reqs=R)
        t0 = time.perf_counter()
        if self.drafter is not None:
            ev = self._events()
            drafts, probs, conf_logit = self._draft(anchors, temp, pos, rows, rp)
            win = torch.cat([anchors[:, None], drafts], dim=1)
            stats.draft_s = self._elapsed(ev, t0)
        else:
            win, probs, conf_logit = anchors[:, None], None, None
        vlen, stats.budget_k, p_true = self._verify_lengths(seqs, conf_logit)
        v0, tv = self._events(), time.perf_counter()
        logits, N = self._verify(win, vlen, pos[:R] + vlen, rows[:R], rp)
        v1, tv = self._events(), time.perf_counter() - tv
        accepted, out = self._accept_step(logits, win, probs, vlen, temp[:R], g)
        win_host = win[:R].cpu().numpy() if self.synthetic is not None else None
        accepted, out = accepted.cpu().numpy(), out.cpu().numpy()  # syncs: v1 has happened
        stats.verify_s = v0.elapsed_time(v1) / 1e3 if v0 is not None else tv
        if self.synthetic is not None and g:
            real = accepted
            accepted = self.synthetic.accept(p_true, vlen - 1)
            out = np.concatenate([win_host[:, 1:], out[np.arange(R), real][:, None]], axis=1)
            out[np.arange(R), accepted] = out[np.arange(R), g]
        stats.verify_tokens = N
        stats.accepted_tokens = self._commit(seqs, accepted, out, vlen)
        return stats

    def _events(self):
        if self.device.type != "cuda":
            return None
        start = torch.cuda.Event(enable_timing=True)
        start.record()
        return start

    def _elapsed(self, start, t0: float) -> float:
        if start is None:
            return time.perf_counter() - t0
        end = torch.cuda.Event(enable_timing=True)
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3

    def _draft(self, anchors, temp, pos, rows, rp):
        """Drafts ``[rp, gamma]``, their distributions and confidence logits."""
        batch = self.drafter.batch(pos, rows, self.pages, rp)

        def fn(anchors, temp, batch):
            return self.drafter(anchors, batch, temp, self.rope, self.draft_cache,
                                self.conf.attention, self.num_sms)
        return self.graphs(("draft", rp, self.drafter.gamma), fn, anchors, temp, batch)

    def _verify_lengths(self, seqs, conf_logit):
        """``(verify_len [R] numpy, budget_k, p_true or None)``."""
        conf, R, g = self.conf, len(seqs), self.conf.gamma
        p_true = None
        if g == 0:
            return np.ones(R, np.int64), 0, None
        if self.synthetic is not None:
            p_true, c = self.synthetic.step(seqs, g)
            confidence = torch.from_numpy(c.astype(np.float32)).to(self.device)
        elif conf_logit is not None:
            confidence = torch.sigmoid(conf_logit[:R])
        if conf.method == "static" or conf.scheduler == "full":
            top = conf.max_verify_len or g + 1
            return np.full(R, top, np.int64), R * (top - 1), p_true
        self.lag.append(confidence)
        lag = None
        if conf.scheduler == "production" and conf.lag_steps > 0:
            # until lag_steps steps have passed, the current confidences size the budget; passed
            # as the lag they give the same schedule from the kernel that every later step runs
            lag = self.lag[0] if len(self.lag) > conf.lag_steps else confidence
        vlen, budget, _ = self._schedule(
            confidence, self.temps, self.sps, min_verify_len=conf.min_verify_len,
            max_verify_len=conf.max_verify_len, survival_eps=conf.survival_eps,
            mode=conf.scheduler, lag_conf=lag)
        return vlen.cpu().numpy().astype(np.int64), int(budget.item()), p_true

    def _verify(self, win, vlen, kv_len, rows, rp):
        """Target logits ``[T_pad, V]`` of every window row; also writes draft context."""
        R, width = len(vlen), win.shape[1]
        N = int(vlen.sum())
        tp = token_tier(N) if self.graphs.enabled else N
        owner = np.repeat(np.arange(R), vlen)
        offset = np.arange(N) - np.repeat(np.cumsum(vlen) - vlen, vlen)
        src = owner * width + offset  # where each window token sits in ``win``
        batch = make_batch(src, vlen, kv_len, rows, self.pages, num_tokens=tp, num_reqs=rp)
        shape = plan(width, rp, self.spec.num_kv_heads, self.group(), self.num_sms)

        def fn(win, batch):
            ids = win.reshape(-1)[batch.input_ids]
            hidden, feats = self.target(ids, batch, self.cache, self.rope, shape,
                                        self.conf.attention, self._features())
            if self.drafter is not None:
                self.drafter.append_context(feats, batch, batch.slots(), self.rope,
                                            self.draft_cache, self.conf.attention)
            bufs = self.logit_buffers
            if bufs is not None and hidden.shape[0] <= bufs[0].shape[0]:
                return self.target.logits_into(hidden, *bufs)
            return self.target.logits(hidden)
        return self.graphs(("verify", tp, rp), fn, win, batch), N

    def _accept_step(self, logits, win, probs, vlen, temp, g):
        """Run ``accept`` over the windows: ``(accepted [R], out_tokens [R, g+1])``."""
        R, width = len(vlen), win.shape[1]
        N = int(vlen.sum())
        owner = np.repeat(np.arange(R), vlen)
        j = np.arange(N) - np.repeat(np.cumsum(vlen) - vlen, vlen)
        last = j == vlen[owner] - 1
        idx = np.zeros((2, N), np.int64)
        idx[0] = np.where(last, 0, owner * width + j + 1)  # the draft each row tests
        idx[1] = np.where(last, 0, owner * max(g, 1) + j)  # that draft's distribution
        indptr = np.concatenate([[0], np.cumsum(vlen)])
        dev = torch.from_numpy(np.concatenate([idx.ravel(), indptr])).to(self.device)
        drafts = win.reshape(-1)[dev[:N]]
        if probs is not None and bool((temp > 0).any()):
            dprobs = probs.reshape(-1, probs.shape[-1])[dev[N:2 * N]]
        else:
            dprobs = self._no_drafts(logits[:N], temp)
        indptr_t = dev[2 * N:].to(torch.int32)
        u = torch.rand(N, device=self.device)
        return self._accept(logits[:N], indptr_t, drafts, dprobs, temp, u,
                            torch.rand(R, device=self.device), max_window=g + 1)

    @staticmethod
    def _no_drafts(logits, temp):
        """Draft probabilities for rows without drafts: None (greedy) when every request
        is greedy, else zeros, so ``accept`` samples the target instead of taking argmax."""
        return torch.zeros_like(logits) if bool((temp > 0).any()) else None

    def _commit(self, seqs, accepted, out, vlen) -> int:
        """Append emitted tokens, roll the cache back to the accepted prefix;
        returns the number of tokens emitted."""
        emitted = 0
        for i, s in enumerate(seqs):
            a = int(accepted[i])
            s.num_cached = len(s.tokens) + a  # anchor + accepted drafts now cached
            emitted += s.extend([int(t) for t in out[i, :a + 1]])
            self.pages.truncate(s, s.num_cached)
            s.accepted += a
            s.verified += int(vlen[i]) - 1
            s.num_steps += 1
        return emitted

    # -- timing helpers -------------------------------------------------------------
    def fake_prefill(self, seq) -> bool:
        """Mark ``seq``'s prompt as cached without running it (timing only: the cache
        keeps whatever it holds). Returns False when pages run out."""
        if seq.row is None:
            self.admit(seq)
        if not self.pages.reserve(seq, len(seq.tokens) + self.conf.gamma):
            return False
        seq.num_cached = seq.prefill_target
        return True

    def fake_requests(self, count: int, context: int, rng, temperature: float = 1.0,
                      domain: int = 0) -> list | None:
        """``count`` decoding sequences (timing and warm-up): ``context`` random prompt tokens
        marked cached (not run) and an anchor; None, with nothing left admitted, when pages
        run out."""
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
    @torch.no_grad()
    def score(self, tokens: list[int]) -> torch.Tensor:
        """Target logits ``[len(tokens), V]`` fp32 of a whole sequence (a scratch row)."""
        from dspark_sim.kernels.decoder.sequence import Sequence

        seq = Sequence(-1, list(tokens), max_tokens=0)
        self.pages.attach(seq)
        try:
            if not self.pages.reserve(seq, len(tokens)):
                raise RuntimeError("no pages left to score the sequence")
            self.pages.flush()
            n = np.array([len(tokens)])
            batch = make_batch(np.array(tokens), n, n, np.array([seq.row]), self.pages)
            shape = plan(len(tokens), 1, self.spec.num_kv_heads, self.group(), self.num_sms)
            hidden, _ = self.target(batch.input_ids, batch, self.cache, self.rope, shape,
                                    self.conf.attention)
            return self.target.logits(hidden)
        finally:
            self.pages.release(seq)

    def cached_kv(self, seq) -> tuple[torch.Tensor, torch.Tensor]:
        """Target keys and values of ``seq``'s cached positions ``[L, num_cached, KVH, D]``."""
        pos = torch.arange(seq.num_cached, device=self.device)
        table = torch.tensor(seq.pages, dtype=torch.int64, device=self.device)
        P = self.pages.page_size
        slots = table[pos // P] * P + pos % P
        return self.cache.k[:, slots], self.cache.v[:, slots]
