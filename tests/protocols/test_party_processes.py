"""protocols/_party_processes.py: loopback parties forked from one preloaded server.

What a session relies on, checked through a stand-in entry (protocol_helpers.child_report):
the child is not a child of this process (it is forked by the server), it sees the
caller's environment and working folder *at the call* (not at the server's start), its
output goes to its log, the party's modules (PRELOAD) are imported before it runs and
numba is not (no thread pool exists before the fork), its exit code is the entry's return
value, wait() has a deadline and a killed party reports -9, as subprocess.Popen does.
"""

from __future__ import annotations

import os
import signal
import subprocess

import pytest

from protocols._party_processes import PartyProcess, start_party_process

pytestmark = pytest.mark.timeout(120)

ENTRY = "protocol_helpers:child_report"


def _start(tmp_path, *args, name="log"):
    log = tmp_path / f"{name}.txt"
    return start_party_process(list(args), log, entry=ENTRY), log


def test_a_party_sees_the_callers_environment_and_folder_at_the_call(tmp_path, monkeypatch):
    first, _ = _start(tmp_path, "OMNIFC_TEST_MARK", "0", "0", name="first")  # server up
    assert first.wait(60) == 0
    monkeypatch.setenv("OMNIFC_TEST_MARK", "set after the server started")
    monkeypatch.chdir(tmp_path)
    process, log = _start(tmp_path, "OMNIFC_TEST_MARK", "7", "0")
    assert isinstance(process, PartyProcess)
    assert process.wait(60) == 7 and process.returncode == 7 and process.poll() == 7
    mark, cwd, parent = log.read_text().splitlines()[0].rsplit(" ", 2)
    assert mark == "set after the server started"
    assert cwd == str(tmp_path)
    assert int(parent) != os.getpid()  # forked by the server, not by this process
    assert log.read_text().splitlines()[1:] == ["to stderr", "preloaded no numba", "done"]


def test_wait_has_a_deadline_and_a_killed_party_reports_the_signal(tmp_path):
    process, log = _start(tmp_path, "HOME", "0", "30")
    with pytest.raises(subprocess.TimeoutExpired):
        process.wait(0.5)
    assert process.poll() is None
    process.kill()
    assert process.wait(30) == -signal.SIGKILL
    assert "done" not in log.read_text()
    process.kill()  # a finished process: nothing happens
    process.send_signal(signal.SIGTERM)
