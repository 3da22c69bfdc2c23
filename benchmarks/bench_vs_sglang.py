"""Our DSpark kernels beside SGLang's released ones (its wheel, unpacked at run time), same inputs.

    python benchmarks/bench_vs_sglang.py --run --wheel W.whl [--out F.json] [--budget-s 240]  # on a GPU
    TRITON_INTERPRET=1 python benchmarks/bench_vs_sglang.py --run --wheel W.whl --dry-run     # CPU smoke test
    python benchmarks/bench_vs_sglang.py [--json F] [--doc docs/kernels.md]                  # the tables
    python benchmarks/bench_vs_sglang.py --merge RUN1.json RUN2.json --out F.json            # join runs

``schedule``: SGLang's top-K verify-length kernel (``ScheduleVerifyLensTopk``, three
launches; its budget comes from its host planner) against ``schedule_verify`` given
the same budget (``budget_k``), by the automatic path and by every path that applies,
and ``schedule_verify`` searching the budget itself (production, from this step's
confidences): R = 1 .. 4096 at block 7 and 16. Confidences are STS-calibrated
already (temperatures 1), as SGLang's kernel takes them.
``accept``: greedy (``AcceptGreedy`` with SGLang's fused row argmax) and sampling
(``AcceptSampling``: temperature softmax, chain rejection sampling) against
``accept_greedy`` / ``accept`` on full windows of fp32 logits (what both engines'
samplers receive), V = 151936.

Times are medians of CUDA-graph replays (``graph_us``: the GPU time an engine that
captures its step sees) and of ``triton.testing.do_bench`` (``launch_us``: host launch
included). Outputs are compared request by request (``mismatches``): verify lengths for
the scheduler; greedy accepted counts and tokens; sampling is random in both, so only
the mean accepted count is compared. Writes the JSON as it goes, tables printed last.
"""
from __future__ import annotations

import argparse
import glob
import json
import sys
import time
from pathlib import Path

from outputs import write_block, write_result

from dspark_sim.reports.kernels_vs_sglang import JSON, block_text, merge, tables

REPO = Path(__file__).resolve().parents[1]
REQUESTS = (1, 8, 32, 64, 128, 256, 512, 1024, 2048, 4096)
BLOCK_SIZES = (7, 16)
ACCEPT_REQUESTS = (1, 8, 32, 64, 128, 256)
VOCAB = 151936


def timings(fn, dry: bool) -> dict:
    """``{"graph_us", "launch_us"}`` medians (one plain call each in a dry run)."""
    if dry:
        t = time.perf_counter()
        fn()
        return {"graph_us": None, "launch_us": 1e6 * (time.perf_counter() - t)}
    import triton.testing

    out = {"launch_us": 1e3 * triton.testing.do_bench(fn, warmup=5, rep=30, return_mode="median")}
    try:
        out["graph_us"] = 1e3 * triton.testing.do_bench_cudagraph(fn, rep=30, return_mode="median")
    except Exception as err:  # a kernel that syncs cannot be captured: say so, keep the row
        out["graph_us"], out["graph_error"] = None, f"{type(err).__name__}: {str(err)[:200]}"
    return out


def schedule_rows(sgl, dev, dry: bool, requests, block_sizes, deadline: float, log) -> list[dict]:
    import torch

    from dspark_sim.kernels.cases import draft_confidences, synthetic_sps_table
    from dspark_sim.kernels.schedule_verify import path_for, run_schedule

    rows = []
    for block_size in block_sizes:
        for R in requests:
            if time.perf_counter() > deadline:
                rows.append({"R": R, "block_size": block_size, "error": "skipped: time budget"})
                continue
            conf = draft_confidences(R, block_size, dev, seed=R + block_size)
            temps = torch.ones(block_size, device=dev)
            sps = synthetic_sps_table(max_batch_tokens=R * (block_size + 1), device=dev)
            row = {"R": R, "block_size": block_size, "auto_path": path_for(R, block_size)}
            try:
                k = int(run_schedule(conf, temps, sps, None)[1])  # our production budget for this batch
                cfg = sgl.ScheduleConfig(gamma=block_size)
                theirs = lambda: sgl.schedule_topk(confidence=conf, budget=k, cfg=cfg)  # noqa: E731
                ours = lambda path=None: run_schedule(conf, temps, sps, None, budget_k=k, path=path)  # noqa: E731
                row.update(budget_k=k, mismatches=int((theirs().cpu() != ours()[0].cpu()).sum()),
                           sglang=timings(theirs, dry), ours=timings(ours, dry),
                           ours_search=timings(lambda: run_schedule(conf, temps, sps, None), dry))
                n = max(16, 1 << (R - 1).bit_length()) * max(2, 1 << (block_size - 1).bit_length())
                for path in ("single", "pairwise", "merge"):
                    if (path == "single" and n > 2048) or (path == "pairwise" and n > 65536) or dry:
                        continue
                    row[f"ours_{path}"] = timings(lambda p=path: ours(p), dry)
            except Exception as err:
                row["error"] = f"{type(err).__name__}: {str(err)[:300]}"
            rows.append(row)
            log(f"schedule R={R} block_size={block_size}: {summary(row)}")
    return rows


def accept_rows(sgl, dev, dry: bool, requests, block_size: int, vocab: int, deadline: float, log) -> list[dict]:
    import torch

    from dspark_sim.kernels import accept, accept_greedy
    from dspark_sim.kernels.cases import accept_case

    rows = []
    for R in requests:
        if time.perf_counter() > deadline:
            rows.append({"R": R, "error": "skipped: time budget"})
            continue
        args, W = accept_case(R, block_size, vocab, dev, seed=R, logits_dtype=torch.float32)
        logits = args["target_logits"]  # fp32, as both engines' samplers receive them
        cand = args["draft_tokens"].view(R, W).clone()
        cand[:, 1:] = args["draft_tokens"].view(R, W)[:, :-1]  # SGLang: the anchor, then the drafts
        row = {"R": R, "block_size": block_size, "V": vocab}
        try:
            greedy_ours = lambda: accept_greedy(logits, args["indptr"], args["draft_tokens"], max_window=W)  # noqa: E731
            greedy_theirs = lambda: sgl.accept_greedy(candidates=cand, target_logits=logits,  # noqa: E731
                                                      verify_num_draft_tokens=W, fused_argmax=True)
            a, b = greedy_ours(), greedy_theirs()
            bonus = a[1].long()[torch.arange(R, device=dev), a[0].long()]
            row["greedy_mismatches"] = int(((a[0] != b[0]) | (bonus != b[1])).sum())
            row["greedy_ours"], row["greedy_sglang"] = timings(greedy_ours, dry), timings(greedy_theirs, dry)
            info = type("SamplingInfo", (), {"need_top_k_sampling": False, "need_top_p_sampling": False,
                                             "temperatures": args["temperature"]})()
            probs = args["draft_probs"].view(R, W, vocab)[:, :block_size].contiguous()
            sample_ours = lambda: accept(**args, max_window=W)  # noqa: E731
            sample_theirs = lambda: sgl.accept_sampling(  # noqa: E731
                candidates=cand, target_logits=logits, draft_probs=probs, sampling_info=info,
                draft_input=None, gamma=block_size, verify_num_draft_tokens=W)
            row["sampling_mean_accepted"] = {"ours": float(sample_ours()[0].float().mean()),
                                             "sglang": float(sample_theirs()[0].float().mean())}
            row["sampling_ours"], row["sampling_sglang"] = timings(sample_ours, dry), timings(sample_theirs, dry)
        except Exception as err:
            row["error"] = f"{type(err).__name__}: {str(err)[:300]}"
        rows.append(row)
        log(f"accept R={R}: {summary(row)}")
    return rows


def summary(row: dict) -> str:
    return json.dumps({k: v for k, v in row.items() if k not in ("R", "block_size", "V")})[:300]


def run(args) -> dict:
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import sglang_kernels

    from dspark_sim.kernels.profiler.provenance import provenance, sm_clocks

    wheel = args.wheel or (sorted(glob.glob(str(REPO / ".sglang" / "sglang-*.whl"))) or [None])[-1]
    if wheel is None:
        raise SystemExit("no SGLang wheel: pass --wheel (e.g. sglang-0.5.23-*.whl)")
    sgl = sglang_kernels.load(wheel)
    dry = args.dry_run
    dev = torch.device("cpu" if dry else "cuda")
    start = time.perf_counter()
    log = lambda msg: print(f"[{time.perf_counter() - start:6.1f}s] {msg}", flush=True)  # noqa: E731
    out = {"provenance": {**(provenance() if not dry else {"gpu": "cpu (dry run)", "torch": torch.__version__}),
                          "sglang_wheel": Path(wheel).name, "sm_clocks_before": None if dry else sm_clocks()},
           "method": __doc__.split("\n\n")[2].strip()}
    deadline = start + args.budget_s
    sections = args.sections.split(",")
    requests = (1, 40) if dry else REQUESTS
    if "schedule" in sections:
        share = 0.6 if "accept" in sections else 1.0
        out["schedule"] = schedule_rows(sgl, dev, dry, requests, (7,) if dry else BLOCK_SIZES,
                                        start + share * args.budget_s, log)
        write_result(args.out, out)
    if "accept" in sections:
        out["accept"] = accept_rows(sgl, dev, dry, (2,) if dry else ACCEPT_REQUESTS, 7, 300 if dry else VOCAB,
                                    deadline, log)
    if not dry:
        out["provenance"]["sm_clocks_after"] = sm_clocks()
    write_result(args.out, out)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--run", action="store_true", help="measure (a GPU, or --dry-run on the CPU)")
    p.add_argument("--wheel", help="SGLang wheel (default: the newest .sglang/sglang-*.whl)")
    p.add_argument("--json", default=str(JSON), help="result file to read (without --run)")
    p.add_argument("--out", help="with --run: where to write the JSON")
    p.add_argument("--doc", help="write the tables into this markdown file's vs_sglang block")
    p.add_argument("--budget-s", type=float, default=240.0)
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--sections", default="schedule,accept", help="which comparisons to run")
    p.add_argument("--merge", nargs="+", help="result files: each section from the last that holds it whole; "
                   "written to --out")
    args = p.parse_args(argv)
    if args.merge:
        data = merge(args.merge)
        write_result(args.out, data)
    else:
        data = run(args) if args.run else json.loads(Path(args.json).read_text())
    text = tables(data)
    print(text)
    if args.doc:
        write_block(Path(args.doc), "vs_sglang", block_text(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
