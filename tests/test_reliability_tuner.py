"""dspark-tune and capacity under hostile storage, spaces and signals: one line each, nothing
created outside --out, exports an engine would run as scored, prompt stops with their message."""
from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from test_tuner_fixtures import run_tiny, tiny_scenario, tune_args

from dspark_sim.tuner.cli import main as tune_main


def one_line(capsys, code: int, expect: int = 2) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if not line.startswith(("warning:", "resuming"))]
    assert code == expect and len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    return lines[0]


def listing(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def test_a_sqlite_file_in_a_missing_directory_creates_no_directory(capsys, tmp_path):
    tiny_scenario(tmp_path)
    before = listing(tmp_path)
    url = f"sqlite:///{tmp_path / 'no' / 'such' / 's.db'}"
    args = ["--scenario", str(tmp_path / "tiny.yaml"), "--storage", url, "--out", str(tmp_path / "o"), "--quiet"]
    assert "not an existing directory" in one_line(capsys, tune_main(args))
    assert listing(tmp_path) == before


def test_a_sqlite_file_under_proc_is_one_line(capsys, tmp_path):
    tiny_scenario(tmp_path)
    args = ["--scenario", str(tmp_path / "tiny.yaml"), "--storage", "sqlite:////proc/dspark-s.db",
            "--out", str(tmp_path / "o"), "--quiet"]
    assert "--storage" in one_line(capsys, tune_main(args))
    assert not (tmp_path / "o").exists()


def test_a_read_only_study_is_one_line(capsys, tmp_path):
    run_tiny(tmp_path, "ro", trials=2)
    capsys.readouterr()
    url = f"sqlite:///file:{tmp_path / 'study.db'}?mode=ro&uri=true"
    line = one_line(capsys, tune_main(["--study", "ro", "--trials", "4", "--storage", url,
                                       "--out", str(tmp_path / "o2"), "--quiet"]))
    assert "readonly" in line or "read-only" in line
    assert not (tmp_path / "o2").exists()


def test_a_bad_trace_row_is_refused_before_any_trial(capsys, tmp_path):
    (tmp_path / "m.jsonl").write_text('{"timestamp": 0, "input_length": 50, "output_length": 5}\n{not json\n')
    tiny_scenario(tmp_path, workload={"trace": "m.jsonl", "format": "mooncake", "domain": "code"})
    before = listing(tmp_path)
    args = ["--scenario", str(tmp_path / "tiny.yaml"), "--space", str(tmp_path / "space.yaml"), "--trials", "2",
            "--baselines", "", "--storage", f"sqlite:///{tmp_path / 's.db'}", "--out", str(tmp_path / "o"), "--quiet"]
    assert "m.jsonl: line 2: not valid JSON" in one_line(capsys, tune_main(args))
    assert listing(tmp_path) == before


def test_export_from_a_missing_database_creates_none(capsys, tmp_path):
    before = listing(tmp_path)
    code = tune_main(["export", "--study", "s", "--format", "vllm", "--storage", f"sqlite:///{tmp_path / 'new.db'}",
                      "--out", str(tmp_path / "e")])
    assert "no study is stored there" in one_line(capsys, code)
    assert listing(tmp_path) == before


def test_export_refuses_a_file_in_the_way(capsys, tmp_path):
    run_tiny(tmp_path, "ex", trials=2)
    capsys.readouterr()
    (tmp_path / "e").write_text("mine")
    code = tune_main(["export", "--study", "ex", "--format", "vllm", "--storage", f"sqlite:///{tmp_path / 'study.db'}",
                      "--out", str(tmp_path / "e")])
    assert "--out" in one_line(capsys, code) and (tmp_path / "e").read_text() == "mine"


WIDE_TOKENS = {"deployment": {"max_running_requests": {"low": 4, "high": 512, "log": True},
                              "max_batched_tokens": {"low": 1, "high": 8192, "log": True}}}
LAG_ZERO = {"deployment": {"max_running_requests": [4, 8]}, "dspark": {"lag_steps": {"low": 0, "high": 3}}}


@pytest.mark.parametrize("space,engine,refused", [
    (WIDE_TOKENS, "vllm", "max_batched_tokens"),  # searched: a draw of 1 beside 512 requests
    (WIDE_TOKENS, "sglang", None),  # SGLang leaves max_batched_tokens to the scenario's 2048
    (LAG_ZERO, "sglang", "lag_steps"),  # a lag of 0 scored, SGLang launched at 1
    (LAG_ZERO, "vllm", None),  # vLLM holds the lag at 2
])
def test_exports_run_as_scored_or_the_space_is_refused_at_creation(capsys, tmp_path, space, engine, refused):
    args = tune_args(tmp_path, "wide", "--engine", engine, trials=3)
    (tmp_path / "space.yaml").write_text(yaml.safe_dump(space))
    code = tune_main(args)
    if refused:
        line = one_line(capsys, code)
        assert refused in line and "space.yaml" in line
        assert not (tmp_path / "study.db").exists() and not (tmp_path / "out").exists()
        return
    assert code == 0
    out = tmp_path / "out"
    vllm = yaml.safe_load((out / "vllm.yaml").read_text())
    assert vllm["max-num-batched-tokens"] >= vllm["max-num-seqs"]
    lag = yaml.safe_load((out / "dspark.yaml").read_text())["speculation"].get("lag_steps", 2)
    assert f"SGLANG_DSPARK_CONFIDENCE_RELAY_LAG_STEPS={lag}" in (out / "sglang.yaml").read_text()


def test_no_baseline_trial_is_not_called_a_miss(tmp_path):
    argv = tune_args(tmp_path, "b0", trials=3, baselines="none,static")
    argv[argv.index("--baseline-trials") + 1] = "0"
    assert tune_main(argv) == 0
    report = (tmp_path / "out" / "report.md").read_text()
    assert "No baseline meets the SLO" not in report and "no baseline trial completed" in report


def _children(pid: int) -> int:
    try:
        return len(Path(f"/proc/{pid}/task/{pid}/children").read_text().split())
    except OSError:
        return 0


def _stop(argv: list[str], cwd: Path, guard_s: float = 120) -> tuple[int, str]:
    """Start a command, SIGTERM it once it has started two worker processes (and a second more),
    and return its exit code and stderr (``guard_s``: how long it may take to stop at most)."""
    proc = subprocess.Popen(argv, cwd=cwd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    for _ in range(1200):
        if _children(proc.pid) >= 2 or proc.poll() is not None:
            break
        time.sleep(0.05)
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    try:
        _, err = proc.communicate(timeout=guard_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError(f"still running {guard_s} s after SIGTERM") from None
    return proc.returncode, err


def test_sigterm_to_tune_workers_ends_in_its_line(tmp_path):
    args = tune_args(tmp_path, "w", "--workers", "2", trials=500)
    code, err = _stop([sys.executable, "-m", "dspark_sim.tuner.cli", *args], tmp_path)
    assert code == 143, err
    lines = [line for line in err.splitlines() if not line.startswith("warning:")]
    assert lines and lines[-1].startswith("terminated") and "Traceback" not in err, err


def test_sigterm_to_capacity_jobs_stops_its_workers(tmp_path, write_scenario):
    from conftest import synthetic_scenario

    # plans of 20,000-request simulations run for minutes: a stop that waited for them would hang
    path = write_scenario(synthetic_scenario(num_requests=20_000, rate_per_s=5.0, slo={"tpot_ms": 30}))
    argv = [sys.executable, "-m", "dspark_sim.cli", "capacity", str(path), "--gpus", "h100,h200,b200",
            "--methods", "none,dspark", "--jobs", "2", "--max-requests", "20000", "--quiet", "--no-plots",
            "--out", str(tmp_path / "o")]
    code, err = _stop(argv, tmp_path, guard_s=60)
    assert code == 143, err
    assert err.strip().splitlines() == ["terminated; nothing written"], err  # no worker's traceback
    assert not (tmp_path / "o").exists()


def test_processes_opening_a_fresh_sqlite_file_at_once_all_open_it(tmp_path):
    """SQLite's counterpart of the PostgreSQL race: the loser's CREATE finds the table made
    (an OperationalError there), and every process must still open the storage."""
    opener = ("import sys, time\nfrom dspark_sim.tuner.storage import open_storage\n"
              "time.sleep(max(0.0, float(sys.argv[2]) - time.time()))\nopen_storage(sys.argv[1])\n")
    for round_ in range(3):
        url = f"sqlite:///{tmp_path / f'fresh{round_}.db'}"
        start = time.time() + 4.0  # every process imported and waiting: they open together
        procs = [subprocess.Popen([sys.executable, "-c", opener, url, str(start)], stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True) for _ in range(6)]
        logs = [p.communicate(timeout=120)[0] for p in procs]
        assert [p.returncode for p in procs] == [0] * len(procs), logs


def test_ctrl_c_in_a_trial_is_one_line_without_optunas_traceback(tmp_path):
    """One worker runs trials in the dspark-tune process itself: Ctrl-C lands inside a trial,
    which Optuna reports with its traceback unless the tuner holds that report back."""
    tiny_scenario(tmp_path)
    args = ["--scenario", "tiny.yaml", "--space", "space.yaml", "--trials", "500", "--baselines", "",
            "--storage", f"sqlite:///{tmp_path / 's.db'}", "--study", "t", "--out", "o", "--quiet"]
    proc = subprocess.Popen([str(Path(sys.executable).parent / "dspark-tune"), *args], cwd=tmp_path,
                            stderr=subprocess.PIPE, text=True)
    time.sleep(8.0)
    proc.send_signal(signal.SIGINT)
    err = proc.communicate(timeout=60)[1]
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("warning:")]
    assert proc.returncode == 130 and "Traceback" not in err and len(lines) == 1, err
    assert lines[0].startswith("interrupted") and not (tmp_path / "o").exists()


def test_workers_on_one_sqlite_file_never_take_the_same_queued_trial(tmp_path):
    """Queued trials (a killed worker's, re-queued on resume) are taken by reading that one waits
    and marking it running; without a lock over both, two workers took one trial and the second
    to finish it died ("Cannot tell a COMPLETE trial"). Six processes empty a queue of 48."""
    import optuna

    from dspark_sim.tuner.storage import open_storage

    url, queued = f"sqlite:///{tmp_path / 'q.db'}", 48
    study = optuna.create_study(study_name="q", storage=open_storage(url))
    for i in range(queued):
        study.enqueue_trial({"x": i})
    taker = ("import sys, time, warnings\nimport optuna\nfrom dspark_sim.tuner.storage import open_storage\n"
             "warnings.simplefilter('ignore')\noptuna.logging.set_verbosity(optuna.logging.WARNING)\n"
             "study = optuna.load_study(study_name='q', storage=open_storage(sys.argv[1]))\n"
             "time.sleep(max(0.0, float(sys.argv[2]) - time.time()))\n"
             "while (t := study.ask()).number < int(sys.argv[3]):\n    print(t.number)\n"
             "study.tell(t, state=optuna.trial.TrialState.FAIL)\n")
    start = time.time() + 5.0  # every process imported and waiting: they take together
    procs = [subprocess.Popen([sys.executable, "-c", taker, url, str(start), str(queued)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(6)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * len(procs), outs
    taken = sorted(int(n) for out, _ in outs for n in out.split())
    assert taken == list(range(queued))
