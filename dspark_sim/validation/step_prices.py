"""Where the simulator's time goes wrong past saturation: step prices or the schedule.

Two readings of one sweep case, both from its run records (``steps.csv``):

- the busy seconds of the decoder's own steps priced by the profile (their work as the
  decoder recorded it: the step replay) against the seconds they took, and the busy seconds
  of the simulator's own steps against the same: when the two errors agree, the simulator
  filled its steps as the decoder did and the whole gap is the price of each step; when they
  differ, the schedule (admission, chunk sizes, preemption, the overlapped loop) moved work;
- the decode-only steps by running requests, the drafter's forward apart (the decoder times
  it on the GPU, ``draft_s``): measured and priced, medians in milliseconds.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from dspark_sim.cost.base import DraftWork, StepWork
from dspark_sim.cost.hot import WINDOW_S, duty_column, duty_terms
from dspark_sim.cost.shapes import ARRAY
from dspark_sim.metrics.record import WORK_COLUMNS, StepColumns, read_steps

COLUMNS = ("step_s", "sched_s", "draft_s", "running_reqs", "decode_reqs", "prefill_tokens", "verify_tokens")
BINS = ((1, 16), (17, 64), (65, 128), (129, 256))
SESSIONS = "sw-sess"  # the shared-prefix family (sweeps.level_of): its prefix reads are not in the decoder's records


def priced_steps(steps: Path, speculation, cost) -> tuple[StepColumns, np.ndarray, np.ndarray, np.ndarray]:
    """The columns of ``steps`` (:data:`COLUMNS`, the work columns and ``start_s``) and, per step,
    what the profile prices it at, seconds ``[S]`` each: the whole step at the prefill duty it had
    in the run (:mod:`dspark_sim.cost.hot`), the drafter's part, and the whole step without the
    power-limit term (the same but for prompt steps at a duty)."""
    r = read_steps(steps, COLUMNS + WORK_COLUMNS + ("start_s", "prefill_longest"))
    kind, whole, draft, cool = speculation.draft_kind, [], [], []
    duty = duty_column(r.start_s, r.step_s, r.prefill_tokens, *duty_terms(cost))
    for i in range(len(r)):
        dec, ctx = int(r.decode_reqs[i]), int(r.decode_context_tokens[i])
        work = StepWork(dec, int(r.verify_tokens[i]), ctx, int(r.prefill_tokens[i]), int(r.prefill_reqs[i]),
                        float(r.prefill_attn_tokens2[i]),
                        DraftWork(kind, dec, speculation.block_size, ctx) if dec and kind else None,
                        int(r.decode_max_context[i]), int(r.running_reqs[i]), prefill_duty=duty[i],
                        prefill_longest=int(r.prefill_longest[i]))
        parts = cost.breakdown(work)
        whole.append(sum(parts.values()))
        draft.append(parts.get("draft_s", 0.0))
        cool.append(sum(cost.breakdown(replace(work, prefill_duty=0.0)).values()) if duty[i] else whole[-1])
    return r, np.array(whole), np.array(draft), np.array(cool)


def mixed_term_s(real: StepColumns, cost) -> np.ndarray:
    """Per step, the seconds the profile's mixed-step term adds (decode rows beside prompt chunks)."""
    added = cost.profile.target.mixed_attn(real.decode_reqs.astype(float), real.prefill_tokens.astype(float),
                                           real.prefill_reqs.astype(float), ARRAY, real.prefill_longest)
    return np.broadcast_to(np.asarray(added, float), (len(real),))


def attribution(real_steps: Path, sim_steps: Path, speculation, cost) -> dict:
    """One case: the busy-time errors of the step replay and of the simulator's own steps, and the
    decode-only steps by running requests (see the module docstring)."""
    real, priced_s, priced_draft_s, cool_s = priced_steps(real_steps, speculation, cost)
    busy = float(real.step_s.sum())
    sim_busy = float(read_steps(sim_steps, ("step_s",)).step_s.sum())
    decode = (real.decode_reqs > 0) & (real.prefill_tokens == 0)
    bins = {}
    for lo, hi in BINS:
        at = decode & (real.decode_reqs >= lo) & (real.decode_reqs <= hi)
        if at.sum() < 3:
            continue
        target, priced_target = (real.step_s - real.sched_s - real.draft_s)[at], (priced_s - priced_draft_s)[at]
        bins[f"{lo}-{hi}"] = {"steps": int(at.sum()), "draft_ms": _ms(real.draft_s[at]),
                              "priced_draft_ms": _ms(priced_draft_s[at]),
                              "rest_ms": _ms(target), "priced_rest_ms": _ms(priced_target),
                              "mean_context": float(np.median(real.decode_context_tokens[at] / real.decode_reqs[at])),
                              "longest_context": float(np.median(real.decode_max_context[at]))}
    return {"replay_busy_error": float(priced_s.sum() / busy - 1.0) if busy > 0 else float("nan"),
            "sim_busy_error": sim_busy / busy - 1.0 if busy > 0 else float("nan"), "decode_by_running": bins,
            "by_kind": by_kind(real, priced_s), "by_duty": by_duty(real, priced_s, cool_s),
            "mixed_by_rows": mixed_by_rows(real, priced_s, priced_s - mixed_term_s(real, cost))}


KINDS = ("prompt only", "prompt beside decode rows", "decode right after a prompt step", "other decode")


def by_kind(real: StepColumns, priced_s: np.ndarray) -> dict:
    """The decoder's steps by kind (:data:`KINDS`): measured and priced seconds, and steps."""
    pre, dec = real.prefill_tokens > 0, real.decode_reqs > 0
    after = np.concatenate(([False], pre[:-1]))
    masks = (pre & ~dec, pre & dec, ~pre & dec & after, ~pre & dec & ~after)
    return {k: [float(real.step_s[m].sum()), float(priced_s[m].sum()), int(m.sum())] for k, m in zip(KINDS, masks)}


def mixed_by_rows(real: StepColumns, priced_s: np.ndarray, bare_s: np.ndarray) -> dict:
    """The decoder's steps with prompt chunks beside decode rows by decoding requests (:data:`BINS`):
    measured seconds, priced with and without the mixed-step term, and steps."""
    mixed = (real.prefill_tokens > 0) & (real.decode_reqs > 0)
    out = {}
    for lo, hi in BINS:
        m = mixed & (real.decode_reqs >= lo) & (real.decode_reqs <= hi)
        out[f"{lo}-{hi} decoding"] = [float(real.step_s[m].sum()), float(priced_s[m].sum()), float(bare_s[m].sum()),
                                      int(m.sum())]
    return out


DUTY_BINS = ((0.0, 0.5), (0.5, 0.75), (0.75, 1.0))


def by_duty(real: StepColumns, priced_s: np.ndarray, cool_s: np.ndarray) -> dict:
    """The decoder's prompt steps and decode-only steps by their prefill duty (the share of the
    second before them the GPU spent in prompt steps, :class:`~dspark_sim.cost.hot.PrefillDuty`):
    measured seconds, priced with and without the power-limit term, and steps."""
    pre = real.prefill_tokens > 0
    duty = np.array(duty_column(real.start_s, real.step_s, real.prefill_tokens, WINDOW_S, every=True))
    out = {}
    for name, kind in (("prompt steps", pre), ("decode steps", ~pre & (real.decode_reqs > 0))):
        for lo, hi in DUTY_BINS:
            m = kind & (duty >= lo) & ((duty < hi) | (hi == 1.0))
            out[f"{name} {lo:g}-{hi:g}"] = [float(real.step_s[m].sum()), float(priced_s[m].sum()),
                                            float(cool_s[m].sum()), int(m.sum())]
    return out


def duty_table(rows: list[dict]) -> list[str]:
    """Busy-time error of the step replay by prefill duty and method, with the power-limit term
    and without it, over ``rows``' cases."""
    keys = list(rows[0]["step_prices"]["by_duty"]) if rows else []
    return _by_method(rows, "by_duty", keys, lambda real, priced, cool, n: (
        f"{priced / real - 1:+.1%} / {cool / real - 1:+.1%} ({n})" if real > 0 else "-"))


def mixed_table(rows: list[dict]) -> list[str]:
    """Busy-time error of the step replay's mixed steps by decoding requests and method, with the
    mixed-step term and without it, over ``rows``' cases."""
    keys = list(rows[0]["step_prices"]["mixed_by_rows"]) if rows else []
    return _by_method(rows, "mixed_by_rows", keys, lambda real, priced, bare, n: (
        f"{priced / real - 1:+.1%} / {bare / real - 1:+.1%} ({n})" if real > 0 else "-"))


def kind_table(rows: list[dict]) -> list[str]:
    """Busy-time error of the step replay by step kind and method, over ``rows``' cases."""
    return _by_method(rows, "by_kind", KINDS, _kind_cell)


def _kind_cell(real: float, priced: float, n: int) -> str:
    return f"{priced / real - 1:+.1%} ({n} steps)" if real > 0 else "-"


def host_table(rows: list[dict]) -> list[str]:
    """Busy-time error of the step replay by step kind, a row per visit of ``rows`` and, below it,
    the visit that served the most cases (the replicate) on that visit's cases: the same requests
    on two hosts."""
    visits = {}
    for r in rows:
        visits.setdefault(r["real_run"], []).append(r)
    if len(visits) < 2:
        return []
    rep = max(visits, key=lambda v: (len(visits[v]), v))
    lines = ["| host (visit) | " + " | ".join(KINDS) + " |", "|---|" + "---|" * len(KINDS)]
    for v in sorted(set(visits) - {rep}):
        cases = {r["case"] for r in visits[v]}
        for label, mine in ((v, visits[v]), (f"{rep}, the same cases", [r for r in visits[rep] if r["case"] in cases])):
            sums = [[sum(x) for x in zip(*(r["step_prices"]["by_kind"][k] for r in mine))] for k in KINDS]
            lines.append(f"| {label} | " + " | ".join(_kind_cell(*c) if c else "-" for c in sums) + " |")
    return lines


def _by_method(rows: list[dict], field: str, keys, cell) -> list[str]:
    """A table, a row per method and a column per key: ``cell`` of a key's sums over the method's
    cases of ``step_prices[field][key]`` (seconds measured, priced ..., steps)."""
    lines = ["| method | " + " | ".join(keys) + " |", "|---|" + "---|" * len(keys)]
    for m in sorted({r["method"] for r in rows}):
        mine = [r["step_prices"][field] for r in rows if r["method"] == m]
        lines.append(f"| {m} | " + " | ".join(cell(*map(sum, zip(*(b[k] for b in mine)))) for k in keys) + " |")
    return lines


def _ms(x: np.ndarray) -> float:
    return float(np.median(x) * 1e3)


def markdown(rows: list[dict], min_level: float) -> list[str]:
    """The section of docs/validation_sweeps.md: every case from ``min_level`` on, its throughput
    error beside the two busy-time errors, then its decode steps by running requests."""
    shown = [r for r in rows if r["level"] >= min_level and r.get("step_prices")]
    lines = ["## Step prices or the schedule", "",
             "Busy seconds: the decoder's own steps priced by the profile (replay) and the simulator's own "
             "steps, each against the decoder's measured busy seconds, beside the throughput error. Where the "
             "two busy errors agree the simulator filled its steps as the decoder did, and the throughput error "
             "is the price of each step.", "",
             "| case | throughput err | replay busy err | simulator busy err |", "|---|---|---|---|"]
    for r in shown:
        p = r["step_prices"]
        lines.append(f"| {r['case']} | {r['metrics']['output_throughput']['rel_error']:+.1%} | "
                     f"{p['replay_busy_error']:+.1%} | {p['sim_busy_error']:+.1%} |")
    lines += ["", "The step replay's busy-time error by kind of step, chat and long-prompt families (the session "
              "cases' shared prefix reads are not in the decoder's records), every level shown:", ""]
    lines += kind_table([r for r in shown if r.get("family") != SESSIONS])
    lines += ["", "The same steps by the host that served them: each headline visit's cases, and the replicate's "
              "runs of the same cases (the same requests on another H200), every method. The profile prices one "
              "board, its power-limit terms the mean of the two boards they were timed on; the hosts' boards differ "
              "from it and from each other.", ""]
    lines += host_table([r for r in shown if r.get("family") != SESSIONS])
    lines += ["", "The same steps by their prefill duty: the share of the second before a step the GPU spent in "
              "steps with prompt chunks (the duty of a decode step counts the prompt steps before it as well). "
              "Each cell: the replay's busy-time error with the power-limit terms (prompt steps' and decode "
              "steps', `docs/profiles.md`, \"Steps held for seconds\") / without them (steps). Prompt steps at a "
              "high duty run slower, as their term prices; decode steps after prompt-heavy seconds run slower too, "
              "as the decode steps' term prices past the prompt steps' threshold; both terms are the mean over "
              "H200s other than the sweeps' (after a second of 4,096-token prompt steps, or of mixed steps, back "
              "to back).", ""]
    lines += duty_table([r for r in shown if r.get("family") != SESSIONS])
    lines += ["", "The steps that carry prompt chunks beside decode rows, by decoding requests, every family (the "
              "session cases' shared prefix reads touch their decode rows, not the term). Each cell: the replay's "
              "busy-time error with the mixed-step term (`docs/profiles.md`, the mixed-step block: a decode row's "
              "empty query tiles of the chunk, fitted on steps timed apart on another H200) / without it (steps).",
              ""]
    lines += mixed_table(shown)
    lines += ["", "The decoder's decode-only steps by decoding requests (medians): the drafter's forward as the "
              "decoder timed it on the GPU (`draft_s`) and as the profile prices it, the rest of the step "
              "(target forward, sampling, acceptance) likewise; mean and longest context of a step, tokens.", "",
              "| case | decoding requests | steps | drafter ms real / priced | rest ms real / priced | "
              "context mean / longest |", "|---|---|---|---|---|---|"]
    lines[-2:-2] = ["What would settle the rest of the price: why a drafter runs longer in a served step than the "
                    "profiler's replay of it alone, as the decoder's steps (table below) and whole served-like steps "
                    "timed apart (`benchmarks/served_steps.py --part layout`, another H200) show and the drafters' "
                    "in-step ratio prices (`docs/profiles.md`); `bash benchmarks/served_visit.sh draft` times the "
                    "profiler's drafter replays back to back against each after the L2 cache is overwritten, as the "
                    "target's forward leaves it. And the steps that carry prompt chunks beside many decode rows: "
                    "the decoder's kernel gives each decode row the query tiles of the step's longest chunk, "
                    "which the simulator prices but the decoder's `steps.csv` does not record, so this replay "
                    "takes the mean chunk's and a step of several chunks stays under its price (the table "
                    "above); the decoder writing its steps' longest chunk would settle it. Of the "
                    "served conditions the "
                    "profiler's steps lack, KV pages scattered over the pool barely change a decode step "
                    "(`--part layout`), and a step after a second of prompt or mixed steps runs slower than after "
                    "a second idle (`--part after`): the power-limit terms (the tables in `docs/profiles.md`). "
                    "Decode steps whose requests read the same prefix pages are priced by "
                    "the shared-prefix term (`docs/profiles.md`, timed on the GPU) in the simulator's own steps; "
                    "the decoder's step records do not count those reads, so the replay column prices the "
                    "session cases' steps without them.", ""]
    for r in shown:
        for span, b in r["step_prices"]["decode_by_running"].items():
            lines.append(f"| {r['case']} | {span} | {b['steps']} | {b['draft_ms']:.2f} / {b['priced_draft_ms']:.2f} | "
                         f"{b['rest_ms']:.2f} / {b['priced_rest_ms']:.2f} | {b['mean_context']:.0f} / "
                         f"{b['longest_context']:.0f} |")
    return lines
