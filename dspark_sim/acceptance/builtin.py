"""The built-in acceptance presets (``presets.json``): every preset fitted to the published numbers.

Deterministic (common random numbers from the seed). For every preset the report holds
the target accepted length, the fitted value on the fitting draws, and an independent
check: a serving replay through AcceptanceModel's own step/accept with fresh random
numbers (every request runs to a fixed output length with the whole block of 7 verified,
as in Table 1). ``python benchmarks/fit_acceptance.py`` re-makes the shipped file.
"""
from __future__ import annotations

import datetime
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from dspark_sim.acceptance import fit, paper
from dspark_sim.acceptance.model import AcceptanceModel
from dspark_sim.acceptance.replay import serve_full_blocks
from dspark_sim.names import DOMAINS

NUM_REQUESTS, STEPS = 2048, 16  # fitting draws: 32768 request-steps per preset
CHECK_REQUESTS, CHECK_TOKENS = 2000, 256


def jobs() -> list[dict]:
    """One job per preset: Table 1 cells, their domain means, DeepSeek MTP, and DeepSeek-V4's DSpark by
    domain for Flash and Pro (paper.v4_accept_lens)."""
    out = []
    for (target, drafter), values in paper.TABLE1.items():
        by_domain: dict[str, list[float]] = {}
        for dataset, value in zip(paper.DATASETS, values):
            domain = paper.DATASETS[dataset]
            by_domain.setdefault(domain, []).append(value)
            out.append(dict(drafter=drafter, target=target, domain=domain, dataset=dataset, accept_len=value))
        for domain, cell in by_domain.items():
            out.append(dict(drafter=drafter, target=target, domain=domain, dataset=None,
                            accept_len=float(np.mean(cell))))
    for domain in DOMAINS:
        out.append(dict(drafter="mtp", target="deepseek-v3", domain=domain, dataset=None,
                        curve=paper.mtp_accept()))
    for (target, domain), length in paper.v4_accept_lens().items():
        # V4-Flash chat: the engine report's own curve; the rest scaled from its shape
        curve = paper.V4_FLASH_ACCEPT if (target, domain) == ("deepseek-v4-flash", "chat") else \
            tuple(float(a) for a in fit.curve_for_accept_len(paper.v4_shape(), length))
        out.append(dict(drafter="dspark", target=target, domain=domain, dataset=None, curve=curve))
    return out


def run_job(job: dict, seed: int) -> tuple[dict, dict]:
    """Fit one preset and check it by replay; returns (preset JSON, report)."""
    crn = fit.draw_crn(seed, NUM_REQUESTS, STEPS, paper.FIT_POSITIONS)
    if "curve" in job:
        # a published (or derived) curve: DeepSeek-V3's MTP the same in every domain slot, at chat's
        # spread; DeepSeek-V4's DSpark a curve by domain, at its domain's spread
        by_domain = job["target"].startswith("deepseek-v4") and job["domain"] != "chat"
        curve, spread = np.asarray(job["curve"]), fit.DOMAIN_SPREADS[job["domain"] if by_domain else "chat"]
    else:
        shape = paper.fig2_shape(job["drafter"], job["domain"])
        curve, spread = fit.curve_for_accept_len(shape, job["accept_len"]), None
    preset, report = fit.build_preset(job["drafter"], job["target"], job["domain"], curve, crn,
                                      dataset=job["dataset"], spread=spread)
    model = AcceptanceModel.from_presets([preset])
    log = serve_full_blocks(model, np.zeros(CHECK_REQUESTS, dtype=np.int64), CHECK_TOKENS,
                            paper.FIT_POSITIONS, np.random.default_rng(seed + 1))
    report["target_accept_len"] = round(1.0 + float(np.sum(curve)), 6)
    report["check_accept_len"] = round(log.accept_len(), 6)
    return {**preset.to_json(), "fit": report}, report


def format_table(todo: list[dict], reports: list[dict], *, markdown: bool) -> str:
    """Target vs fitted vs replayed accepted length per preset, with the head's AUC and ECE range."""
    head = ["drafter", "target", "cell", "Table 1", "fit", "replay", "err %", "AUC 1", "AUC 7",
            "raw ECE max", "STS ECE max"]
    sep = " | " if markdown else " "
    line = (lambda cells: f"| {sep.join(cells)} |") if markdown else sep.join
    lines = [line(head)] + ([line(["---"] * len(head))] if markdown else [])
    for job, r in zip(todo, reports):
        err = 100 * (r["check_accept_len"] / r["target_accept_len"] - 1)
        lines.append(line([job["drafter"], job["target"], job["dataset"] or job["domain"],
                           f"{r['target_accept_len']:.3f}", f"{r['sim_accept_len']:.3f}",
                           f"{r['check_accept_len']:.3f}", f"{err:+.2f}", f"{r['auc'][0]:.3f}", f"{r['auc'][-1]:.3f}",
                           f"{max(r['ece_raw']):.3f}", f"{max(r['ece_sts']):.3f}"]))
    return "\n".join(lines)


def fit_builtin(seed: int, workers: int = 1, generated_by: str = "benchmarks/fit_acceptance.py") -> tuple[dict, list]:
    """Fit every preset of :func:`jobs` on ``workers`` processes; returns the presets.json document
    and the (job, report) pairs."""
    todo = jobs()
    with ProcessPoolExecutor(workers) as pool:
        results = list(pool.map(run_job, todo, [seed] * len(todo)))
    header = {
        "generated_by": generated_by,
        "date": datetime.date.today().isoformat(),
        "seed": seed,
        "num_requests": NUM_REQUESTS,
        "steps_per_request": STEPS,
        "num_samples": NUM_REQUESTS * STEPS,
        "sources": "DSpark paper (arXiv 2607.05147) Table 1, Fig. 2, confidence AUC by position; "
                   "DeepSeek-V4-Flash engine report; DeepSeek-V3 MTP acceptance (see acceptance/paper.py)",
        "auc_targets": list(paper.AUC_BY_POSITION),
        "raw_ece_target": paper.RAW_ECE_TARGET,
    }
    return {"header": header, "presets": [p for p, _ in results]}, list(zip(todo, [r for _, r in results]))
