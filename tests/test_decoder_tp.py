"""The tensor-parallel decoder on the CPU: two processes over gloo, tiny fp32 models.

TP 2 must give the tokens TP 1 gives (greedy; dense and MoE, experts summed or dispatched by
all-to-all), every rank must get its pages back, and a rank that fails must end the run
with one line, quickly, on every path (bad input, a killed process). ``DSPARK_TP_DEVICE=cuda``
runs the same tests on two GPUs (NCCL, Triton kernels, CUDA graphs captured per rank).
"""
from __future__ import annotations

import multiprocessing
import os
import threading
import time

import pytest

pytest.importorskip("torch")

from dspark_sim.kernels.decoder.tiny import (generate, on_device, tiny_decoder, tiny_spec,  # noqa: E402
                                             tp_generate_job)
from dspark_sim.kernels.decoder.tp import RankFailed, run_ranks as _run_ranks  # noqa: E402

PROMPTS = [[1, 2, 3], [4, 5, 6, 7, 8], [9], [3, 1, 4, 1, 5, 9, 2]]
LIMIT_S = 120  # no test may hang: every run is stopped past this
KIND = os.environ.get("DSPARK_TP_DEVICE", "cpu")


def run_ranks(*args, **kw):
    return _run_ranks(*args, device_kind=KIND, **kw)


def _one_gpu(method: str, moe: bool, max_tokens: int):
    dec = tiny_decoder(method, spec=tiny_spec(moe=moe), **on_device("cuda:0" if KIND == "cuda" else "cpu"))
    out = generate(dec, PROMPTS, max_tokens)
    return out, (len(dec.pages.free), len(dec.pages.free_rows))


@pytest.mark.parametrize("method,moe,moe_comm", [
    ("dspark", False, "allreduce"),
    ("static", False, "allreduce"),
    ("dspark", True, "allreduce"),
    ("none", True, "a2a"),
])
def test_tp2_greedy_output_equals_tp1_and_pages_come_back(method, moe, moe_comm):
    want, free = _one_gpu(method, moe, 8)
    got = run_ranks(2, tp_generate_job, (method, PROMPTS, 8, 0.0, moe), timeout_s=LIMIT_S, moe_comm=moe_comm)
    assert got["outputs"] == want
    assert all(len(o) == 8 for o in want)
    assert got["free"] == [free, free]  # every page and row back on both ranks


def test_tp2_sampled_tokens_agree_across_ranks():
    """At temperature 1 the drafts and accepted tokens are rank 0's on every rank (followers
    check their tokens against rank 0's digest at the end and fail otherwise)."""
    got = run_ranks(2, tp_generate_job, ("dspark", PROMPTS, 8, 1.0), timeout_s=LIMIT_S)
    assert [len(o) for o in got["outputs"]] == [8] * len(PROMPTS)


def test_bad_input_on_every_rank_ends_with_one_line_and_code_2():
    # a hang would end in run_ranks' own time-limit line, not this one
    with pytest.raises(RankFailed) as err:
        run_ranks(2, _bad_job, (), timeout_s=LIMIT_S)
    assert err.value.code == 2 and "kv_block_tokens" in str(err.value) and "\n" not in str(err.value)


def _bad_job(ctx):
    return tp_generate_job(ctx, "dspark", PROMPTS, 4, kv_block_tokens=3)


def test_a_killed_rank_ends_the_run_with_one_line():
    """Rank 1 is killed mid-run (prompts arrive every 0.5 s for 20 s): the launcher stops rank 0,
    which waits in a collective, and names rank 1 in one line."""
    def kill_rank_1():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            kids = multiprocessing.active_children()
            if len(kids) == 2:
                time.sleep(6.0)  # past start-up: both ranks serving
                sorted(kids, key=lambda p: int(p.name.rsplit("-", 1)[1]))[1].kill()  # started second: rank 1
                return
            time.sleep(0.05)
    killer = threading.Thread(target=kill_rank_1, daemon=True)
    killer.start()
    with pytest.raises(RankFailed) as err:  # a hang would end in run_ranks' own time-limit line
        run_ranks(2, tp_generate_job, ("dspark", PROMPTS * 10, 8, 0.0, False, 0.5), timeout_s=LIMIT_S)
    killer.join()
    assert err.value.rank == 1 and "killed by signal 9" in str(err.value) and "\n" not in str(err.value)


def test_cli_rejects_a_tp_the_scenario_does_not_say_before_starting_a_rank(capsys):
    from pathlib import Path

    from dspark_sim.kernels.decoder.cli import main

    case = Path(__file__).resolve().parents[1] / "profiles/h200/validation/cases_tp2/syn-light__none.yaml"
    assert main(["--config", str(case), "--tp", "4", "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "deployment.tp" in err and "--tp 2" in err
    assert main(["--config", str(case), "--device", "cpu"]) == 2  # --tp 1 against tp: 2
    assert multiprocessing.active_children() == []  # refused before any rank started
