"""omnifc.flower._local: the local deployment's processes are stopped with every process they
started, also those in sessions of their own (as Flower's SuperExec starts its apps)."""

from __future__ import annotations

import os
import pathlib
import sys
import time

import pytest

pytest.importorskip("flwr", reason="flwr is not installed (pip install 'omnifc[flower]'); "
                    ".ci/protobuf_matrix.sh runs these tests in its low venv")

from omnifc.flower._local import LocalProcesses, descendants, wait_listening  # noqa: E402

pytestmark = [pytest.mark.protobuf_matrix, pytest.mark.timeout(60)]

#: a parent that starts a grandchild in a new session (like flower-superexec's apps), writes
#: its pid, and sleeps
PARENT = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                         start_new_session=True)
open(sys.argv[1], "w").write(str(child.pid))
time.sleep(120)
"""


def _running(pid: int) -> bool:
    try:
        state = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_stop_ends_a_grandchild_in_a_session_of_its_own(tmp_path):
    pid_file = tmp_path / "grandchild.pid"
    processes = LocalProcesses(tmp_path)
    try:
        parent = processes.start("parent", [sys.executable, "-c", PARENT, str(pid_file)])
        deadline = time.monotonic() + 30
        while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        grandchild = int(pid_file.read_text())
        # another session: killing the started process's group would miss it
        assert os.getsid(grandchild) != os.getsid(parent.pid)
        assert {parent.pid, grandchild} <= processes.tree()
        assert descendants([parent.pid]) == {parent.pid, grandchild}
    finally:
        stopped = processes.stop(grace=5)
    assert {parent.pid, grandchild} <= stopped
    assert parent.returncode is not None
    # SIGKILL was sent; the kernel ends the process asynchronously (under load, a moment
    # after stop returns): wait for it, bounded
    deadline = time.monotonic() + 10
    while (_running(grandchild) or processes.alive()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _running(grandchild)
    assert processes.alive() == []
    assert "parent" in [name for name, _, _ in processes.started]


def test_wait_listening_fails_when_the_process_exits_first(tmp_path):
    with LocalProcesses(tmp_path) as processes:
        quitter = processes.start("quitter", [sys.executable, "-c", "raise SystemExit(3)"])
        with pytest.raises(RuntimeError, match="exited with 3"):
            wait_listening(1, quitter, timeout=20)  # port 1: nothing listens there
    assert quitter.returncode == 3
