"""protocols._files: the safe-write rules of its docstring, each observed (issue 14).

Expectations come from the module docstring and from the file system itself (os.stat,
os.listdir, os.readlink): exact modes whatever the umask, no temporary file left behind,
links never followed or replaced, the fallback without hard links, and the messages that
name the file, its mode and the fix.
"""

from __future__ import annotations

import logging
import os
import re
import stat

import numpy as np
import pytest

from finite_field import ParameterError
from protocols import _files
from protocols._files import (PRIVATE_MODE, PUBLIC_MODE, check_private_key_file,
                              prepare_output_folder, save_npy, write_file, write_private_file)

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def umask():
    def set_mask(value):
        old = os.umask(value)
        restore.append(old)
    restore = []
    yield set_mask
    if restore:
        os.umask(restore[0])


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_modes_are_the_documented_constants():
    assert PRIVATE_MODE == 0o600 and PUBLIC_MODE == 0o644


@pytest.mark.parametrize("mask", [0o022, 0o077, 0o000])
def test_write_gives_the_exact_mode_and_leaves_no_temporary_file(tmp_path, umask, mask):
    umask(mask)
    public = write_file(tmp_path / "a.txt", b"hello")
    private = write_private_file(tmp_path / "k.pem", bytearray(b"secret"))
    odd = write_file(tmp_path / "odd", b"", mode=0o640)
    assert public == tmp_path / "a.txt" and private == tmp_path / "k.pem"
    assert public.read_bytes() == b"hello" and private.read_bytes() == b"secret"
    assert odd.read_bytes() == b""
    # 0644 even under umask 077 would be narrowed; never widened beyond what is asked
    assert _mode(public) == 0o644
    assert _mode(private) == 0o600 and _mode(odd) == 0o640
    assert sorted(os.listdir(tmp_path)) == ["a.txt", "k.pem", "odd"]


def test_existing_file_refused_without_overwrite_and_replaced_with_it(tmp_path):
    path = tmp_path / "out.bin"
    path.write_bytes(b"old")
    path.chmod(0o666)
    with pytest.raises(ParameterError, match=re.escape(
            f"refusing to overwrite existing file {str(path)!r} (pass --force / "
            "overwrite=True to replace it)")):
        write_file(path, b"new")
    assert path.read_bytes() == b"old"
    write_private_file(path, b"new", overwrite=True)
    assert path.read_bytes() == b"new" and _mode(path) == 0o600   # a wider mode narrowed
    assert os.listdir(tmp_path) == ["out.bin"]


@pytest.mark.parametrize("overwrite", [False, True])
def test_a_symbolic_link_is_never_written_through_or_replaced(tmp_path, overwrite):
    target = tmp_path / "victim"
    target.write_bytes(b"keep")
    link = tmp_path / "link"
    os.symlink(target, link)
    with pytest.raises(ParameterError) as info:
        write_file(link, b"x", overwrite=overwrite)
    text = str(info.value)
    assert text.startswith(f"refusing to write {str(link)!r}: it is a symbolic link (to "
                           f"{str(target)!r}); omnifc never writes through links")
    assert text.endswith("omnifc never writes through links, --force included. Remove the link "
                         f"if you put it there, and check who else can write to "
                         f"{str(tmp_path)!r}")
    assert target.read_bytes() == b"keep" and os.readlink(link) == str(target)
    # a dangling link is refused too
    os.symlink(tmp_path / "nowhere", tmp_path / "dangling")
    with pytest.raises(ParameterError, match="symbolic link"):
        write_file(tmp_path / "dangling", b"x", overwrite=overwrite)
    assert not (tmp_path / "nowhere").exists()
    assert sorted(os.listdir(tmp_path)) == ["dangling", "link", "victim"]


def test_a_folder_is_refused(tmp_path):
    (tmp_path / "d").mkdir()
    for overwrite in (False, True):
        with pytest.raises(ParameterError, match=re.escape(
                f"refusing to write {str(tmp_path / 'd')!r}: it exists and is not a regular "
                "file")):
            write_file(tmp_path / "d", b"x", overwrite=overwrite)


def test_a_link_planted_while_writing_is_refused_with_overwrite(tmp_path, monkeypatch):
    path = tmp_path / "out"
    path.write_bytes(b"old")
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep")
    real_fsync = os.fsync

    def plant(fd):
        real_fsync(fd)
        path.unlink()
        os.symlink(victim, path)
    monkeypatch.setattr(_files.os, "fsync", plant)
    with pytest.raises(ParameterError, match="symbolic link"):
        write_file(path, b"new", overwrite=True)
    assert victim.read_bytes() == b"keep" and path.is_symlink()
    assert sorted(os.listdir(tmp_path)) == ["out", "victim"]   # temporary file removed


def test_a_file_appearing_while_writing_is_not_replaced(tmp_path, monkeypatch):
    path = tmp_path / "out"
    real_fsync = os.fsync

    def appear(fd):
        real_fsync(fd)
        path.write_bytes(b"theirs")
    monkeypatch.setattr(_files.os, "fsync", appear)
    with pytest.raises(ParameterError, match=re.escape(
            f"refusing to overwrite existing file {str(path)!r} (it appeared while writing)")):
        write_file(path, b"mine")
    assert path.read_bytes() == b"theirs" and os.listdir(tmp_path) == ["out"]


def test_without_hard_links_the_write_falls_back_to_check_then_rename(tmp_path, monkeypatch):
    calls = []

    def no_links(*args, **kwargs):
        calls.append(kwargs)
        raise PermissionError("hard links not supported")
    monkeypatch.setattr(_files.os, "link", no_links)
    path = write_file(tmp_path / "out", b"data", mode=0o600)
    assert path.read_bytes() == b"data" and _mode(path) == 0o600
    assert calls == [{"follow_symlinks": False}]
    assert os.listdir(tmp_path) == ["out"]
    # ... and a name that appeared meanwhile is refused there too
    real_fsync = os.fsync
    other = tmp_path / "other"

    def appear(fd):
        real_fsync(fd)
        other.write_bytes(b"theirs")
    monkeypatch.setattr(_files.os, "fsync", appear)
    with pytest.raises(ParameterError, match=re.escape(
            f"refusing to overwrite existing file {str(other)!r} (it appeared while writing)")):
        write_file(other, b"mine")
    assert other.read_bytes() == b"theirs"
    # ... a link that appeared meanwhile, too (dangling: exists() alone would miss it)

    def link_appears(fd):
        real_fsync(fd)
        os.symlink(tmp_path / "nowhere", tmp_path / "third")
    monkeypatch.setattr(_files.os, "fsync", link_appears)
    with pytest.raises(ParameterError, match="it appeared while writing"):
        write_file(tmp_path / "third", b"mine")
    assert (tmp_path / "third").is_symlink() and not (tmp_path / "nowhere").exists()
    assert sorted(os.listdir(tmp_path)) == ["other", "out", "third"]


def test_the_temporary_file_is_hidden_in_the_target_folder(tmp_path, monkeypatch):
    seen = []
    real_open = os.open

    def spy(name, flags, mode=0o777, **kw):
        seen.append((str(name), flags, mode))
        return real_open(name, flags, mode, **kw)
    monkeypatch.setattr(_files.os, "open", spy)
    write_file(tmp_path / "a.txt", b"x", mode=0o640)
    (name, flags, mode), = seen
    assert re.fullmatch(re.escape(str(tmp_path)) + r"/\.a\.txt\.[0-9a-f]{12}\.tmp", name)
    need = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    assert flags & need == need and mode == 0o640


def test_save_npy_round_trip_no_pickles_and_overwrites_by_default(tmp_path):
    path = save_npy(tmp_path / "x.npy", [[1, 2], [3, 4]])
    assert np.load(path).tolist() == [[1, 2], [3, 4]] and _mode(path) == 0o644
    save_npy(path, np.arange(3.0))
    assert np.load(path).tolist() == [0.0, 1.0, 2.0]
    with pytest.raises(ParameterError, match="refusing to overwrite"):
        save_npy(path, np.arange(2), overwrite=False)
    with pytest.raises(ValueError):
        save_npy(tmp_path / "o.npy", np.array([{"a": 1}], dtype=object))
    assert not (tmp_path / "o.npy").exists()


def test_prepare_output_folder_creates_0700_with_parents(tmp_path, umask, monkeypatch):
    umask(0o022)
    monkeypatch.chdir(tmp_path)
    out = prepare_output_folder("a/b/c")
    assert out == tmp_path / "a" / "b" / "c" and out.is_absolute() and out.is_dir()
    assert _mode(out) == 0o700
    assert prepare_output_folder(out) == out   # an existing folder is fine
    (tmp_path / "f").write_text("x")
    with pytest.raises(ParameterError, match=re.escape(
            f"the output folder {str(tmp_path / 'f')!r} exists and is not a folder")):
        prepare_output_folder(tmp_path / "f")


@pytest.mark.parametrize("mode, who", [(0o775, "group"), (0o757, "others"),
                                       (0o777, "group and others"), (0o1777, "group and others"),
                                       (0o755, None), (0o700, None)])
def test_prepare_output_folder_warns_about_a_folder_others_can_write(tmp_path, caplog, mode,
                                                                    who):
    folder = tmp_path / "out"
    folder.mkdir()
    folder.chmod(mode)
    with caplog.at_level(logging.WARNING, logger="protocols._files"):
        assert prepare_output_folder(folder) == folder
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    if who is None:
        assert warnings == []
    else:
        assert warnings == [
            f"the output folder {folder} is writable by {who} (mode {oct(mode)}): anyone who "
            "can write there can plant links or swap files; use a folder only you can write "
            "to (chmod go-w, or a fresh folder)"]
        assert caplog.records[-1].name == "protocols._files"


@pytest.mark.parametrize("mode", [0o600, 0o400, 0o700])
def test_a_private_key_file_only_its_owner_can_use_is_accepted(tmp_path, mode):
    path = tmp_path / "k.pem"
    path.write_bytes(b"k")
    path.chmod(mode)
    assert check_private_key_file(str(path)) == path


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o620, 0o602, 0o610, 0o601, 0o644])
def test_a_private_key_file_group_or_others_may_use_is_refused(tmp_path, mode):
    path = tmp_path / "k.pem"
    path.write_bytes(b"k")
    path.chmod(mode)
    with pytest.raises(ParameterError) as info:
        check_private_key_file(path, "TLS key")
    assert str(info.value) == (
        f"TLS key file {str(path)!r} has mode {oct(mode)}: group or others may read or "
        "change it, so it may no longer be private. omnifc refuses it; run "
        f"'chmod 600 {path}' (and consider making a new key if others did read it)")


def test_a_missing_or_irregular_private_key_file_is_refused(tmp_path):
    with pytest.raises(ParameterError) as info:
        check_private_key_file(tmp_path / "missing.pem")
    assert str(info.value) == f"private key file not found: {str(tmp_path / 'missing.pem')!r}"
    with pytest.raises(ParameterError) as info:
        check_private_key_file(tmp_path, "identity key")
    assert str(info.value) == f"identity key {str(tmp_path)!r} is not a regular file"


def test_write_private_file_refuses_an_existing_file_by_default(tmp_path):
    path = tmp_path / "k.pem"
    path.write_bytes(b"old key")
    with pytest.raises(ParameterError, match="refusing to overwrite existing file"):
        write_private_file(path, b"new key")
    assert path.read_bytes() == b"old key"


def test_a_failure_while_writing_closes_and_removes_the_temporary_file(tmp_path, monkeypatch):
    opened = []
    real_open = os.open

    def spy(*args, **kwargs):
        fd = real_open(*args, **kwargs)
        opened.append(fd)
        return fd

    def refuse(fd, mode):
        raise PermissionError("fchmod refused")
    monkeypatch.setattr(_files.os, "open", spy)
    monkeypatch.setattr(_files.os, "fchmod", refuse)
    with pytest.raises(PermissionError, match="fchmod refused"):
        write_file(tmp_path / "a", b"x")
    assert os.listdir(tmp_path) == []
    with pytest.raises(OSError):   # the descriptor was closed
        os.fstat(opened[0])
