"""Hostile inputs and faults against the installed CLI, each in a fresh temporary directory.

    python benchmarks/reliability_sweep.py                 # every case, 2 at a time
    python benchmarks/reliability_sweep.py --only placement --jobs 1
    python benchmarks/reliability_sweep.py --bin OTHER/.venv/bin --json sweep.json
    python benchmarks/reliability_sweep.py --json docs/bench/reliability_sweep.json   # the page's data
    python benchmarks/reliability_sweep.py --page docs/bench/reliability_sweep.json   # its page

Every case of ``benchmarks/reliability_cases.py`` runs ``dspark-sim`` or ``dspark-tune`` (those
in ``--bin``, default: beside this Python) in its own working directory ``W``, beside a directory
``O`` that stands for the rest of the user's disk, under a 4 GiB address-space limit. A case holds
when: the exit code is the one expected; stderr has no traceback and, for a refusal or a stop,
exactly one line (``error: ...``, ``terminated ...``/``interrupted ...``) besides ``warning:``
lines; nothing under ``W`` or ``O`` was created, changed or deleted but the paths a successful
command writes (its ``--out``, a study's SQLite files); a stopped command ended within its bound;
and the case's own check (accepted drafts within the tokens emitted, exports an engine runs as
scored, no NaN) passes. Prints a table (case, command, expected, got, ok) and the totals.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import reliability_cases as rc

REPO = Path(__file__).resolve().parents[1]
MEMORY_BYTES = 4 << 30
KINDS = {0: "success", 1: "placement", 2: "parsing", 3: "validate", 4: "accepted", 5: "traceback", 6: "exports",
         7: "stopping", 8: "leftovers", 9: "mooncake", 10: "report", 11: "numbers", 12: "yaml", 13: "unknown keys",
         14: "traces", 15: "names", 16: "paths", 17: "signals", 18: "studies", 19: "odd --out"}


def fill(text: str, w: Path, o: Path) -> str:
    return text.replace("{w}", str(w)).replace("{o}", str(o)).replace("{repo}", str(REPO))


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


def fixtures(bin_dir: Path, cache: Path) -> None:
    """What cases copy: a run's record to play a real engine's (``real``) and a study (``t.db``)."""
    (cache / "s.yaml").write_text(rc.scenario())
    _tool(bin_dir, ["dspark-sim", "run", "s.yaml", "--out", "real", "--quiet", "--no-plots"], cache)
    for name, text in rc.TUNE_FILES.items():
        (cache / name).write_text(text)
    _tool(bin_dir, [*[a if a != "sqlite:///{w}/s.db" else f"sqlite:///{cache}/t.db" for a in rc.TUNE],
                    "--out", "tune-out"], cache)


def _tool(bin_dir: Path, argv: list[str], cwd: Path) -> None:
    done = subprocess.run([str(bin_dir / argv[0]), *argv[1:]], cwd=cwd, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"fixture {' '.join(argv)} failed: {done.stderr[-2000:]}")


def lay_out(case: rc.Case, w: Path, o: Path, cache: Path) -> None:
    (o / "victim").mkdir(parents=True)
    (o / "victim" / "data.txt").write_text("the user's own")
    w.mkdir()
    for rel, content in case.files.items():
        path = w / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, rc.Link):
            path.unlink(missing_ok=True)  # a link in place of a fixture's file
            path.symlink_to(fill(content.target, w, o))
        elif content is rc.DIR:
            path.mkdir(exist_ok=True)
        elif isinstance(content, rc.Copy):
            (shutil.copytree if (cache / content.fixture).is_dir() else shutil.copy)(cache / content.fixture, path)
        elif isinstance(content, rc.Edited):
            edited = content.edit((cache / content.fixture).read_text())
            path.unlink(missing_ok=True)
            path.write_bytes(edited if isinstance(edited, bytes) else edited.encode())
        elif isinstance(content, rc.Sparse):
            path.write_text(content.head)
            os.truncate(path, content.size)
        elif isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(fill(content, w, o))


# Runs a command under the memory limit (a wrapper, not preexec_fn: cases run from threads).
LIMITED = ("import os, resource, sys; resource.setrlimit(resource.RLIMIT_AS, ({0}, {0})); "
           "os.execv(sys.argv[1], sys.argv[1:])").format(MEMORY_BYTES)


def run_case(case: rc.Case, bin_dir: Path, cache: Path) -> dict:
    # a command that destroys its surroundings may take the case's directory with it
    with tempfile.TemporaryDirectory(prefix="dspark-sweep-", ignore_cleanup_errors=True) as tmp:
        root = Path(tmp)
        w, o = root / "W", root / "O"
        lay_out(case, w, o, cache)
        before = snapshot(root)
        got, err, stop_s = _execute(case, lambda argv: _start(bin_dir, [fill(a, w, o) for a in argv], w))
        problems = _judge(case, got, err, stop_s, before, snapshot(root), w, o)
    command = " ".join(a if a else "''" for a in case.argv)
    return {"case": case.name, "kind": KINDS[case.kind], "command": command, "expected": case.expect, "got": got,
            "ok": not problems, "why": "; ".join(problems), "stderr_tail": err[-300:] if problems else ""}


def _start(bin_dir: Path, argv: list[str], cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", LIMITED, str(bin_dir / argv[0]), *argv[1:]], cwd=cwd,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, errors="replace",
                            start_new_session=True)


def _execute(case: rc.Case, start) -> tuple[int | str, str, float | None]:
    """Exit code and stderr of the case's command (of ``then`` where it has one; of both where it has
    ``beside``: one code when they agree), and how long it took to end after ``stop``'s signal."""
    procs = [start(case.argv)] + ([start(case.beside)] if case.beside else [])
    stop_s = None
    try:
        if case.stop is not None:
            sig, after_s = case.stop
            try:
                procs[0].wait(timeout=after_s)
            except subprocess.TimeoutExpired:
                sent = time.monotonic()
                procs[0].send_signal(sig)
                procs[0].wait(timeout=case.timeout_s)
                stop_s = time.monotonic() - sent
        errs = [p.communicate(timeout=case.timeout_s)[1] for p in procs]
        if case.then is not None:
            procs = [start(case.then)]
            errs = [procs[0].communicate(timeout=case.timeout_s)[1]]
    except subprocess.TimeoutExpired:
        running = [p for p in procs if p.poll() is None]
        for p in running:
            os.killpg(p.pid, signal.SIGKILL)
        return "timeout", "".join(p.communicate()[1] for p in running), stop_s
    codes = sorted({p.returncode for p in procs})
    return codes[0] if len(codes) == 1 else "/".join(map(str, codes)), "".join(errs), stop_s


def _judge(case, got, err, stop_s, before, after, w: Path, o: Path) -> list[str]:
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


def provenance(argv: list[str], started: float, load_start: float) -> dict:
    from outputs import code_commit, machine

    return {"command": "python benchmarks/reliability_sweep.py " + " ".join(argv), "commit": code_commit(),
            "machine": machine(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "wall_s": time.monotonic() - started, "load_start": load_start, "load_end": os.getloadavg()[0]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bin", type=Path, default=Path(sys.executable).parent,
                   help="folder holding dspark-sim and dspark-tune (default: beside this Python)")
    p.add_argument("--only", help="cases whose name contains, or whose class is, one of these (a comma list)")
    p.add_argument("--jobs", type=int, default=2, help="cases run at once (default 2)")
    p.add_argument("--json", type=Path, help="also write the rows, with command, commit, machine and load, here")
    p.add_argument("--page", type=Path, help="only print the markdown page of this JSON")
    args = p.parse_args(argv)
    if args.page:
        print(markdown(json.loads(args.page.read_text())), end="")
        return 0
    load_start = os.getloadavg()[0]
    only = args.only.split(",") if args.only else []
    cases = [c for c in rc.all_cases() if not only or any(k in c.name or k == KINDS[c.kind] for k in only)]
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="dspark-sweep-fixtures-") as cache:
        fixtures(args.bin, Path(cache))
        with ThreadPoolExecutor(args.jobs) as pool:
            rows = list(pool.map(lambda c: run_case(c, args.bin, Path(cache)), cases))
    print(table(rows))
    print(totals(rows) + f" ({time.monotonic() - started:.0f} s, --bin {args.bin})")
    if args.json:
        made = provenance(sys.argv[1:] if argv is None else argv, started, load_start)
        args.json.write_text(json.dumps({**made, "bin": str(args.bin), "rows": rows}, indent=1) + "\n")
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
