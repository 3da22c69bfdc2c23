"""Output placement never destroys: names are plain names, an output directory replaces only one
dspark-sim wrote (or an empty one), a file in the way is refused, not moved, and a failed or
stopped command leaves nothing behind, the parents it made included (a fuzz target at the end)."""
from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from conftest import synthetic_scenario
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dspark_sim.cli import main
from dspark_sim.errors import InputError
from dspark_sim.metrics.outdir import MARKER, atomic_dir, check_name, check_out
from dspark_sim.validation.reliability import snapshot  # every path under a folder, with a digest of its content


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if not line.startswith("warning:")]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    return lines[0]


def run_cli(capsys, *argv) -> tuple[int, str]:
    code = main(list(argv))
    return code, (one_error_line(capsys) if code else "")


@pytest.fixture
def scenario(tmp_path, write_scenario):
    return write_scenario(synthetic_scenario(num_requests=4, output=8))


# -- names ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["/abs/victim", ".", "..", "../escape", "a/b", "a\\b", "", "x\0y", "é" * 101])
def test_a_scenario_name_that_is_not_a_plain_name_is_refused(capsys, tmp_path, write_scenario, name):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "thesis.tex").write_text("years of work")
    path = write_scenario(synthetic_scenario(num_requests=4, name=name.replace("/abs", str(tmp_path))))
    before = snapshot(tmp_path)
    code, line = run_cli(capsys, "run", str(path), "--quiet", "--no-plots")
    assert code == 2 and "name" in line
    assert snapshot(tmp_path) == before


def test_a_file_named_dotdot_yaml_gives_no_dot_name(capsys, tmp_path, write_scenario):
    data = synthetic_scenario(num_requests=4)
    del data["name"]
    path = write_scenario(data, name="..yaml")  # its stem, the default name, is "."
    code, line = run_cli(capsys, "run", str(path), "--quiet")
    assert code == 2 and "name='.'" in line


@pytest.mark.parametrize("study", ["/tmp/x", ".", "..", "../up", "a/b"])
def test_a_study_that_is_not_a_plain_name_is_refused(capsys, tmp_path, monkeypatch, study):
    from dspark_sim.tuner.cli import main as tune_main

    monkeypatch.chdir(tmp_path)
    assert tune_main(["--study", study, "--storage", f"sqlite:///{tmp_path / 's.db'}", "--quiet"]) == 2
    assert "--study" in one_error_line(capsys)
    assert not any(tmp_path.iterdir())  # no database, no runs/
    assert tune_main(["export", "--study", study, "--format", "dspark",
                      "--storage", f"sqlite:///{tmp_path / 's.db'}"]) == 2
    assert "--study" in one_error_line(capsys) and not any(tmp_path.iterdir())


# -- what may be replaced ---------------------------------------------------------------------------
def test_an_unrelated_directory_is_refused_and_kept(capsys, tmp_path, scenario):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    before = snapshot(tmp_path)
    for command in (["run", str(scenario)], ["compare", str(scenario), "--methods", "none", "--concurrency", "1"],
                    ["capacity", str(scenario), "--gpus", "h200", "--methods", "none", "--tp", "1"]):
        code, line = run_cli(capsys, *command, "--out", str(out), "--quiet")
        assert code == 2 and "not written by dspark-sim" in line, command
        assert snapshot(tmp_path) == before


def test_a_file_in_the_way_is_refused_not_moved(capsys, tmp_path, scenario):
    (tmp_path / "res").write_text("data")
    before = snapshot(tmp_path)
    code, line = run_cli(capsys, "run", str(scenario), "--out", str(tmp_path / "res"), "--quiet")
    assert code == 2 and "not a directory" in line
    assert snapshot(tmp_path) == before  # no hidden .res.old-<pid> either


def test_a_link_in_the_way_is_refused(capsys, tmp_path, scenario):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    before = snapshot(tmp_path)
    for out, why in (("link", "symbolic link"), ("loop", "symbolic link"), ("loop/x", "loops")):
        code, line = run_cli(capsys, "run", str(scenario), "--out", str(tmp_path / out), "--quiet")
        assert code == 2 and why in line, line
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("out,why", [("file/x", "a parent of it is a file"), ("/proc/dspark-x", "cannot")])
def test_an_out_that_cannot_be_made_is_one_line(capsys, tmp_path, scenario, out, why):
    (tmp_path / "file").write_text("")
    out = out if out.startswith("/") else str(tmp_path / out)
    before = snapshot(tmp_path)
    code, line = run_cli(capsys, "run", str(scenario), "--out", out, "--quiet")
    assert code == 2 and why in line, line
    assert snapshot(tmp_path) == before


def test_a_previous_output_and_an_empty_directory_are_replaced(capsys, tmp_path, scenario):
    out = tmp_path / "out"
    assert main(["run", str(scenario), "--out", str(out), "--quiet", "--no-plots"]) == 0
    assert (out / MARKER).is_file() and (out / "summary.json").is_file()
    (out / "stale.txt").write_text("from before")
    assert main(["run", str(scenario), "--out", str(out), "--quiet", "--no-plots"]) == 0
    assert not (out / "stale.txt").exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["run", str(scenario), "--out", str(empty), "--quiet", "--no-plots"]) == 0
    assert (empty / MARKER).is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "out", "scenario.yaml"]


def test_the_default_out_of_a_name_is_under_runs(capsys, tmp_path, monkeypatch, write_scenario):
    monkeypatch.chdir(tmp_path)
    path = write_scenario(synthetic_scenario(num_requests=4, name="plain"))
    assert main(["run", str(path), "--quiet", "--no-plots"]) == 0
    assert (tmp_path / "runs" / "plain" / MARKER).is_file()
    (tmp_path / "runs" / "other").mkdir()
    (tmp_path / "runs" / "other" / "f").write_text("x")
    path = write_scenario(synthetic_scenario(num_requests=4, name="other"))
    code, line = run_cli(capsys, "run", str(path), "--quiet")
    assert code == 2 and "runs/other" in line


def test_calibrate_writes_its_folder_whole_and_refuses_a_foreign_one(capsys, tmp_path):
    table = tmp_path / "t.csv"
    table.write_text("dataset,accept_len\ngsm8k,6.0\n")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "sts.json").write_text("my own")
    before = snapshot(tmp_path)
    code, line = run_cli(capsys, "calibrate", "--table", str(table), "--out", str(mine))
    assert code == 2 and "not written by dspark-sim" in line and snapshot(tmp_path) == before


def test_a_failed_block_removes_the_parents_it_made(tmp_path):
    before = snapshot(tmp_path)
    with pytest.raises(RuntimeError):
        with atomic_dir(tmp_path / "a" / "b" / "out") as tmp:
            (tmp / "half.csv").write_text("1,2")
            raise RuntimeError("stopped")
    assert snapshot(tmp_path) == before


def test_a_stopped_run_leaves_no_parent_folders(tmp_path, write_scenario):
    """SIGTERM while the run writes into a new ``a/b/out``: exit 143, and no ``a/`` left."""
    path = write_scenario(synthetic_scenario(num_requests=200_000, rate_per_s=500.0, prompt=200, output=200))
    out = tmp_path / "a" / "b" / "out"
    proc = subprocess.Popen([sys.executable, "-m", "dspark_sim.cli", "run", str(path), "--out", str(out),
                             "--quiet", "--no-plots"], cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    for _ in range(600):  # until its temporary directory exists: it is simulating
        if out.parent.is_dir() and any(out.parent.iterdir()):
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert err.strip().splitlines()[-1].startswith("terminated") and "Traceback" not in err
    assert not (tmp_path / "a").exists()


# -- fuzz: the placement rules ----------------------------------------------------------------------
STATES = ("absent", "empty", "marked", "foreign", "file", "link", "loop", "under_file", "deep_absent")


def _make(root: Path, state: str) -> Path:
    """A target path in ``state`` under ``root`` (beside a victim the rules must never touch)."""
    victim = root / "victim"
    victim.mkdir()
    (victim / "data.txt").write_text("precious")
    target = root / "target"
    if state == "empty":
        target.mkdir()
    elif state == "marked":
        target.mkdir()
        (target / MARKER).write_text("")
        (target / "old.csv").write_text("old")
    elif state == "foreign":
        target.mkdir()
        (target / "thesis.tex").write_text("mine")
    elif state == "file":
        target.write_text("a file")
    elif state == "link":
        target.symlink_to(victim)
    elif state == "loop":
        target.symlink_to(target)
    elif state == "under_file":
        target.write_text("a file")
        return target / "sub"
    elif state == "deep_absent":
        return root / "x" / "y" / "target"
    return target


@settings(max_examples=300, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(state=st.sampled_from(STATES), fail=st.booleans())
def test_fuzz_placement_never_destroys(state, fail):
    """Whatever is at the target, ``atomic_dir`` either leaves the tree exactly as it was (a refusal,
    or a block that failed) or changes the target alone, into a marked directory with the output."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        target = _make(root, state)
        before = snapshot(root)
        replaceable = state in ("absent", "empty", "marked", "deep_absent")
        try:
            with atomic_dir(target) as out:
                (out / "summary.json").write_text("{}")
                if fail:
                    raise KeyboardInterrupt
        except InputError:
            assert not replaceable
        except KeyboardInterrupt:
            assert fail
        after = snapshot(root)
        if fail or not replaceable:
            assert after == before
            return
        rel = str(target.relative_to(root))
        parents = {str(p.relative_to(root)) for p in target.parents if p != root and root in p.parents}
        untouched = (lambda k: k != rel and not k.startswith(rel + "/") and k not in parents)
        assert {k: v for k, v in after.items() if untouched(k)} == {k: v for k, v in before.items() if untouched(k)}
        assert all(after[p] == ("dir",) for p in parents)
        assert {k: v[0] for k, v in after.items() if k.startswith(rel + "/")} == {
            f"{rel}/{MARKER}": "file", f"{rel}/summary.json": "file"}
        assert after[f"{rel}/summary.json"] == ("file", hashlib.sha1(b"{}").hexdigest())


@settings(max_examples=500, deadline=None, derandomize=True, database=None)
@given(name=st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
       | st.sampled_from([".", "..", "../x", "/etc", "a/../b", "./a", "a\\b", ".hidden", "a..b"]))
def test_fuzz_a_checked_name_stays_one_folder_below(name):
    """A name either is refused or names exactly one directory inside the folder it is joined to."""
    try:
        check_name(name, None, "name")
    except InputError:
        assert name in ("", ".", "..") or any(c in name for c in "/\\\0") or len(name.encode()) > 200
        return
    base = Path("/srv/runs")
    joined = base / name
    assert joined.parent == base and joined.name == name
    assert os.path.normpath(joined) == str(joined)


def test_check_out_creates_nothing(tmp_path):
    before = snapshot(tmp_path)
    assert check_out(tmp_path / "a" / "b" / "c") == tmp_path / "a" / "b" / "c"
    assert snapshot(tmp_path) == before


def test_tune_checks_its_out_before_any_trial(capsys, tmp_path):
    from test_tuner_fixtures import tune_args

    from dspark_sim.tuner.cli import main as tune_main

    (tmp_path / "out").write_text("in the way")
    assert tune_main(tune_args(tmp_path, "s")) == 2
    assert "--out" in one_error_line(capsys)
    assert not (tmp_path / "study.db").exists()  # no study was opened, no trial ran
