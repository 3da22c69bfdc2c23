"""A capacity answer for people: its rows as a text table and as a bar chart (``capacity.png``)."""
from __future__ import annotations

from pathlib import Path

from dspark_sim.metrics.plots import pyplot


def format_table(rows: list[dict], header: str) -> str:
    """Rows as an aligned text table under ``header``; ``cost basis`` says what each row's
    cost model rests on (:func:`dspark_sim.provenance.basis`)."""
    width = max([len("cost basis")] + [len(r.get("basis") or "-") for r in rows])
    head = (f"{'gpu':<6}{'method':<9}{'tp':>3}{'req/s/replica':>15}{'(interval)':>14}{'tok/s/GPU':>11}"
            f"{'(interval)':>12}{'p99 TPOT':>10}{'attain':>8}{'replicas':>10}{'GPUs':>6}{'(interval)':>11}"
            f"{'$/Mtok':>9}  {'cost basis':<{width}}  note")
    lines = [header, head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['gpu']:<6}{r['method']:<9}{_f(r['tp'], 'd'):>3}{r['rate_per_replica_rps']:>15.3f}"
                     f"{_range(r.get('rate_per_replica_rps_interval'), '.3g'):>14}"
                     f"{_f(r['output_tok_per_s_per_gpu'], '.0f'):>11}"
                     f"{_range(r.get('output_tok_per_s_per_gpu_interval'), '.0f'):>12}{_f(r['p99_tpot_ms'], '.1f'):>10}"
                     f"{_f(r['attainment'], '.1%'):>8}{_f(r['replicas'], 'd'):>10}{_f(r['gpus'], 'd'):>6}"
                     f"{_range(r.get('gpus_interval'), 'd'):>11}"
                     f"{_f(r['cost_per_mtok'], '.3f'):>9}  {r.get('basis') or '-':<{width}}  {r['note']}")
    return "\n".join(lines)


def answer_text(report: dict) -> str:
    """What ``dspark-sim capacity`` prints for ``report`` (a ``capacity.json``): the table under
    its rule, the provenance line when anything is not measured, and the cheapest answer."""
    from dspark_sim.provenance import provenance_line

    header = (f"{report['scenario']}: {report['model']}, target {report['target_rps']:.3f} req/s "
              f"({report['target_source']}); sustained = {report['rule']}")
    lines = [format_table(report["rows"], header)]
    line = provenance_line([r["provenance"] for r in report["rows"] if r["provenance"]])
    lines += [line] if line else []
    best = report["recommendation"]
    if best:
        cost = f", ${best['cost_per_mtok']:.3f}/M output tokens" if best["cost_per_mtok"] is not None else ""
        lines.append(f"cheapest: {best['gpus']} x {best['gpu']} ({best['replicas']} replica(s) of TP {best['tp']}) "
                     f"with {best['method']}{cost}")
    else:
        lines.append("no GPU kind meets the SLO at any rate tried")
    return "\n".join(lines)


def _range(pair, fmt: str) -> str:
    return "" if not pair else f"({format(pair[0], fmt)}-{format(pair[1], fmt)})"


def _f(value, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def plot(rows: list[dict], title: str, target_rps: float, path: Path) -> None:
    """Sustained rate per GPU and GPUs for the target, grouped by GPU kind, one bar per method."""
    plt = pyplot()
    gpus = list(dict.fromkeys(r["gpu"] for r in rows))
    methods = list(dict.fromkeys(r["method"] for r in rows))
    width = 0.8 / len(methods)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.4))
    for j, m in enumerate(methods):
        by_gpu = {r["gpu"]: r for r in rows if r["method"] == m}
        xs = [i + (j - (len(methods) - 1) / 2) * width for i in range(len(gpus))]
        found = [by_gpu.get(g) for g in gpus]
        per_gpu = [r["rate_per_replica_rps"] / r["tp"] if r and r["tp"] else 0.0 for r in found]
        need = [r["gpus"] if r and r["gpus"] else 0 for r in found]
        _labelled(ax1, ax1.bar(xs, per_gpu, width, label=m), [f"TP{r['tp']}" if r and r["tp"] else "" for r in found])
        _labelled(ax2, ax2.bar(xs, need, width, label=m),
                  [f"${r['cost_per_mtok']:.2f}" if r and r["cost_per_mtok"] is not None else "" for r in found])
    for ax, label in ((ax1, "sustained req/s per GPU (one replica / TP; labels: TP)"),
                      (ax2, f"GPUs for {target_rps:.3g} req/s (labels: $ per M output tokens)")):
        ax.set_xticks(range(len(gpus)), gpus)
        ax.set_title(label, fontsize=10)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=8)
    ax2.yaxis.get_major_locator().set_params(integer=True)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _labelled(ax, bars, labels: list[str]) -> None:
    for bar, text in zip(bars, labels):
        if text:
            ax.annotate(text, (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom",
                        fontsize=6.5)
