"""protocols/_party_processes.py: loopback parties forked from one preloaded server.

What a session relies on, checked through a stand-in entry (protocol_helpers.child_report):
the child is not a child of this process (it is forked by the server), it sees the
caller's environment and working folder *at the call* (not at the server's start), its
output goes to its log, the party's modules (PRELOAD) and numba's kernels are loaded
before it runs (and no kernel has run: test_the_kernels_are_loaded_and_work_in_the_child),
its exit code is the entry's return value, wait() has a deadline and a killed party
reports -9, as subprocess.Popen does.
"""

from __future__ import annotations

import os
import signal
import subprocess

import pytest

from finite_field import ProtocolError

from protocols._party_processes import PartyProcess, PartyServer

pytestmark = pytest.mark.timeout(120)

ENTRY = "protocol_helpers:child_report"


@pytest.fixture(scope="module")
def server():
    """One server for the module (it preloads the party's modules and kernels: about 1 s
    of CPU); the tests only fork children from it, and the one that closes a server makes
    its own."""
    server = PartyServer()
    yield server
    server.close()


def _start(server, tmp_path, *args, name="log"):
    log = tmp_path / f"{name}.txt"
    return server.start(list(args), log, entry=ENTRY), log


def test_a_party_sees_the_callers_environment_and_folder_at_the_call(server, tmp_path,
                                                                      monkeypatch):
    first, _ = _start(server, tmp_path, "OMNIFC_TEST_MARK", "0", "0", name="first")
    assert first.wait(60) == 0
    monkeypatch.setenv("OMNIFC_TEST_MARK", "set after the server started")
    monkeypatch.chdir(tmp_path)
    process, log = _start(server, tmp_path, "OMNIFC_TEST_MARK", "7", "0")
    assert isinstance(process, PartyProcess)
    assert process.wait(60) == 7 and process.returncode == 7 and process.poll() == 7
    mark, cwd, parent = log.read_text().splitlines()[0].rsplit(" ", 2)
    assert mark == "set after the server started"
    assert cwd == str(tmp_path)
    assert int(parent) == server._process.pid  # forked by the server
    assert log.read_text().splitlines()[1:] == ["to stderr", "preloaded numba", "done"]


def test_wait_has_a_deadline_and_a_killed_party_reports_the_signal(server, tmp_path):
    process, log = _start(server, tmp_path, "HOME", "0", "30")
    with pytest.raises(subprocess.TimeoutExpired):
        process.wait(0.5)
    assert process.poll() is None
    process.kill()
    assert process.wait(30) == -signal.SIGKILL
    assert "done" not in log.read_text()
    process.kill()  # a finished process: nothing happens
    process.send_signal(signal.SIGTERM)


def test_closing_the_server_ends_every_party_still_running(tmp_path):
    # nothing outlives the session: close() (or the owner's death, which closes the
    # server's stdin alike) kills the parties still running, and they report it
    server = PartyServer()
    parties = [_start(server, tmp_path, "HOME", "0", "60", name=f"p{i}")[0] for i in range(3)]
    done, _ = _start(server, tmp_path, "HOME", "5", "0", name="done")
    assert done.wait(60) == 5
    server.close()
    assert server._process.poll() == 0
    assert [p.poll() for p in parties] == [-signal.SIGKILL] * 3
    for party in parties:
        with pytest.raises(ProcessLookupError):
            os.kill(party.pid, 0)
    with pytest.raises(ProtocolError, match="party server"):
        server.start(["HOME", "0", "0"], tmp_path / "late.txt", entry=ENTRY, timeout=5)


def test_an_entry_that_raises_exits_1_with_its_traceback_in_the_log(server, tmp_path):
    process, log = _start(server, tmp_path, "HOME", "not a number", "0")
    assert process.wait(60) == 1
    assert "ValueError" in log.read_text()


def test_the_kernels_are_loaded_and_work_in_the_child(server, tmp_path):
    # the server loaded every kernel before the fork: the child neither imports numba nor
    # loads a kernel again, and a kernel runs exactly in it
    log = tmp_path / "kernels.txt"
    process = server.start([], log, entry="protocol_helpers:child_kernels")
    assert process.wait(60) == 0, log.read_text()
    loaded, registered, verdict = log.read_text().split()
    assert int(loaded) == int(registered) > 10 and verdict == "exact"
