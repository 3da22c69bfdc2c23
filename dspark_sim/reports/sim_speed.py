"""The simulator's speed pages (``docs/bench/sim*.md``) from ``benchmarks/bench_sim.py``'s JSON:
the machine, the table of cases against their targets, what the figures mean."""
from __future__ import annotations

from dspark_sim.speed.cases import TUNE_SLICES, TUNE_TRIALS


def header_lines(meta: dict) -> list[str]:
    """The machine line and the column heads of the table."""
    other = "exact" if meta["against"] == "exact" else "REV"
    return [f"machine: {meta['cpu']}, {meta['cores']} cores, python {meta['python']}; "
            f"one core per simulation (the tuner: two workers); {meta['mode']}; fastest of {meta['repeat']}",
            f"{'case':<46}{'target':>9}{'wall s':>9}{'cpu s':>8}{'steps':>9}{'out tok/s':>11}{'MiB':>7}"
            + (f"{other + ' wall':>13}{other + ' cpu':>12}{'speed-up':>9}" if meta["against"] else "")
            + f"{'load':>11}  result"]


def row_line(r: dict) -> str:
    """One case's row of the table."""
    target = "-" if r["target_s"] is None else f"{r['target_s']:g}s" + (
        f"/{r['target_mib']:g}M" if r.get("target_mib") else "")
    cpu = "-" if r["cpu_s"] is None else f"{r['cpu_s']:.2f}"  # not recorded in converted older runs
    load_after = "" if r["load_after"] is None else f"{r['load_after']:.1f}"
    line = (f"{r['label']:<46}{target:>9}{r['wall_s']:>9.2f}{cpu:>8}"
            f"{r['steps'] if r['steps'] is not None else str(r['completed']) + ' tr':>9}"
            f"{r['out_tok_per_s']:>11,.0f}{r['peak_mib'] or 0:>7.0f}")
    if "speedup_cpu" in r:
        line += f"{r['rev_wall_s']:>13.2f}{r['rev_cpu_s']:>12.2f}{r['speedup_cpu']:>8.1f}x"
    return line + f"{r['load_before']:>5.1f}-{load_after:<5}  {r['result']}"


def markdown(data: dict) -> str:
    """A ``docs/bench`` page from its JSON: command, commit, date, what the figures mean, the table."""
    against = "" if not data["against"] else (
        " The speed-up is step-by-step mode's CPU seconds over skip-ahead's, both run interleaved in the "
        "same conditions (the two give the same run: steps, requests and tokens are checked equal)."
        if data["against"] == "exact" else f" The speed-up is the CPU seconds of revision {data['against']} over "
        "this code's, both run interleaved in the same conditions.")
    if data["requests"] is not None:
        against += (f" Each case is cut to its first {data['requests']:,} requests: a slice, timed for the "
                    "speed-up; the targets are for whole cases.")
    made = f"Made by `{data['command']}` at commit {data['commit']} on {data['date']}"
    source = f" The figures are in `{data['file']}`; this page is made from it (`python benchmarks/doc_blocks.py write`)."
    if data.get("converted"):
        source += f" {data['converted']}"
    pruned = [r for r in data["rows"] if "pruned" in r]  # runs of the pruned tuner case
    tuner = (f"two workers, DSpark alone, pruned on the hour's first {TUNE_SLICES.replace(',', ' and ')} minutes, and "
             f"every one of its {TUNE_TRIALS} trials done, complete or pruned" if pruned
             else f"two workers, and every one of its {TUNE_TRIALS} trials done")
    tuner += "".join(f"). The tuner: {r['completed']} trials done, {r['complete']} complete and {r['pruned']} "
                     "pruned" + (f"; {r['search_s']:.0f} s searching, then {r['confirm_s']:.0f} s confirming the "
                                 "finalists on fresh seeds and the winner's interval" if "search_s" in r else "")
                     for r in pruned)
    return (f"{made}. Measured, one run each (fastest of {data['repeat']}). Targets: wall seconds on one core "
            f"(peak MiB where given; the tuner: {tuner}). `load` "
            "is the 1-minute load average before and after the case: the machine is shared with other work, and "
            f"where the load passes its two cores the wall times are longer than on a quiet machine.{against}{source}"
            "\n\n```\n" + "\n".join(header_lines(data) + [row_line(r) for r in data["rows"]]) + "\n```\n")
