"""Studies on SQLite: determinism, SIGKILL-and-resume, baselines and the report, CLI errors."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import optuna
import pytest
from test_tuner_fixtures import complete_trials, run_tiny, sqlite_url, tiny_scenario, tune_args

from dspark_sim.slo import Slo
from dspark_sim.tuner import runner
from dspark_sim.tuner.cli import main as tune_main
from dspark_sim.tuner.objective import Target
from dspark_sim.tuner.scenarios import load_base
from dspark_sim.tuner.space import load_space
from dspark_sim.tuner.tune import Settings


def _summary(trials):
    return [(t.number, t.params, t.values) for t in trials]


def test_same_seed_same_trials(tmp_path):
    base = load_base(tiny_scenario(tmp_path))
    settings = Settings(base, Target(slo=Slo(tpot_ms=40)), load_space(tmp_path / "space.yaml"), trials=14, baselines=())
    runs = []
    for name in ("a", "b"):
        url = f"sqlite:///{tmp_path / name}.db"
        # 14 trials: past TPE's 12 random start-up trials, so model-based proposals are covered too
        runner.run(settings.jobs(url, "det"), workers=1, timeout_s=None, show_progress=False)
        runs.append(_summary(complete_trials(url, "det")))
    assert len(runs[0]) == 14 and runs[0] == runs[1]


def _wait_for(predicate, timeout_s: float = 60.0, every_s: float = 0.05) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(every_s)


def _count(url: str, study: str) -> int:
    try:
        return len(complete_trials(url, study))
    except KeyError:  # not created yet
        return 0


def test_sigkill_then_resume_loses_no_completed_trial(tmp_path):
    url = sqlite_url(tmp_path)
    proc = subprocess.Popen([sys.executable, "-m", "dspark_sim.tuner.cli", *tune_args(tmp_path, "kill", trials=400)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for(lambda: _count(url, "kill") >= 3)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    before = _summary(complete_trials(url, "kill"))
    target = len(before) + 3
    # resume by name only: the scenario, space and seeds come from the stored study
    assert tune_main(["--study", "kill", "--storage", url, "--trials", str(target), "--quiet",
                      "--out", str(tmp_path / "resumed")]) == 0
    after = _summary(complete_trials(url, "kill"))
    assert after[:len(before)] == before  # same trials, same params, same values
    assert len(after) >= target
    assert (tmp_path / "resumed" / "dspark.yaml").is_file()


def _workers(pid: int) -> list[int]:
    """The multiprocessing workers ``pid`` started (its spawned children)."""
    out = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as f:
            out += [int(c) for c in f.read().split()]
    return [c for c in out if _alive(c) and b"spawn_main" in open(f"/proc/{c}/cmdline", "rb").read()]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has exited
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_stopping_the_tuner_stops_its_workers(tmp_path, sig):
    """SIGTERM: the tuner stops its workers on the way out. SIGKILL (no way out): each
    orphaned worker notices and stops after its current trial."""
    url = sqlite_url(tmp_path)
    proc = subprocess.Popen([sys.executable, "-m", "dspark_sim.tuner.cli",
                             *tune_args(tmp_path, "stop", trials=4000), "--workers", "2"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for(lambda: _count(url, "stop") >= 2)
        workers = _workers(proc.pid)
        assert len(workers) == 2
    finally:
        os.kill(proc.pid, sig)
        proc.wait()
    _wait_for(lambda: not any(_alive(w) for w in workers), timeout_s=60.0)


def test_timeout_stops_the_search_and_still_reports(tmp_path):
    out = run_tiny(tmp_path, "late", "--timeout", "1", trials=10_000)
    assert 0 < len(complete_trials(sqlite_url(tmp_path), "late")) < 10_000  # stopped by the timeout
    assert (out / "report.md").is_file() and (out / "dspark.yaml").is_file()


def test_pareto_objective(tmp_path):
    out = run_tiny(tmp_path, "front", "--objective", "pareto", trials=6)
    study = optuna.load_study(study_name="front", storage=sqlite_url(tmp_path))
    assert len(study.directions) == 2
    assert study.user_attrs["winner"]["trial"] in {t.number for t in study.best_trials}
    assert "objective: pareto" in (out / "report.md").read_text()


def test_baselines_and_report(tmp_path):
    out = run_tiny(tmp_path, "rep", baselines="none,static")
    report = (out / "report.md").read_text()
    for label in ("DSpark (tuned)", "no speculation", "static chain (EAGLE-3 / MTP)", "DSpark's difference",
                  "pareto.png", "Parameter importances", "optuna-dashboard"):
        assert label in report
    # one repeat: the difference is shown, never called a gain
    assert "%" in report.split("DSpark's mean is")[1].split("\n")[0]
    assert "one sampler seed: not a measured gain" in report and "`--repeats 3` (or more) measures it" in report
    assert "a gain (above" not in report
    assert (out / "pareto.png").stat().st_size > 1000
    url = sqlite_url(tmp_path)
    names = {s.study_name for s in optuna.get_all_study_summaries(url)}
    assert names == {"rep", "rep.none", "rep.static"}
    assert len(complete_trials(url, "rep.static")) >= 3
    winner = optuna.load_study(study_name="rep", storage=url).user_attrs["winner"]
    assert winner["seeds"] == [0, 1, 2, 3, 4]  # search seeds, then fresh confirmation seeds


@pytest.mark.parametrize("args,needle", [
    (["--storage", "redis://x"], "--storage"),
    (["--storage", "sqlite://"], "in-memory"),
    (["--storage", "sqlite:///:memory:"], "in-memory"),
    (["--workers", "0"], "--workers"),
    (["--scenario", "nope.yaml"], "nope.yaml"),
    (["--baselines", "static,mtp"], "--baselines"),
])
def test_bad_flags_one_line_exit_2(tmp_path, capsys, args, needle):
    if "--storage" not in args:
        args = args + ["--storage", sqlite_url(tmp_path)]
    assert tune_main(args + ["--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and needle in err and "\n" not in err


def test_same_command_joins_other_settings_refused(tmp_path, capsys):
    run_tiny(tmp_path, "fixed", trials=2)
    first = _summary(complete_trials(sqlite_url(tmp_path), "fixed"))
    run_tiny(tmp_path, "fixed", trials=3)  # the same command again (another machine) joins the study
    assert _summary(complete_trials(sqlite_url(tmp_path), "fixed"))[:2] == first
    assert tune_main(tune_args(tmp_path, "fixed", "--objective", "goodput", trials=3)) == 2
    assert "exists with other settings" in capsys.readouterr().err
