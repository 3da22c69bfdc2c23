"""The console commands' entry points (``pyproject.toml``'s scripts).

A stop signal is handled from this module's first lines, before a command's modules are
imported: SIGINT or SIGTERM while Python is still importing them ends in one line and exit code
130 or 143, as a stop during the command does (:func:`dspark_sim.errors.run_reporting_errors`,
which takes the signals over once the command starts); nothing has been written by then. A
worker process a command starts (which imports this module again) is left as it was.
"""
import multiprocessing
import signal
import sys


def _stopped_early(signum, frame):
    word = "interrupted" if signum == signal.SIGINT else "terminated"
    signal.signal(signum, signal.SIG_IGN)
    sys.stderr.write(f"{word} while starting; nothing written\n")
    sys.exit(128 + signum)


# a spawned worker runs the console script (and so this) again while it starts, named by then
_WORKER = multiprocessing.current_process().name != "MainProcess"
if not _WORKER:  # a worker keeps the handling its process was given
    for _sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(_sig, _stopped_early)


def dspark_sim() -> int:
    from dspark_sim.cli import main

    return main()


def dspark_tune() -> int:
    from dspark_sim.tuner.cli import main

    return main()


def dspark_decode() -> int:
    from dspark_sim.kernels.decoder.cli import main

    return main()


def dspark_profile() -> int:
    from dspark_sim.profiling.cli import main

    return main()
