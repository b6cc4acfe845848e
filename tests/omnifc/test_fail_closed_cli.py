"""Fail closed, as a user sees it through ``omnifc serve`` / ``omnifc join`` in subprocesses
(issue 25, items 4 and 5 and the cosmetic rows): every side hears the cause of a failure and
exits within seconds of it; a result that did not reach a party is reported by the
coordinator (exit status, message, summary file); a failure leaves no half-made results
folder. Loopback only, ephemeral ports, every process cleaned up."""

from __future__ import annotations

import datetime
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from protocols._grpc_coordinator import ABORT_GRACE

pytestmark = [pytest.mark.network]

CLI = [sys.executable, "-m", "omnifc.cli"]
NAMES = ["a", "b", "c"]
#: Seconds within which every process must be gone after a failure: far below the sessions'
#: 60 s deadlines that a process left waiting would run into.
BOUND = 30.0
#: Seconds a process may take to end once it stopped serving: the gRPC server's stop (at
#: most 2 s, ``CoordinatorServer.stop``), the run loop's 0.1 s tick and the interpreter's
#: exit (about 1.5 s on a loaded 2-core machine). ``ABORT_GRACE`` itself is not widened.
TEARDOWN = 5.0
ROOT = Path(__file__).resolve().parents[2]
# the subprocesses run in a temporary folder: import this checkout's packages, not another's
ENV = {**os.environ, "PYTHONUNBUFFERED": "1",
       "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}


def omnifc(*args, cwd, timeout=180):
    return subprocess.run([*CLI, *map(str, args)], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=ENV)


def make_session(folder, *extra, names=NAMES):
    out = omnifc("certs", "--out", folder, "--parties", ",".join(names),
                 "--coordinator-address", "127.0.0.1:0", "--bound", "2", "--scale-bits", "8",
                 "--n-clusters", "2", "--deadline", "join=120", "--deadline", "shares=60",
                 "--deadline", "evaluation=60", "--deadline", "result=60", *extra,
                 cwd=folder.parent)
    assert out.returncode == 0, out.stderr
    return folder / "session.toml"


def failure_time(process) -> float:
    """Wall-clock seconds of the coordinator's own abort record (its log timestamp, in
    milliseconds, truncated: never later than the failure itself)."""
    found = re.search(r"^(\S+ \S+) protocols\._coordinator WARNING session .* failed in "
                      r"phase", process.err, re.M)
    assert found, process.err
    return datetime.datetime.strptime(found.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()


class Process:
    """A CLI subprocess whose stdout and stderr lines are collected (with arrival times)
    by reader threads, so a test can wait for a line without blocking on a pipe."""

    def __init__(self, args, cwd, command=None):
        command = [*CLI, *args] if command is None else command
        self.popen = subprocess.Popen(list(map(str, command)), cwd=cwd, env=ENV, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.lines: dict = {"out": [], "err": []}
        self.arrivals: queue.Queue = queue.Queue()
        self.readers = [threading.Thread(target=self._read, args=(stream, key), daemon=True)
                        for stream, key in ((self.popen.stdout, "out"),
                                            (self.popen.stderr, "err"))]
        for reader in self.readers:
            reader.start()
        self.ended_at = None  # wall-clock seconds of the exit, seen by a waiting thread
        threading.Thread(target=self._wait_exit, daemon=True).start()

    def _wait_exit(self):
        self.popen.wait()
        self.ended_at = time.time()

    def _read(self, stream, key):
        for line in stream:
            self.lines[key].append(line)
            self.arrivals.put((key, line))

    @property
    def out(self):
        return "".join(self.lines["out"])

    @property
    def err(self):
        return "".join(self.lines["err"])

    def wait_for(self, pattern, timeout):
        """Seconds (monotonic) when a line matching ``pattern`` arrived."""
        end = time.monotonic() + timeout
        seen = self.out + self.err
        if re.search(pattern, seen):
            return time.monotonic()
        while time.monotonic() < end:
            try:
                _, line = self.arrivals.get(timeout=0.1)
            except queue.Empty:
                if self.popen.poll() is not None and self.arrivals.empty():
                    break
                continue
            if re.search(pattern, line):
                return time.monotonic()
        raise AssertionError(f"no line matching {pattern!r} within {timeout} s:\n"
                             f"{self.out}\n{self.err}")

    def wait(self, timeout):
        try:
            code = self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        for reader in self.readers:
            reader.join(timeout=5)
        return code

    def stop(self):
        if self.popen.poll() is None:
            self.popen.kill()
        self.popen.wait()
        for reader in self.readers:
            reader.join(timeout=5)


def start_serve(tmp_path, config, *extra, progress=False):
    port_file = tmp_path / "port"
    serve = Process(["serve", "--config", config, "--port-file", port_file,
                     *([] if progress else ["--no-progress"]), *extra], cwd=tmp_path)
    deadline = time.monotonic() + 120
    while not (port_file.exists() and port_file.read_text().strip()):
        if serve.popen.poll() is not None or time.monotonic() > deadline:
            serve.stop()
            raise AssertionError(serve.err)
        time.sleep(0.05)
    return serve, port_file.read_text().strip()


def join(tmp_path, config, name, port, data, *extra, progress=False):
    return Process(["join", "--config", config, "--party", name, "--data", data,
                    "--target", f"127.0.0.1:{port}", *([] if progress else ["--no-progress"]),
                    *extra], cwd=tmp_path)


def wait_all(processes, seconds):
    """Wait up to ``seconds`` in total; the processes still running afterwards."""
    end = time.monotonic() + seconds
    for process in processes:
        process.wait(max(0.0, end - time.monotonic()))
    return [p for p in processes if p.popen.poll() is None]


def results_dirs(tmp_path):
    root = tmp_path / "omnifc-results"
    return sorted(p.name for p in root.iterdir()) if root.exists() else []


# -- item 5: a failure known at join reaches every party; everyone is gone in seconds --
@pytest.mark.timeout(240)
def test_a_column_mismatch_reaches_every_party_and_every_process_exits_in_seconds(tmp_path):
    config = make_session(tmp_path / "s")             # dim = 0: d is taken from the hellos
    rng = np.random.default_rng(5)
    for name, columns in zip(NAMES, (3, 3, 4)):      # c has one column too many
        np.save(tmp_path / f"{name}.npy", rng.uniform(-1, 1, (5, columns)))
    serve, port = start_serve(tmp_path, config)
    parties = {}
    try:
        # b is late: started first, paused once its start-up is done (it prints the session
        # fingerprint just before it connects), it reaches the coordinator after the abort
        parties["b"] = join(tmp_path, config, "b", port, "b.npy")
        parties["b"].wait_for(r"fingerprint", timeout=120)
        parties["b"].popen.send_signal(signal.SIGSTOP)
        for name in ("a", "c"):
            parties[name] = join(tmp_path, config, name, port, f"{name}.npy")
        aborted = serve.wait_for(r"failed in phase 'join'", timeout=120)
        parties["b"].popen.send_signal(signal.SIGCONT)
        everyone = [serve, *parties.values()]
        # seconds, not the 60 s deadlines (a margin for a loaded machine: no timing claim)
        left = wait_all(everyone, BOUND)
        assert not left, "\n".join(p.err + p.out + serve.err for p in left)
        assert time.monotonic() - aborted < BOUND
        # the documented bound: serve is gone at most ABORT_GRACE after the failure (its
        # own log record), plus its teardown; every party was told, so it did not wait
        assert serve.ended_at - failure_time(serve) <= ABORT_GRACE + TEARDOWN
        assert serve.popen.returncode == 1
        for name, party in parties.items():
            assert party.popen.returncode == 1, (name, party.err)
            assert "Traceback" not in party.err, party.err
            # the cause, said by whoever says it, not a cancelled call
            assert re.search(r"d must be equal for all parties", party.err), (name, party.err)
            assert "Cancelling all calls" not in party.err
            # who reports what: the coordinator's word about the party it blames
            line = party.err.strip().splitlines()[-1]
            said = re.match(r"omnifc join: error: coordinator reports: party '([ac])'"
                            r"( \(this party\))? failed in phase 'join'", line)
            assert said, line
            assert bool(said.group(2)) == (said.group(1) == name), line
        assert results_dirs(tmp_path) == []           # nothing half-made on any side
    finally:
        for process in [serve, *parties.values()]:
            process.stop()


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_serve_answers_late_parties_for_abort_grace_seconds_and_is_gone_right_after(tmp_path):
    # docs/protocol.md: a party that connects after the failure is told the cause at once,
    # and serve stops once every party has been told, at most ABORT_GRACE after the
    # failure. Here d never connects, so serve waits the whole grace -- no less (b,
    # connecting half-way through it, is told the cause) and no more (one step past the
    # bound serve is gone, not waiting for d until a phase deadline). Measured from the
    # coordinator's own log record of the failure to each process's exit.
    names = ["a", "b", "c", "d"]
    config = make_session(tmp_path / "s", names=names)
    rng = np.random.default_rng(7)
    for name, columns in zip(names, (3, 3, 4, 3)):    # c has one column too many
        np.save(tmp_path / f"{name}.npy", rng.uniform(-1, 1, (5, columns)))
    serve, port = start_serve(tmp_path, config)
    parties = {}
    try:
        parties["b"] = join(tmp_path, config, "b", port, "b.npy")
        parties["b"].wait_for(r"fingerprint", timeout=120)   # just before it connects
        parties["b"].popen.send_signal(signal.SIGSTOP)
        for name in ("a", "c"):
            parties[name] = join(tmp_path, config, name, port, f"{name}.npy")
        serve.wait_for(r"failed in phase 'join'", timeout=120)
        failed = failure_time(serve)
        time.sleep(max(0.0, failed + ABORT_GRACE / 2 - time.time()))
        assert serve.popen.poll() is None                  # still there for late parties
        parties["b"].popen.send_signal(signal.SIGCONT)
        left = wait_all([serve, *parties.values()], ABORT_GRACE + BOUND)
        assert not left, "\n".join(p.err + p.out for p in left)
        assert serve.popen.returncode == 1
        waited = serve.ended_at - failed
        assert ABORT_GRACE <= waited <= ABORT_GRACE + TEARDOWN, (waited, serve.err)
        for name, party in parties.items():
            assert party.popen.returncode == 1, (name, party.err)
            assert re.search(r"coordinator reports: party '[ac]'.*d must be equal for all "
                             r"parties", party.err), (name, party.err)
        # b was told at once, well before serve gave up on d
        assert parties["b"].ended_at < serve.ended_at, (parties["b"].ended_at, waited)
    finally:
        for process in [serve, *parties.values()]:
            process.stop()


# -- item 4: a result that did not reach its party is reported by the coordinator -------
@pytest.mark.timeout(300)
def test_serve_reports_a_party_that_never_got_its_labels(tmp_path):
    # the coordinator waits reconnect_grace for c to come back for its result: 3 s here
    config = make_session(tmp_path / "s", "--reconnect-grace", "3")
    rng = np.random.default_rng(6)
    for i, name in enumerate(NAMES):
        np.save(tmp_path / f"{name}.npy", rng.uniform(-1, 1, (4 + i, 3)))
    serve, port = start_serve(tmp_path, config)
    parties = {}
    try:
        for name in ("a", "b"):
            parties[name] = join(tmp_path, config, name, port, f"{name}.npy")
        # c uploads everything, then its process is gone when the result arrives (killed
        # while the coordinator decoded): the party-process entry point with its test hook
        parties["c"] = Process([], cwd=tmp_path, command=[
            sys.executable, "-m", "protocols._grpc_party", "--config", config, "--party", "c",
            "--data", "c.npy", "--target", f"127.0.0.1:{port}", "--fault", "exit-at-result"])
        assert not wait_all([serve, *parties.values()], 200), serve.err
    finally:
        for process in [serve, *parties.values()]:
            process.stop()
    assert parties["c"].popen.returncode == 3                   # the fault's abrupt exit
    assert [parties[n].popen.returncode for n in ("a", "b")] == [0, 0]
    assert serve.popen.returncode == 3, serve.out + serve.err    # finished, not delivered
    assert re.search(r"NOT DELIVERED.*party 'c'", serve.out + serve.err), serve.out + serve.err
    assert "lost: none" not in serve.out
    session_id = re.search(r"session (\w+) listening", serve.out).group(1)
    folder = tmp_path / "omnifc-results" / session_id
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["delivered"] == ["a", "b"], summary
    assert list(summary["undelivered"]) == ["c"]
    assert summary["exit_status"] == 3
    # nothing lost: the coordinator's results are saved all the same
    assert np.load(folder / "distances.npy").shape == (15, 15)
    assert np.load(folder / "labels.npy").shape == (15,)
    for name in ("a", "b"):
        assert (folder / f"{name}-labels.npy").exists()
    assert not (folder / "c-labels.npy").exists()


# -- cosmetic: a port in use is said in omnifc's own line -------------------------------
@pytest.mark.timeout(180)
def test_serve_on_a_port_in_use_says_address_already_in_use(tmp_path):
    import socket

    config = make_session(tmp_path / "s")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = omnifc("serve", "--config", config, "--address", f"127.0.0.1:{port}",
                        "--no-progress", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("omnifc serve: error: could not listen on"), line
    assert "Address already in use" in line, line
    assert results_dirs(tmp_path) == []
