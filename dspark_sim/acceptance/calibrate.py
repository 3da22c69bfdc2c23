"""``dspark-sim calibrate``: a preset and STS temperatures from a user's own numbers.

From a table (accepted lengths or acceptance by position) the fit keeps the
built-in preset's shape and spread and moves its level (or fits mu to the
curve), refits the head, and derives STS temperatures from a simulated log of
the fitted model. From a confidence log it fits STS temperatures to the log
itself, as SGLang would, and a preset whose acceptance curve, ROC-AUC and raw
ECE by position match the log. Outputs: sts.json (SGLang's
``--speculative-dspark-confidence-sts-path`` format), preset.json (usable as
``speculation.acceptance.preset_file``), optionally reliability.png.
"""
from __future__ import annotations

import datetime
import json
import os
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from dspark_sim.acceptance import fit, metrics
from dspark_sim.acceptance.config import AcceptanceConfig
from dspark_sim.acceptance.inputs import AcceptanceTable, ConfidenceLog
from dspark_sim.acceptance.model import AcceptanceModel
from dspark_sim.acceptance.paper import AUC_BY_POSITION, FIT_POSITIONS
from dspark_sim.acceptance.preset import AcceptancePreset, get_preset
from dspark_sim.acceptance.replay import serve_full_blocks
from dspark_sim.metrics.outdir import atomic_write_text
from dspark_sim.names import DOMAINS

NUM_REQUESTS, STEPS = 2048, 16  # fitting draws, as for the built-in presets
REPLAY_REQUESTS, REPLAY_TOKENS = 1200, 256


@dataclass(frozen=True, slots=True)
class Calibration:
    """What calibrate produces: one preset per domain, a report each, and the STS fit with its data."""

    presets: list[AcceptancePreset]
    reports: list[dict]
    sts: dict
    logits: np.ndarray  # the raw confidence logits the STS fit used [n, block_size]
    accepted: np.ndarray  # [n]


def from_table(table: AcceptanceTable, drafter: str, target: str, *, seed: int, name: str) -> Calibration:
    """Fit the domains the table covers; the others keep the built-in preset."""
    positions = max([FIT_POSITIONS] + [len(c) for c in table.accept_curve.values()])
    crn = fit.draw_crn(seed, NUM_REQUESTS, STEPS, positions)
    presets, reports = [], []
    for domain in DOMAINS:
        base = get_preset(drafter, target, domain, key="--target")
        if domain in table.accept_len:
            shape = fit.conditional_shape(base, crn)
            curve = fit.curve_for_accept_len(shape, table.accept_len[domain])
            source = f"accept_len {table.accept_len[domain]:.3f}, shape of {base.label}"
        elif domain in table.accept_curve:
            curve, source = table.accept_curve[domain], "acceptance by position"
        else:
            presets.append(base)
            reports.append({"source": f"built-in {base.label} (no data for {domain})"})
            continue
        preset, report = fit.build_preset(drafter, target, domain, curve, crn, spread=fit.spread_of(base))
        presets.append(preset)
        reports.append({"source": source, "target_accept_len": round(1 + float(np.sum(curve)), 4), **report})
    fitted = [p for p, r in zip(presets, reports) if "sim_accept_len" in r]
    logits, accepted = _simulated_log(fitted, seed)
    sts = sts_json(logits, accepted, f"simulated:{name}")
    return Calibration(presets, reports, sts, logits, accepted)


def from_log(log: ConfidenceLog, drafter: str, target: str, *, domain: str | None, seed: int,
             name: str) -> Calibration:
    """STS from the log; a preset matching its acceptance curve, AUC and raw ECE (for ``domain`` or all)."""
    n, block_size = log.logits.shape
    raw = _sigmoid(log.logits)
    auc = np.nan_to_num(metrics.auc_by_position(raw, log.accepted), nan=AUC_BY_POSITION[-1])
    ece = metrics.ece_by_position(raw, log.accepted)
    curve = np.clip((log.accepted[:, None] > np.arange(block_size)).mean(axis=0), 0.5 / n, 1 - 0.5 / n)
    base = get_preset(drafter, target, domain or "chat", key="--target")
    crn = fit.draw_crn(seed, NUM_REQUESTS, STEPS, max(block_size, FIT_POSITIONS))
    preset, report = fit.build_preset(drafter, target, domain or "chat", curve, crn, spread=fit.spread_of(base),
                                      auc_targets=tuple(np.clip(auc, 0.51, 0.995)), ece_target=ece)
    report = {"source": f"log {name} ({n} request-steps)", "target_accept_len": round(1 + float(curve.sum()), 4),
              "log_auc": _rounded(auc), "log_ece_raw": _rounded(ece), **report}
    presets, reports = [], []
    for d in DOMAINS:
        if domain in (None, d):
            presets.append(replace(preset, domain=d))
            reports.append(report)
        else:
            base_d = get_preset(drafter, target, d, key="--target")
            presets.append(base_d)
            reports.append({"source": f"built-in {base_d.label} (log is for {domain})"})
    return Calibration(presets, reports, sts_json(log.logits, log.accepted, name), log.logits, log.accepted)


def sts_json(logits: np.ndarray, accepted: np.ndarray, dataset: str) -> dict:
    """SGLang's STS calibration JSON for raw logits [n, block_size] and accepted drafts [n]."""
    temps = metrics.fit_sts(logits, accepted)
    return {"temperatures": _rounded(temps, 6), "dataset": dataset, "num_samples": int(len(accepted)),
            "ece_before": _rounded(metrics.ece_by_position(_sigmoid(logits), accepted), 6),
            "ece_after": _rounded(metrics.ece_by_position(_sigmoid(logits / temps), accepted), 6)}


def write(cal: Calibration, out_dir: str | Path, *, drafter: str, target: str, seed: int,
          plot: bool = False) -> list[Path]:
    """Write sts.json, preset.json and (``plot``) reliability.png into ``out_dir``, each atomically."""
    out = Path(out_dir)
    header = {"generated_by": "dspark-sim calibrate", "date": datetime.date.today().isoformat(),
              "drafter": drafter, "target": target, "seed": seed,
              "num_samples": NUM_REQUESTS * STEPS, "sts_dataset": cal.sts["dataset"]}
    doc = {"header": header, "presets": [{**p.to_json(), "fit": r} for p, r in zip(cal.presets, cal.reports)]}
    paths = [out / "sts.json", out / "preset.json"]
    atomic_write_text(paths[0], json.dumps(cal.sts, indent=1) + "\n")
    atomic_write_text(paths[1], json.dumps(doc, indent=1) + "\n")
    if plot:
        paths.append(out / "reliability.png")
        _plot(cal, paths[-1])
    return paths


def _simulated_log(presets: list[AcceptancePreset], seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Raw confidence logits and accepted drafts from a full-block replay of ``presets`` (one domain each)."""
    model = AcceptanceModel.from_presets(presets, AcceptanceConfig(calibration="raw"))
    domains = np.arange(REPLAY_REQUESTS) % len(presets)
    log = serve_full_blocks(model, domains, REPLAY_TOKENS, FIT_POSITIONS, np.random.default_rng(seed + 1))
    conf = np.clip(log.conf, 1e-12, 1 - 1e-12)
    return np.log(conf) - np.log1p(-conf), log.accepted


def _plot(cal: Calibration, path: Path) -> None:
    """Reliability of the cumulative survival by position, raw and after STS."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    block_size = cal.logits.shape[1]
    labels = metrics.prefix_labels(cal.accepted, block_size)
    temps = np.asarray(cal.sts["temperatures"])
    survival = {"raw": np.cumprod(_sigmoid(cal.logits), axis=1),
                "STS": np.cumprod(_sigmoid(cal.logits / temps), axis=1)}
    cols = min(4, block_size)
    rows = (block_size + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 3.2 * rows), squeeze=False)
    for k, ax in enumerate(axes.flat):
        if k >= block_size:
            ax.axis("off")
            continue
        ax.plot([0, 1], [0, 1], "--", color="0.7", linewidth=1)
        for (kind, surv), ece in zip(survival.items(), (cal.sts["ece_before"][k], cal.sts["ece_after"][k])):
            pred, rate, _ = metrics.reliability(surv[:, k], labels[:, k])
            ax.plot(pred, rate, "o-", markersize=3, label=f"{kind} ECE {100 * ece:.1f}%")
        ax.set_title(f"position {k + 1}", fontsize=9)
        ax.legend(fontsize=7, loc="upper left")
    fig.supxlabel("predicted survival")
    fig.supylabel("observed survival")
    fig.tight_layout()
    fd, tmp = tempfile.mkstemp(prefix=".reliability.", suffix=".png", dir=path.parent)
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=120)
        os.replace(tmp, path)
    finally:
        plt.close(fig)
        Path(tmp).unlink(missing_ok=True)


def _sigmoid(v: np.ndarray) -> np.ndarray:
    return 0.5 + 0.5 * np.tanh(0.5 * v)


def _rounded(values, digits: int = 5) -> list[float]:
    return [round(float(v), digits) for v in values]
