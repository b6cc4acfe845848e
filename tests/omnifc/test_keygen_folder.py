"""``omnifc keygen --out DIR`` writes private keys only into a folder only its owner controls.

Refused, with nothing written anywhere: an ``--out`` that is itself a symbolic link (to a
folder, or dangling: the keys would land wherever the link points, which whoever planted
it chose), an existing folder that group or others can write to (sticky ones like /tmp
included: anyone there can plant names before keygen writes them, or, without the sticky
bit, swap the keys afterwards), and one owned by another user. A fresh folder keygen
creates itself (mode 0700), even inside /tmp, is fine. ``omnifc certs`` (which writes
keys too) follows the same rule.
"""

from __future__ import annotations

import contextlib
import io
import os
import stat

import pytest

from protocols import generate_certificates
from protocols._cards import generate_keys

pytestmark = pytest.mark.timeout(120)


def omnifc(*args):
    from omnifc.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in args])
    return code, out.getvalue(), err.getvalue()


def _tree(folder):
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*"))


def test_a_symlinked_out_folder_is_refused_and_nothing_is_written_through_it(tmp_path):
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    link = tmp_path / "keys"
    link.symlink_to(target, target_is_directory=True)
    code, out, err = omnifc("keygen", "--party", "alice", "--out", link)
    assert code == 1 and out == ""
    assert "is a symbolic link" in err and str(link) in err and str(target) in err
    assert _tree(target) == [] and link.is_symlink()


def test_a_dangling_symlink_as_out_is_refused_and_not_created(tmp_path):
    link = tmp_path / "keys"
    link.symlink_to(tmp_path / "planted", target_is_directory=True)
    code, _, err = omnifc("keygen", "--party", "alice", "--out", link)
    assert code == 1 and "is a symbolic link" in err
    assert not (tmp_path / "planted").exists() and _tree(tmp_path) == ["keys"]


@pytest.mark.parametrize("mode, who", [(0o777, "group and others"),
                                       (0o1777, "group and others"),  # sticky, like /tmp
                                       (0o707, "others"), (0o770, "group"),
                                       (0o1733, "group and others")])
def test_a_folder_others_can_write_to_is_refused(tmp_path, mode, who):
    folder = tmp_path / "shared"
    folder.mkdir()
    folder.chmod(mode)
    code, out, err = omnifc("keygen", "--party", "alice", "--out", folder)
    assert code == 1 and out == ""
    assert f"is writable by {who} (mode {oct(mode)})" in err and str(folder) in err
    assert _tree(folder) == []
    assert stat.S_IMODE(folder.stat().st_mode) == mode  # not "fixed" behind the user's back


def test_a_folder_of_another_user_is_refused(tmp_path, monkeypatch):
    folder = tmp_path / "theirs"
    folder.mkdir(mode=0o700)
    me = os.geteuid()
    monkeypatch.setattr(os, "geteuid", lambda: me + 1)
    code, _, err = omnifc("keygen", "--party", "alice", "--out", folder)
    assert code == 1 and f"is owned by user id {me}, not by you ({me + 1})" in err
    assert _tree(folder) == []


def test_a_fresh_folder_inside_a_sticky_world_writable_one_is_fine(tmp_path):
    public = tmp_path / "tmp"
    public.mkdir()
    public.chmod(0o1777)
    code, out, err = omnifc("keygen", "--party", "alice", "--out", public / "keys")
    assert code == 0, err
    assert stat.S_IMODE((public / "keys").stat().st_mode) == 0o700
    assert _tree(public / "keys") == ["alice.card.toml", "alice.identity.pem", "alice.key",
                                      "alice.pem"]
    # and an existing folder only its owner can write to is fine too (0755 included)
    (tmp_path / "mine").mkdir(mode=0o755)
    (tmp_path / "mine").chmod(0o755)
    generate_keys(tmp_path / "mine", "bob")
    assert len(_tree(tmp_path / "mine")) == 4


def test_certs_refuses_the_same_folders_before_writing(tmp_path):
    folder = tmp_path / "shared"
    folder.mkdir()
    folder.chmod(0o1777)
    code, out, err = omnifc("certs", "--out", folder, "--parties", "a,b,c")
    assert code == 1 and "is writable by group and others" in err
    assert _tree(folder) == []
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "real")
    (tmp_path / "real").mkdir(mode=0o700)
    with pytest.raises(ValueError, match="is a symbolic link"):
        generate_certificates(link, ["a", "b", "c"])
    assert _tree(tmp_path / "real") == []
