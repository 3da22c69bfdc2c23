"""What benchmarks write: result files written whole, and generated blocks in the docs (the
text between ``<!-- tag:begin -->`` and ``<!-- tag:end -->``)."""
from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path

from dspark_sim.reports.blocks import read_block, write_block  # noqa: F401  (the scripts' import)

REPO = Path(__file__).resolve().parents[1]


def write_result(path, data: dict) -> None:
    """The result so far as JSON, written whole (a run cut short keeps what it measured);
    nothing when ``path`` is None."""
    if path:
        from dspark_sim.cost.jsonio import write_json_atomic
        write_json_atomic(path, data)


def code_commit(*paths: str) -> str:
    """The repository's git revision, with ``+changes`` where the work tree differs from it under
    ``paths`` (the code a benchmark's figures depend on). Outside a git checkout (a device
    machine gets the work tree alone), the revision its visit script was sent from: ``$COMMIT``."""
    def git(*cmd: str) -> str:
        return subprocess.run(["git", "-C", str(REPO), *cmd], capture_output=True, text=True).stdout.strip()

    if not git("rev-parse", "--git-dir"):
        return os.environ.get("COMMIT", "not a git checkout")
    return git("rev-parse", "--short", "HEAD") + ("+changes" if git("status", "--porcelain", "--", *paths) else "")


def machine() -> str:
    """The machine a benchmark ran on, in words (architecture, CPUs, Python, OS)."""
    return f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, {platform.system()}"


def probe_parser(doc: str, name: str, **defaults):
    """The argument parser a GPU probe script shares (``--run`` on the GPU or ``--tiny`` on the
    CPU, ``--out``, ``--json``, ``--model``, ``--kv-tokens``, ``--budget-s``); ``defaults``
    override the defaults of those."""
    import argparse

    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--run", action="store_true", help="time the steps (GPU; --tiny: CPU dry run)")
    ap.add_argument("--out", default=f"/tmp/{name}.json")
    ap.add_argument("--json", help="print the table of this result (default: --out)")
    ap.add_argument("--model", default="qwen3-8b")
    ap.add_argument("--kv-tokens", type=int, default=defaults.get("kv_tokens", 400_000))
    ap.add_argument("--budget-s", type=float, default=defaults.get("budget_s", 185.0),
                    help="start no point after this many seconds")
    ap.add_argument("--tiny", action="store_true", help="the tiny CPU decoder and a small grid")
    return ap


def probe_result(args, name: str):
    """The result a probe's ``--json`` (or ``--out``) names, or None after one line on stderr."""
    import json
    import sys
    from pathlib import Path

    path = Path(args.json or args.out)
    if not path.is_file():
        print(f"{name}: {path}: no such result (make one with --run)", file=sys.stderr)
        return None
    return json.loads(path.read_text())


def probe_main(args, name: str, run, table) -> int:
    """A probe's main after its arguments: ``run(args)`` with ``--run``, then the lines of
    ``table(result)`` printed; 2 when there is no result to show."""
    if args.run:
        run(args)
    data = probe_result(args, name)
    if data is None:
        return 2
    print("\n".join(table(data)))
    return 0


def begin_probe(args, name: str, header: dict, build, t0: float):
    """``(result, built)``: a probe's result started with ``header`` as its provenance and
    written to ``args.out``, and what ``build(args)`` gave; a failing build is said in the
    result, then one line and exit 1."""
    import time

    out = {"provenance": header, "points": [], "failed": []}
    try:
        built = build(args)
    except Exception as e:  # noqa: BLE001 - said in the result, then one line and exit 1
        out["error"] = f"build: {type(e).__name__}: {e}"
        write_result(args.out, out)
        raise SystemExit(f"{name}: {out['error'].splitlines()[0]}") from None
    out["provenance"]["build_s"] = round(time.monotonic() - t0, 1)
    write_result(args.out, out)
    return out, built
