"""The reliability sweep's rules (``benchmarks/reliability_sweep.py`` runs the cases): what a
folder held before and after a command, whether a case held (exit code, one error line, nothing
changed outside ``--out``), and the sweep's table, totals and page."""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

def snapshot(root: Path) -> dict[str, tuple]:
    """Every path under ``root``, links not followed: its kind and a digest of its content."""
    out = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder) / name
            rel = str(path.relative_to(root))
            if path.is_symlink():
                out[rel] = ("link", os.readlink(path))
            elif path.is_dir():
                out[rel] = ("dir",)
            else:
                digest = hashlib.sha1()
                with open(path, "rb") as f:
                    for block in iter(lambda: f.read(1 << 20), b""):
                        digest.update(block)
                out[rel] = ("file", digest.hexdigest())
    return out


def judge(case, got, err, stop_s, before, after, w: Path, o: Path) -> list[str]:
    problems = []
    if got != case.expect:
        problems.append(f"exit {got}, expected {case.expect}")
    if "Traceback" in err:
        problems.append("traceback")
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith(("warning:", "resuming"))]
    if case.expect != 0:
        first = ("error: ",) if case.expect == 2 else ("terminated", "interrupted")
        if len(lines) != 1 or not lines[0].startswith(first):
            problems.append(f"stderr has {len(lines)} lines, not one {first[0]!r} line")
        elif len(lines[0]) > 1200:
            problems.append(f"the error line is {len(lines[0])} characters")
    if case.stop is not None:
        if stop_s is None:
            problems.append("ended before the signal was sent")
        elif case.stop_within_s is not None and stop_s > case.stop_within_s:
            problems.append(f"took {stop_s:.1f} s to stop")
    allowed = tuple(f"W/{p}" for p in case.may_change) if got == case.expect else ()
    moved = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k)
                   and not any(k == a or k.startswith(a + "/") for a in allowed))
    if moved:
        problems.append(f"changed outside --out: {', '.join(moved[:4])}{' ...' if len(moved) > 4 else ''}")
    if not problems and case.check is not None:
        problem = case.check(w, o, err)
        if problem:
            problems.append(problem)
    return problems


def table(rows: list[dict]) -> str:
    width = max(len(r["case"]) for r in rows)
    lines = [f"{'case':<{width}}  {'command':<64}  {'expected':>8}  {'got':>8}  ok", "-" * (width + 90)]
    for r in rows:
        command = r["command"] if len(r["command"]) <= 64 else r["command"][:61] + "..."
        lines.append(f"{r['case']:<{width}}  {command:<64}  {r['expected']:>8}  {str(r['got']):>8}  "
                     f"{'ok' if r['ok'] else 'FAIL: ' + r['why']}")
    return "\n".join(lines)


def totals(rows: list[dict]) -> str:
    by_kind = {}
    for r in rows:
        k = by_kind.setdefault(r["kind"], [0, 0])
        k[0] += r["ok"]
        k[1] += 1
    ok = sum(r["ok"] for r in rows)
    return (f"{ok} of {len(rows)} cases hold; {len(rows) - ok} defects. By class: "
            + ", ".join(f"{kind} {a}/{n}" for kind, (a, n) in by_kind.items()))


def markdown(data: dict) -> str:
    """docs/bench/reliability_sweep.md from the sweep's JSON: provenance, counts by class and
    command, and every case that did not hold."""
    rows = data["rows"]
    commands = sorted({" ".join(r["command"].split()[:2]) if r["command"].startswith("dspark-sim")
                       else "dspark-tune" + (" export" if " export " in r["command"] else "") for r in rows})
    by = {}
    for r in rows:
        command = next(c for c in reversed(commands) if r["command"].startswith(c))
        cell = by.setdefault(r["kind"], {}).setdefault(command, [0, 0])
        cell[0] += r["ok"]
        cell[1] += 1
    lines = [f"Made by `{data['command']}` at commit {data['commit']} on {data['machine']}, {data['date']}, "
             f"{data['wall_s']:.0f} s wall, 1-minute load average {data['load_start']:.1f} at the start and "
             f"{data['load_end']:.1f} at the end (the machine ran other work). The rows are in "
             "`reliability_sweep.json`; this page is made from it (`python benchmarks/doc_blocks.py write`). "
             "A cell is cases held / cases; what each class tries: `benchmarks/reliability_cases*.py`.", "",
             f"**{totals(rows)}**", "", "| class | " + " | ".join(commands) + " | all |",
             "|---|" + "---:|" * (len(commands) + 1)]
    for kind, cells in by.items():
        held, n = sum(c[0] for c in cells.values()), sum(c[1] for c in cells.values())
        lines.append(f"| {kind} | " + " | ".join(f"{cells[c][0]}/{cells[c][1]}" if c in cells else ""
                                               for c in commands) + f" | {held}/{n} |")
    failed = [r for r in rows if not r["ok"]]
    lines += ["", "Cases that did not hold: " + ("none." if not failed else
                                                 "; ".join(f"{r['case']} ({r['why']})" for r in failed))]
    return "\n".join(lines) + "\n"
