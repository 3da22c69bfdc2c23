"""Where outputs go and how they get there, so that nothing a user already has is lost.

A command writes its output directory whole: into a temporary sibling that is renamed into
place at the end (:func:`atomic_dir`), with a marker file (:data:`MARKER`) saying dspark-sim
wrote it. An existing target is replaced only when it carries that marker or is an empty
directory; anything else there (a directory of the user's, a file, a link) is refused in one
line before any work is done (:func:`check_out`), never moved or deleted. A name that becomes
a directory (a scenario's ``name``, a study) must be one plain path component
(:func:`check_name`). Parent directories a command creates are removed again when it fails or
is stopped. Every refusal is an :class:`~dspark_sim.errors.InputError` naming the flag.
"""
from __future__ import annotations

import errno
import os
import shutil
import stat
import tempfile
from contextlib import contextmanager
from pathlib import Path

from dspark_sim.errors import InputError, os_why

MARKER = ".dspark-sim"
MARKER_TEXT = ("This directory was written by dspark-sim. A later command writing its output here replaces\n"
               "the whole directory; a directory without this file is never replaced.\n")
MAX_NAME_BYTES = 200  # a file name holds 255 bytes: room for the suffixes and temporary prefixes added


def check_name(name: object, file: str | Path | None, key: str) -> str:
    """``name`` if it can name an output directory on its own: a non-empty single path component
    (no ``/``, ``\\``, NUL; not ``.`` or ``..``) of at most MAX_NAME_BYTES bytes of UTF-8."""
    if not isinstance(name, str) or not name:
        raise InputError(file, key, name, "expected a non-empty name")
    if name in (".", "..") or any(c in name for c in "/\\\0"):
        raise InputError(file, key, name, "must be a plain name (no /, \\ or NUL, not . or ..): "
                         "it names an output directory")
    try:
        size = len(name.encode())
    except UnicodeEncodeError:
        raise InputError(file, key, name, "not valid Unicode text") from None
    if size > MAX_NAME_BYTES:
        raise InputError(file, key, name, f"longer than {MAX_NAME_BYTES} bytes")
    return name


def check_out(path: str | Path, flag: str = "--out") -> Path:
    """Refuse now, in one line, an output directory the command could not write or may not
    replace: what is at ``path`` must be nothing, an empty directory or a directory dspark-sim
    wrote, and a temporary sibling must be creatable (tried, and undone). Returns ``path``."""
    path = Path(path)
    tmp, made = _temp_sibling(path, flag)
    os.rmdir(tmp)
    _remove_made(made)
    return path


@contextmanager
def atomic_dir(path: str | Path, flag: str = "--out"):
    """Yield a fresh temporary directory (holding :data:`MARKER`) that becomes ``path`` only if
    the block succeeds; :func:`check_out`'s rules decide whether ``path`` may be replaced.

    On any exception (or Ctrl-C) the temporary directory and the parents made for it are
    removed and an existing ``path`` is left untouched, so no half-written output survives.
    """
    path = Path(path)
    tmp, made = _temp_sibling(path, flag)
    try:
        usual_mode(tmp, directory=True)
        (tmp / MARKER).write_text(MARKER_TEXT)
        yield tmp
        _swap(tmp, path, flag)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        _remove_made(made)
        raise


def _temp_sibling(path: Path, flag: str) -> tuple[Path, list[Path]]:
    """(a new temporary directory beside ``path``, the parents made for it), once ``path`` is
    known to be replaceable; nothing is left made when this fails."""
    _refuse_in_the_way(path, flag)
    made = _make_parents(path, flag)
    try:
        return Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent)), made
    except OSError as err:
        _remove_made(made)
        raise InputError(None, flag, str(path), f"cannot write in {path.parent}: {os_why(err)}") from None


def _refuse_in_the_way(path: Path, flag: str) -> None:
    why = _in_the_way(path)
    if why is not None:
        raise InputError(None, flag, str(path), why)


@contextmanager
def output_folder(path: str | Path, flag: str = "--out"):
    """Yield ``path`` as a folder that files are written into one by one (each atomically):
    nothing, an empty directory or one dspark-sim wrote (files already there stay). What the
    block created (the folder, its parents) is removed again if it fails."""
    path = Path(path)
    _refuse_in_the_way(path, flag)
    made = _make_parents(path / MARKER, flag)
    marker = path / MARKER
    had_marker = marker.is_file()
    try:
        marker.write_text(MARKER_TEXT)
        yield path
    except BaseException:
        if not had_marker:
            marker.unlink(missing_ok=True)
        _remove_made(made)
        raise


def _in_the_way(path: Path) -> str | None:
    """Why ``path`` may not be replaced by an output directory, or None."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as err:
        return _path_problem(err)
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link: give the directory it points to, or another path"
    if not stat.S_ISDIR(st.st_mode):
        return "exists and is not a directory: remove it or give another output path"
    absolute = Path(os.path.abspath(path))
    if Path.cwd() == absolute or absolute in Path.cwd().parents:
        return "holds the working directory: give a directory of its own"
    try:
        marked = stat.S_ISREG(os.lstat(path / MARKER).st_mode)
    except OSError:
        marked = False
    if marked:
        return None
    try:
        empty = not os.listdir(path)
    except OSError as err:
        return f"cannot be read: {os_why(err)}"
    return None if empty else (f"exists and was not written by dspark-sim (it has no {MARKER} file): "
                               "remove it or give another output path")


def _path_problem(err: OSError) -> str:
    if err.errno == errno.ENOTDIR:
        return "a parent of it is a file, not a directory"
    if err.errno == errno.ELOOP:
        return "a symbolic link on the way loops"
    return f"cannot be used: {os_why(err)}"


def _make_parents(path: Path, flag: str) -> list[Path]:
    """Create the missing parents of ``path``, top down; returns those created (for undoing)."""
    missing = []
    parent = Path(os.path.abspath(path)).parent
    while True:
        try:
            st = os.stat(parent)
        except FileNotFoundError:
            missing.append(parent)
            parent = parent.parent
            continue
        except OSError as err:
            raise InputError(None, flag, str(path), f"cannot create it: {parent}: {_path_problem(err)}") from None
        if not stat.S_ISDIR(st.st_mode):
            raise InputError(None, flag, str(path), f"cannot create it: {parent} is a file, not a directory")
        break
    made = []
    for folder in reversed(missing):
        try:
            os.mkdir(folder)
        except OSError as err:
            _remove_made(made)
            raise InputError(None, flag, str(path), f"cannot create {folder}: {os_why(err)}") from None
        made.append(folder)
    return made


def _remove_made(made: list[Path]) -> None:
    """Remove directories :func:`_make_parents` created, deepest first, if they are still empty."""
    for folder in reversed(made):
        try:
            os.rmdir(folder)
        except OSError:
            return  # something else was put there meanwhile: keep it


def _swap(tmp: Path, path: Path, flag: str) -> None:
    """Rename ``tmp`` to ``path``; a directory dspark-sim wrote there is moved aside, then removed."""
    try:
        os.rename(tmp, path)  # nothing there, or an empty directory (rename replaces it)
        return
    except OSError as err:
        if err.errno not in (errno.ENOTEMPTY, errno.EEXIST):
            raise InputError(None, flag, str(path), f"cannot write it: {os_why(err)}") from None
    _refuse_in_the_way(path, flag)  # again: something may have been put there while the command ran
    old = path.parent / f".{path.name}.old-{os.getpid()}"
    os.rename(path, old)
    try:
        os.rename(tmp, path)
    except BaseException:
        os.rename(old, path)
        raise
    shutil.rmtree(old, ignore_errors=True)


def usual_mode(path: str | Path, *, directory: bool = False) -> None:
    """Give a ``mkstemp``/``mkdtemp`` result (0600/0700) the mode a plain create would:
    0666/0777 less the umask, so a server running as another user can read the output."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, (0o777 if directory else 0o666) & ~umask)


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write a file through a temporary sibling and ``os.replace``."""
    atomic_write_lines(path, [text])


def atomic_write_lines(path: str | Path, parts, flag: str = "--out") -> None:
    """Write the strings of ``parts`` (an iterable, consumed as it is written) into a file
    through a temporary sibling and ``os.replace``: an error on the way leaves nothing, not
    even the parent directories it created. What is at ``path`` must be a regular file, or nothing."""
    path = Path(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    except OSError as err:
        raise InputError(None, flag, str(path), _path_problem(err)) from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise InputError(None, flag, str(path), "exists and is not a regular file: remove it or give another path")
    made = _make_parents(path, flag)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.tmp-", dir=path.parent)
    except OSError as err:
        _remove_made(made)
        raise InputError(None, flag, str(path), f"cannot write in {path.parent}: {os_why(err)}") from None
    try:
        with os.fdopen(fd, "w") as f:
            for text in parts:
                f.write(text)
        usual_mode(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        _remove_made(made)
        raise
