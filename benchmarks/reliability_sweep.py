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

from dspark_sim.validation.reliability import judge, markdown, snapshot, table, totals

REPO = Path(__file__).resolve().parents[1]
MEMORY_BYTES = 4 << 30
KINDS = {0: "success", 1: "placement", 2: "parsing", 3: "validate", 4: "accepted", 5: "traceback", 6: "exports",
         7: "stopping", 8: "leftovers", 9: "mooncake", 10: "report", 11: "numbers", 12: "yaml", 13: "unknown keys",
         14: "traces", 15: "names", 16: "paths", 17: "signals", 18: "studies", 19: "odd --out"}


def fill(text: str, w: Path, o: Path) -> str:
    return text.replace("{w}", str(w)).replace("{o}", str(o)).replace("{repo}", str(REPO))


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
        problems = judge(case, got, err, stop_s, before, snapshot(root), w, o)
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
