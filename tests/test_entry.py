"""The console commands' entry points (dspark_sim/entry.py): a stop signal while Python is still
importing a command's modules ends in one line and exit 130/143, no traceback."""
import signal
import subprocess
import sys

import pytest


@pytest.mark.parametrize("sig, code, word", [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")])
def test_a_stop_while_the_command_imports_is_one_line(sig, code, word):
    # the signal lands before the command's modules are imported: as a user's early Ctrl-C does
    program = ("import os, signal, dspark_sim.entry\n"
               f"os.kill(os.getpid(), {int(sig)})\n"
               "import dspark_sim.cli\n"
               "raise SystemExit(dspark_sim.entry.dspark_sim())\n")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    assert done.returncode == code
    assert done.stderr.strip().splitlines() == [f"{word} while starting; nothing written"]


def test_the_entry_points_run_their_commands(tmp_path):
    done = subprocess.run([sys.executable, "-c", "import dspark_sim.entry as e, sys; sys.argv = ['dspark-sim', "
                           "'--help']; raise SystemExit(e.dspark_sim())"], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)
    assert done.returncode == 0 and "run" in done.stdout
