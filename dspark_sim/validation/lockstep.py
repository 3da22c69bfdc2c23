"""The decoder's serving loop and the simulator's replica on the same arrivals and the same step prices.

Timing differences hide scheduling differences: a decoder step that runs 3 % longer than
the profile says shifts every later arrival into another step, and the two runs stop being
comparable step by step. Here the decoder (the tiny CPU one, or any other) serves a trace on
a virtual clock (:class:`PricedClock`) on which each of its steps lasts exactly what the
simulator's cost model prices that step's work at, launched back to back as the overlapped
loop launches them. The decoder's own scheduler, admission, page reservations, preemption
and overlap decide what goes into each step; the simulator decides its own with the same
prices (:func:`lockstep_case` runs both on one trace). Without speculation nothing is random,
so the two step sequences must agree row for row; :func:`first_difference` names the first
step where they do not, and :func:`composition` sums up how the steps were filled. With
drafts the two draw acceptance from the same model but different random streams: their steps
differ from the first draw, their sums only by the draws' noise.

The decoder here is the tiny CPU one (:func:`~dspark_sim.kernels.decoder.tiny.tiny_decoder`)
at the deployment's limits, with its forwards replaced by uniform logits
(:func:`null_forwards`): under synthetic acceptance what goes into a step does not depend on
them. Needs torch (the decoder).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from dspark_sim.cost.base import DraftWork, StepWork
from dspark_sim.cost.hot import PrefillDuty, duty_terms
from dspark_sim.metrics.record import RequestColumns, StepColumns

# the columns of a step's composition (steps.csv), independent of timing; the running count is
# left out: the simulator counts a request from admission, the decoder from its first chunk
COMPOSITION = ("decode_reqs", "prefill_reqs", "prefill_tokens", "verify_tokens")
STEP_COLUMNS = ("step_s", "start_s", "running_reqs") + COMPOSITION
REQUEST_COLUMNS = ("ttft_ms", "tpot_ms", "finish_s", "output_tokens", "num_preemptions")


class PricedClock:
    """The serving clock of :func:`~dspark_sim.kernels.decoder.engine.serve` on virtual time:
    host work takes none but an eager step's launch (:class:`PricedDecoder`), idle gaps are
    skipped, and a step ends when :class:`PricedDecoder` says its priced work does."""

    realtime = False

    def __init__(self):
        self.t = 0.0

    def now(self) -> float:
        return self.t

    def wait_until(self, t: float) -> None:
        self.t = max(self.t, t)


@dataclass
class _Launched:
    launched_s: float
    prefill_tokens: int
    prefill_reqs: int
    attn2: float
    longest: int  # the longest prompt chunk
    launch_s: float = 0.0  # the host's time to launch it (an eager step's)
    lengths: tuple = ()  # the decoding requests' contexts as launched (their tokens in flight too)


@dataclass
class PricedDecoder:
    """A decoder whose steps run for real (tokens, pages, acceptance) and last, on ``clock``,
    what ``cost`` prices their work at: a step starts when it is launched or when the step
    before it ends, whichever is later (the GPU runs launched steps in order). Launching an
    eager step takes the host the profile's launch time, at most until the step ends (its
    kernels run while the host launches the rest), as in the simulator's timeline
    (``serving/launch.py``): the next plan, and the last step's read, come after it."""

    decoder: object
    cost: object
    clock: PricedClock
    draft_kind: str | None = None
    block_size: int = 0
    gpu_free_s: float = 0.0
    _launched: dict = field(default_factory=dict)

    def __post_init__(self):
        window, self._every = duty_terms(self.cost)
        self._duty = PrefillDuty(window)  # the prompt steps' recent share, as the simulator keeps it (cost.hot)

    def __getattr__(self, name):  # conf, pages, admit, release, device: the decoder's
        if name == "decoder":
            raise AttributeError(name)
        return getattr(self.decoder, name)

    def launch(self, decode: list, prefill: list):
        in_flight = bool(self._launched)
        lengths = tuple(len(s.tokens) + s.pending for s in decode)  # (before the launch moves them on)
        pending = self.decoder.launch(decode, prefill)
        # the chunks' starts: launching moved the cached counts on by the chunk
        attn2 = sum(n * (s.num_cached - n + n / 2) for s, n in prefill)
        prompt = sum(int(n) for _, n in prefill)
        launch = getattr(self.cost, "launch_s", None)  # (its verify tokens taken as one a row: exact without drafts)
        put = _Launched(self.clock.now(), prompt, len(prefill), float(attn2), max((int(n) for _, n in prefill), default=0),
                        launch(StepWork(len(decode), len(decode), 0, prompt, len(prefill), 0.0, None)) if launch else 0.0,
                        lengths)
        self._launched[id(pending)] = put
        if put.launch_s and not in_flight:  # nothing before it to land: the next plan waits for this launch
            self.clock.t = max(self.clock.t, min(put.launched_s + put.launch_s, self._end(put, len(decode))))
        return pending

    def _end(self, put: _Launched, dec: int) -> float:
        """When a launched step ends, priced with its work as launched (the step before it landed)."""
        start = max(put.launched_s, self.gpu_free_s)
        return start + sum(self.cost.breakdown(self._work(put, dec, dec, put.lengths, start)).values())

    def _work(self, put: _Launched, dec: int, verify_tokens: int, lengths, start: float) -> StepWork:
        draft = DraftWork(self.draft_kind, dec, self.block_size, sum(lengths)) if dec and self.draft_kind else None
        work = StepWork(dec, verify_tokens, sum(lengths), put.prefill_tokens, put.prefill_reqs, put.attn2,
                        draft, max(lengths, default=0), dec + put.prefill_reqs, prefill_longest=put.longest)
        return replace(work, prefill_duty=self._duty.at(start)) if put.prefill_tokens or self._every else work

    def finish(self, pending):
        # the steps before this one are committed, this one not yet: a decoding request's
        # length is the context this step read (as the simulator counts it)
        lengths = [len(s.tokens) for s in pending.decode]
        stats = self.decoder.finish(pending)
        put = self._launched.pop(id(pending))
        start = max(put.launched_s, self.gpu_free_s)
        work = self._work(put, len(pending.decode), stats.verify_tokens, lengths, start)
        self.gpu_free_s = start + sum(self.cost.breakdown(work).values())  # as the simulator prices a step
        if put.prefill_tokens:
            self._duty.add(start, self.gpu_free_s)
        self.clock.t = max(self.clock.t, self.gpu_free_s)
        for nxt in self._launched.values():  # the step launched after it: its launch, to its end
            if nxt.launch_s:
                self.clock.t = max(self.clock.t, min(nxt.launched_s + nxt.launch_s,
                                                     self._end(nxt, len(nxt.lengths))))
        return stats


def null_forwards(decoder) -> None:
    """Replace ``decoder``'s drafter and target forwards by uniform logits of the same shapes
    (drafts: the anchor repeated; confidences: even). Under synthetic acceptance, which decides
    how many drafts each request keeps, nothing that goes into a step depends on the logits:
    the scheduler, the pages, the verify lengths and the record run as they are, in a fraction
    of the time (the CPU's reference attention pads every request to the longest)."""
    import torch

    vocab = decoder.spec.vocab_size

    def draft(rows, temp, rp):
        anchors = decoder.rows.gather(rows)[0]
        block = decoder.drafter.block_size
        return (anchors[:, None].repeat(1, block + 1), torch.full((rp, block, vocab), 1.0 / vocab),
                torch.zeros(rp, block))

    decoder._draft = draft
    decoder._verify = lambda win, vlen, rows, tp, rp: torch.zeros(tp, vocab)
    decoder._prefill_forward = lambda src, q_len, start, rows, src_start, nl, T, L, S, max_q, graph: \
        torch.zeros(L, vocab)


def serve_priced(decoder, seqs: list, cost, draft_kind: str | None, block_size: int):
    """``seqs`` served by ``decoder``'s loop (overlapped) on a :class:`PricedClock`; its :class:`Run`."""
    from dspark_sim.kernels.decoder.engine import serve

    clock = PricedClock()
    priced = PricedDecoder(decoder, cost, clock, draft_kind, block_size)
    return serve(priced, seqs, clock=clock)


def first_difference(real: StepColumns, sim: StepColumns, columns=COMPOSITION) -> int | None:
    """The first step (row index) whose composition differs between two ``steps.csv`` column
    sets, or None when they agree over the shorter one and have as many rows."""
    n = min(len(real), len(sim))
    for i in range(n):
        if any(int(getattr(real, c)[i]) != int(getattr(sim, c)[i]) for c in columns):
            return i
    return None if len(real) == len(sim) else n


def composition(steps: StepColumns) -> dict:
    """How a run's steps were filled: counts of prefill-only, mixed and decode-only steps,
    mean decode requests, verify and prefill tokens per step, and the total time."""
    pre, dec = steps.prefill_tokens, steps.decode_reqs
    n = max(len(pre), 1)
    return {"steps": int(len(pre)), "prefill_only": int(((pre > 0) & (dec == 0)).sum()),
            "mixed": int(((pre > 0) & (dec > 0)).sum()), "decode_only": int(((pre == 0) & (dec > 0)).sum()),
            "mean_decode_reqs": float(dec.sum() / n), "mean_verify_tokens": float(np.sum(steps.verify_tokens) / n),
            "mean_prefill_tokens": float(pre.sum() / n), "busy_s": float(np.sum(steps.step_s)),
            "mean_running": float(np.sum(steps.running_reqs) / n)}




def lockstep_case(out, arrival, prompt, output, method: str, batching: str, **deployment) -> dict:
    """One trace (``arrival`` s, ``prompt`` and ``output`` tokens) served by the simulator (the
    fidelity cases' scenario for ``method`` under ``batching``, ``deployment`` keys changed:
    Qwen3-8B on the H200, the shipped profile) and by the decoder's loop on the same step prices,
    both run records under ``out``; their compositions, request metrics and the relative errors
    (sim - decoder) / decoder."""
    from pathlib import Path

    import yaml

    from dspark_sim.serving.simulator import build_context
    from dspark_sim.kernels.decoder.engine import write_csvs
    from dspark_sim.metrics.collector import Collector
    from dspark_sim.metrics.record import read_requests, read_steps
    from dspark_sim.run import run_scenario
    from dspark_sim.scenario import load_scenario
    from dspark_sim.validation.cases import CASE_METHODS, DEPLOYMENT, GPU, MODEL, write_trace

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_trace(out / "trace.csv", arrival, prompt, output)
    spec = dict(CASE_METHODS[method])
    if "sps_table" in spec:
        from dspark_sim.validation import cases

        spec["sps_table"] = str(Path(cases.__file__).resolve().parents[2] / "profiles" / GPU / "validation" / "cases"
                                / spec["sps_table"])
    (out / "scenario.yaml").write_text(yaml.safe_dump(
        {"name": f"lockstep-{method}", "model": MODEL, "gpu": GPU, "seed": 0,
         "workload": {"trace": "trace.csv", "format": "azure", "domain": "math"},
         "deployment": {**DEPLOYMENT, "batching": batching, **deployment}, "speculation": spec}))
    scenario = load_scenario(out / "scenario.yaml")
    run_scenario(scenario, out / "sim", plots=False, show_progress=False)
    ctx = build_context(scenario, Collector(None, 1, lambda: 0.0))
    decoder, kind, block = tiny_at(scenario, ctx.kv_capacity_tokens)
    write_csvs(serve_priced(decoder, _sequences(arrival, prompt, output), ctx.cost, kind, block), out / "decoder")
    sides = {}
    for side in ("decoder", "sim"):
        steps = read_steps(out / side / "steps.csv", STEP_COLUMNS)
        req = read_requests(out / side / "requests.csv", REQUEST_COLUMNS)
        sides[side] = {"steps": steps, "summary": {**composition(steps), **_request_metrics(req)}}
    dec, sim = sides["decoder"]["summary"], sides["sim"]["summary"]
    first = first_difference(sides["decoder"]["steps"], sides["sim"]["steps"])
    return {"method": method, "batching": batching, "requests": int(len(arrival)), "first_difference": first,
            "around": None if first is None else {side: excerpt(sides[side]["steps"], first) for side in sides},
            "decoder": dec, "sim": sim,
            "error": {k: sim[k] / dec[k] - 1.0 for k in ERROR_KEYS if dec.get(k)}}


def excerpt(steps: StepColumns, first: int, before: int = 2, after: int = 4) -> list[dict]:
    """The composition of the steps around step ``first`` (its index and start included)."""
    lo, hi = max(0, first - before), min(len(steps), first + after)
    return [{"step": i, "start_s": round(float(steps.start_s[i]), 6),
             **{c: int(getattr(steps, c)[i]) for c in ("running_reqs",) + COMPOSITION}} for i in range(lo, hi)]


ERROR_KEYS = ("output_throughput", "mean_ttft_ms", "p50_tpot_ms", "steps", "mean_decode_reqs",
              "mean_prefill_tokens", "busy_s")


def tiny_at(scenario, kv_tokens: int):
    """The tiny CPU decoder at ``scenario``'s deployment and speculation, ``kv_tokens`` of KV, its
    forwards null (:func:`null_forwards`), synthetic acceptance; (decoder, draft kind, block)."""
    from dspark_sim.kernels.decoder.config import decoder_config
    from dspark_sim.kernels.decoder.tiny import tiny_decoder

    conf = decoder_config(scenario)
    over = {"block_size": conf.block_size} if conf.block_size else {}  # none: the scenario's own
    if scenario.speculation.sps_table is not None:
        from dspark_sim.cost.sps import load_sps_table
        from dspark_sim.kernels.sps_tensors import sps_tensors

        over["sps"] = sps_tensors(load_sps_table(scenario.speculation.sps_table))
    decoder = tiny_decoder(conf.method, max_running_requests=conf.max_running_requests,
                           max_batched_tokens=conf.max_batched_tokens, batching=conf.batching, kv_tokens=kv_tokens,
                           max_model_len=10240, kv_block_tokens=conf.kv_block_tokens, scheduler=conf.scheduler,
                           lag_steps=conf.lag_steps, synthetic=conf.method != "none", agreeable=False, **over)
    null_forwards(decoder)
    kind = scenario.speculation.draft_kind if conf.method != "none" else None
    return decoder, kind, conf.block_size if kind else 0


def _sequences(arrival, prompt, output) -> list:
    from dspark_sim.kernels.decoder.sequence import Sequence
    from dspark_sim.names import DOMAINS

    rng, math_domain = np.random.default_rng(0), DOMAINS.index("math")
    return [Sequence(i, rng.integers(0, 32, int(p)).tolist(), int(o), 1.0, math_domain, arrival_s=float(a))
            for i, (a, p, o) in enumerate(zip(arrival, prompt, output))]


def _request_metrics(req: RequestColumns) -> dict:
    return {"mean_ttft_ms": float(np.mean(req.ttft_ms)), "p50_tpot_ms": float(np.nanmedian(req.tpot_ms)),
            "output_throughput": float(req.output_tokens.sum() / req.finish_s.max()),
            "preemptions": int(req.num_preemptions.sum())}
