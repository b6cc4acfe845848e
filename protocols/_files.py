"""Safe file writes and private-key file checks: the one place omnifc writes files.

Every file omnifc writes (keys, certificates, cards, session configs, results) goes
through :func:`write_file`:

- the data goes to a fresh temporary file in the target folder (``O_CREAT | O_EXCL |
  O_NOFOLLOW``, created with its final mode), is flushed to disk, and is then *renamed*
  onto the target name. A rename replaces a directory entry; it never follows a symbolic
  link, so a link planted at the target name can never redirect the write;
- a target that already exists as a symbolic link is refused outright, with or without
  ``overwrite`` (``--force``): it is never replaced, and its target is never touched;
- without ``overwrite`` an existing target is refused, and the final step is a hard link
  (which fails if the name appeared meanwhile) instead of a rename, so there is no window
  in which an existing file could be replaced.

:func:`prepare_output_folder` creates an output folder with mode 0700 and warns when an
existing one is writable by group or others (anyone who can write there can plant or swap
files before you read them back). :func:`prepare_private_folder`, for the folder that
receives private keys (``omnifc keygen``, ``omnifc certs``), refuses instead: a folder
that is itself a symbolic link (it would put the keys wherever whoever made the link
chose), one that group or others can write to (sticky ones like ``/tmp`` included: anyone
there can claim the names first), and one owned by another user; a missing one it creates
with mode 0700. :func:`check_private_key_file` refuses private key
files that group or others may read or write, like OpenSSH does: a key that others can
read is a key others may hold.

Examples
--------
>>> import os, tempfile
>>> from protocols._files import write_file
>>> folder = tempfile.mkdtemp()
>>> path = write_file(os.path.join(folder, "a.txt"), b"hello")
>>> path.read_bytes(), oct(path.stat().st_mode & 0o777)
(b'hello', '0o644')
>>> os.symlink(os.path.join(folder, "a.txt"), os.path.join(folder, "link.txt"))
>>> write_file(os.path.join(folder, "link.txt"), b"x", overwrite=True)
Traceback (most recent call last):
...
finite_field._errors.ParameterError: refusing to write ... it is a symbolic link ...
"""

from __future__ import annotations

import io
import logging
import os
import secrets
import stat
from pathlib import Path

from finite_field import ParameterError

__all__ = ["write_file", "write_private_file", "save_npy", "prepare_output_folder",
           "prepare_private_folder", "check_private_key_file", "PRIVATE_MODE",
           "PUBLIC_MODE"]

logger = logging.getLogger(__name__)

#: Mode of files holding private keys.
PRIVATE_MODE = 0o600
#: Mode of every other file omnifc writes (readable by all, writable by the owner only).
PUBLIC_MODE = 0o644

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def _refuse_symlink(path: Path) -> None:
    if path.is_symlink():
        raise ParameterError(
            f"refusing to write {str(path)!r}: it is a symbolic link (to "
            f"{os.readlink(path)!r}); omnifc never writes through links, --force included. "
            "Remove the link if you put it there, and check who else can write to "
            f"{str(path.parent)!r}")


def write_file(path, data: bytes, *, mode: int = PUBLIC_MODE, overwrite: bool = False) -> Path:
    """Write ``data`` to ``path`` safely (see the module docstring); returns the path.

    Parameters
    ----------
    path : str or os.PathLike
    data : bytes
    mode : int
        The file's permission bits (default 0644; 0600 for private keys).
    overwrite : bool
        Replace an existing regular file (never a symbolic link).

    Raises
    ------
    ParameterError
        When the target is a symbolic link, a folder, or exists and ``overwrite`` is False.
    """
    path = Path(path)
    _refuse_symlink(path)
    if path.exists() and not path.is_file():
        raise ParameterError(f"refusing to write {str(path)!r}: it exists and is not a "
                             "regular file")
    if not overwrite and path.exists():
        raise ParameterError(f"refusing to overwrite existing file {str(path)!r} (pass "
                             "--force / overwrite=True to replace it)")
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, mode)
    try:
        try:
            os.fchmod(fd, mode)  # the umask may have narrowed it; never widened
            with os.fdopen(fd, "wb") as handle:
                fd = -1
                handle.write(bytes(data))
                handle.flush()
                os.fsync(handle.fileno())
        finally:
            if fd != -1:
                os.close(fd)
        if overwrite:
            _refuse_symlink(path)  # a link planted since the first check is refused too;
            os.replace(tmp, path)  # and a later one would be replaced, never followed
        else:
            try:
                os.link(tmp, path, follow_symlinks=False)
            except FileExistsError:
                raise ParameterError(f"refusing to overwrite existing file {str(path)!r} "
                                     "(it appeared while writing)") from None
            except OSError:  # no hard links on this file system: check, then rename
                if path.exists() or path.is_symlink():
                    raise ParameterError(f"refusing to overwrite existing file "
                                         f"{str(path)!r} (it appeared while writing)") from None
                os.replace(tmp, path)
    finally:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
    return path


def write_private_file(path, data: bytes, *, overwrite: bool = False) -> Path:
    """:func:`write_file` with mode 0600 (private keys)."""
    return write_file(path, data, mode=PRIVATE_MODE, overwrite=overwrite)


def save_npy(path, array, *, overwrite: bool = True) -> Path:
    """``numpy.save`` through :func:`write_file` (no pickles; links refused).

    >>> import os, tempfile, numpy as np
    >>> from protocols._files import save_npy
    >>> path = save_npy(os.path.join(tempfile.mkdtemp(), "x.npy"), np.arange(3))
    >>> np.load(path).tolist()
    [0, 1, 2]
    """
    import numpy as np

    buffer = io.BytesIO()
    np.save(buffer, np.asarray(array), allow_pickle=False)
    return write_file(path, buffer.getvalue(), overwrite=overwrite)


def prepare_output_folder(folder) -> Path:
    """Create ``folder`` (mode 0700, parents as needed) or check an existing one.

    Logs a WARNING when an existing folder is writable by group or others: whoever can
    write there can plant files or links under the names omnifc is about to write, or
    swap a file between writing and reading it. Returns the absolute path.
    """
    folder = Path(folder).absolute()
    if folder.exists() and not folder.is_dir():
        raise ParameterError(f"the output folder {str(folder)!r} exists and is not a folder")
    if not folder.exists():
        folder.mkdir(mode=0o700, parents=True)
        return folder
    mode = folder.stat().st_mode
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        logger.warning(
            "the output folder %s is writable by %s (mode %s): anyone who can write there "
            "can plant links or swap files; use a folder only you can write to "
            "(chmod go-w, or a fresh folder)", folder, _writable_by(mode), oct(mode & 0o7777))
    return folder


def _writable_by(mode: int) -> str:
    return ("group and others" if mode & stat.S_IWGRP and mode & stat.S_IWOTH
            else "group" if mode & stat.S_IWGRP else "others")


def prepare_private_folder(folder) -> Path:
    """Create ``folder`` (mode 0700, parents as needed) or check that only you control it:
    the folder private keys are written into. Returns the absolute path.

    Checked without following a link at ``folder`` itself (the folders above it may be
    links): it must not be a symbolic link, must be a folder owned by you, and must not
    be writable by group or others (whoever can write there can plant names before the
    keys are written or, without the sticky bit, swap them afterwards). Nothing is
    changed when it is refused.

    Raises
    ------
    ParameterError
        Naming the folder, what is wrong with it and the fix.

    Examples
    --------
    >>> import os, tempfile
    >>> from protocols._files import prepare_private_folder
    >>> folder = prepare_private_folder(os.path.join(tempfile.mkdtemp(), "keys"))
    >>> oct(folder.stat().st_mode & 0o777)
    '0o700'
    >>> os.chmod(folder, 0o1777)
    >>> prepare_private_folder(folder)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    finite_field._errors.ParameterError: refusing to write private keys into ...
    """
    folder = Path(folder).absolute()
    try:
        info = folder.lstat()
    except FileNotFoundError:
        try:
            folder.mkdir(mode=0o700, parents=True)
        except FileExistsError:  # it appeared meanwhile: checked below like any other
            pass
        info = folder.lstat()  # the checks below apply to what was made, too
    except NotADirectoryError:
        raise ParameterError(f"the output folder {str(folder)!r} cannot be made: a folder "
                             "above it is a file") from None
    if stat.S_ISLNK(info.st_mode):
        raise ParameterError(
            f"refusing to write private keys into {str(folder)!r}: it is a symbolic link "
            f"(to {os.readlink(folder)!r}), and the keys would go wherever whoever made it "
            "chose. Give the real folder's path if it is yours, or a fresh path (keygen "
            "creates it with mode 0700)")
    if not stat.S_ISDIR(info.st_mode):
        raise ParameterError(f"the output folder {str(folder)!r} exists and is not a folder")
    owner = getattr(os, "geteuid", None)
    if owner is not None and info.st_uid != owner():
        raise ParameterError(
            f"refusing to write private keys into {str(folder)!r}: it is owned by user id "
            f"{info.st_uid}, not by you ({owner()}), and its owner can read, replace or "
            "remove what is written there. Use a folder of your own, or a fresh path "
            "(keygen creates it with mode 0700)")
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise ParameterError(
            f"refusing to write private keys into {str(folder)!r}: it is writable by "
            f"{_writable_by(info.st_mode)} (mode {oct(stat.S_IMODE(info.st_mode))}), so "
            "they can plant links or files under the key names first"
            + ("" if info.st_mode & stat.S_ISVTX else ", or swap the keys afterwards")
            + ". Use a folder only you can write to ('chmod go-w' it if it is yours), or "
              "a fresh path (keygen creates it with mode 0700)")
    return folder


def check_private_key_file(path, what: str = "private key") -> Path:
    """Refuse a private key file that group or others may read or write (any 0077 bit).

    Like OpenSSH, omnifc does not use a key others might already have read. Fix the file
    with ``chmod 600 FILE`` (container secrets: mount them with mode 0400 or 0600).

    Raises
    ------
    ParameterError
        Naming the file, its mode and the fix; also when the file is missing or is not a
        regular file.
    """
    path = Path(path)
    try:
        info = path.stat()
    except FileNotFoundError:
        raise ParameterError(f"{what} file not found: {str(path)!r}") from None
    if not stat.S_ISREG(info.st_mode):
        raise ParameterError(f"{what} {str(path)!r} is not a regular file")
    if info.st_mode & 0o077:
        raise ParameterError(
            f"{what} file {str(path)!r} has mode {oct(info.st_mode & 0o777)}: group or others "
            "may read or change it, so it may no longer be private. omnifc refuses it; run "
            f"'chmod 600 {path}' (and consider making a new key if others did read it)")
    return path
