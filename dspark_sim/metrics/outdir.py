"""Atomic output: everything goes into a temporary sibling, renamed into place at the end."""
from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path


def usual_mode(path: str | Path, *, directory: bool = False) -> None:
    """Give a ``mkstemp``/``mkdtemp`` result (0600/0700) the mode a plain create would:
    0666/0777 less the umask, so a server running as another user can read the output."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, (0o777 if directory else 0o666) & ~umask)


@contextmanager
def atomic_dir(path: str | Path):
    """Yield a fresh temporary directory that becomes ``path`` only if the block succeeds.

    On any exception (or Ctrl-C) the temporary directory is removed and an
    existing ``path`` is left untouched, so no half-written output survives.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
    usual_mode(tmp, directory=True)
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = None
    if path.exists():
        old = path.parent / f".{path.name}.old-{os.getpid()}"
        path.rename(old)
    tmp.rename(path)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write a file through a temporary sibling and ``os.replace``."""
    atomic_write_lines(path, [text])


def atomic_write_lines(path: str | Path, parts) -> None:
    """Write the strings of ``parts`` (an iterable, consumed as it is written) into a file
    through a temporary sibling and ``os.replace``: an error on the way leaves nothing."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.tmp-", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            for text in parts:
                f.write(text)
        usual_mode(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
