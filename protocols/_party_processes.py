"""Party processes of a loopback session, forked from one server that loaded them once.

A party process imports numpy, gRPC, cryptography and protobuf before it can say hello
(about 0.7 CPU seconds), then numba and its kernels before it can compute its shares
(about 1.2 CPU seconds more: numba's start and the kernels' cache loads). Started as fresh
interpreters, the four parties of ``omnifc demo`` paid both four times over on two cores.
A :class:`PartyServer` is one helper process (``python -m protocols._party_processes``)
that imports :data:`PRELOAD` and loads the kernels (``finite_field.warm_up``) once; each
party is then a ``fork()`` of it: a separate process with its own memory, keys and gRPC
channel, started in milliseconds, with every kernel ready.

Safe to fork: the server only imports those modules, compiles (loads) the kernels and
reads requests from its stdin. It creates no gRPC channel or server (gRPC core starts
with the first of them, in the child), runs no kernel (so the kernels' helper threads do
not exist; numba itself starts no thread without parallel kernels, and omnifc has none;
OpenBLAS stops its own threads around a fork), and holds no secret: each child loads its
config, keys and rows after the fork, from the files its arguments name. A child gets the
caller's environment, working folder and import path at the request, its stdin is
``/dev/null``, its output goes to its log file, and its exit code is the party's, as with
``python -m protocols._grpc_party``.

Lifetime: the server belongs to one :class:`~protocols._grpc_local.LocalSession`.
:meth:`PartyServer.close` (the session's close) ends it; a server whose stdin closes (its
owner exited, even by SIGKILL) kills the parties still running and exits, so nothing
outlives the session. Where there is no ``fork`` (Windows), parties are fresh
interpreters as before.

>>> server = PartyServer()
>>> party = server.start(["OMNIFC_X", "3", "0"], "/dev/null",
...                      entry="protocols._party_processes:_example")
>>> party.wait(60)
3
>>> server.close()
"""

from __future__ import annotations

import importlib
import io
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
import traceback

from finite_field import ProtocolError

__all__ = ["PRELOAD", "PartyServer", "PartyProcess", "new_party_server"]

#: What the server imports once: everything a party process needs up to its hello.
PRELOAD = ["protocols._grpc_party"]

#: Seconds the server gets to import PRELOAD and say it is ready (a loaded machine).
READY_TIMEOUT = 120.0

_ENTRY = "protocols._grpc_party:main"


# -- the server process -------------------------------------------------------------------

def _report(message: dict) -> None:
    # one small write per line: atomic on a pipe, and no Python-level lock to inherit
    os.write(1, (json.dumps(message) + "\n").encode())


def _run_child(request: dict) -> None:
    """In the forked child: never returns."""
    code = 1
    try:
        fd = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        sys.stdin = open(0, closefd=False)
        sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), line_buffering=True)
        sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), line_buffering=True)
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        sys.path[:] = request["path"]
        module, function = request["entry"].split(":")
        result = getattr(importlib.import_module(module), function)(request["argv"])
        code = 0 if result is None else int(result)
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except BaseException:  # noqa: BLE001 - the child's own error, printed to its log
        traceback.print_exc()
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def serve() -> None:
    """The server's loop: import PRELOAD, then fork a child per request line on stdin and
    report ``started`` and ``exited`` lines on stdout, until stdin closes and every child
    has been reaped (those still running then are killed)."""
    for name in PRELOAD:
        importlib.import_module(name)
    import finite_field  # the numba kernels, loaded once for every party (see the module)

    finite_field.warm_up()
    _report({"ready": os.getpid()})
    children, pending, open_ = set(), b"", True
    while open_ or children:
        if open_:
            readable, _, _ = select.select([0], [], [], 0.02)
            if readable:
                chunk = os.read(0, 1 << 16)
                if not chunk:
                    open_ = False
                    for pid in children:  # the owner is gone: nothing outlives it
                        os.kill(pid, signal.SIGKILL)
                pending += chunk
                while b"\n" in pending:
                    line, pending = pending.split(b"\n", 1)
                    request = json.loads(line)
                    pid = os.fork()
                    if pid == 0:
                        _run_child(request)
                    children.add(pid)
                    _report({"started": pid, "id": request["id"]})
        else:
            time.sleep(0.02)
        while children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            children.discard(pid)
            _report({"exited": pid, "code": os.waitstatus_to_exitcode(status)})


def _example(argv) -> int:
    """A stand-in entry for the docstring: exit code ``int(argv[1])``."""
    return int(argv[1])


# -- the owner's side ---------------------------------------------------------------------

class PartyProcess:
    """A forked party with the part of :class:`subprocess.Popen` sessions use: ``pid``,
    ``args``, ``returncode``, ``poll()``, ``wait(timeout)``, ``kill()``, ``terminate()``,
    ``send_signal(sig)``. ``returncode`` is -N for a party killed by signal N."""

    def __init__(self, server: "PartyServer", pid: int, args: list) -> None:
        self._server, self.pid, self.args = server, pid, args

    @property
    def returncode(self):
        code = self._server._codes.get(self.pid)
        if code is None and self._server._gone.is_set():  # the server died unreported
            try:
                os.kill(self.pid, 0)
            except ProcessLookupError:
                return 255  # gone, status unknown (as multiprocessing reports it)
        return code

    def poll(self):
        return self.returncode

    def wait(self, timeout=None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        event = self._server._exited(self.pid)
        while not event.wait(0.05):
            if self.returncode is not None:
                break
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def send_signal(self, sig) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


class PartyServer:
    """One fork server (a child process of this one) for the parties of a session."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._codes: dict[int, int] = {}
        self._events: dict[int, threading.Event] = {}
        self._started: dict[int, list] = {}
        self._ready = threading.Event()
        self._gone = threading.Event()
        self._next_id = 0
        self._process = subprocess.Popen(
            [sys.executable, "-m", "protocols._party_processes"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=None)
        self._reader = threading.Thread(target=self._read, name="omnifc party server",
                                        daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self._process.stdout:
            message = json.loads(line)
            with self._lock:
                if "ready" in message:
                    self._ready.set()
                elif "started" in message:
                    box = self._started.get(message["id"])
                    if box is not None:
                        box.append(message["started"])
                        box[0].set()
                else:
                    self._codes[message["exited"]] = message["code"]
                    self._exited_unlocked(message["exited"]).set()
        self._gone.set()
        with self._lock:  # the server is gone: nobody is waiting for a start any more
            for box in self._started.values():
                box[0].set()

    def _exited_unlocked(self, pid: int) -> threading.Event:
        return self._events.setdefault(pid, threading.Event())

    def _exited(self, pid: int) -> threading.Event:
        with self._lock:
            return self._exited_unlocked(pid)

    def start(self, argv: list, log_path, *, entry: str = _ENTRY,
              timeout: float = READY_TIMEOUT) -> PartyProcess:
        """Fork ``entry`` ("module:function", called with ``argv``; by default what
        ``python -m protocols._grpc_party argv`` runs) with its output in ``log_path``."""
        deadline = time.monotonic() + timeout
        while not self._ready.wait(0.1):
            if self._gone.is_set() or time.monotonic() > deadline:
                raise ProtocolError(f"the party server did not start within {timeout:g} s "
                                    f"(exit code {self._process.poll()})")
        with self._lock:
            request_id, self._next_id = self._next_id, self._next_id + 1
            box = self._started[request_id] = [threading.Event()]
        request = {"id": request_id, "entry": entry, "argv": [str(a) for a in argv],
                   "log": str(log_path), "env": dict(os.environ), "cwd": os.getcwd(),
                   "path": list(sys.path)}
        try:
            self._process.stdin.write((json.dumps(request) + "\n").encode())
            self._process.stdin.flush()
        except (BrokenPipeError, ValueError):
            raise ProtocolError("the party server is gone; cannot start a party") from None
        if not box[0].wait(max(0.0, deadline - time.monotonic())) or len(box) < 2:
            raise ProtocolError("the party server did not start the party process")
        with self._lock:
            del self._started[request_id]
        return PartyProcess(self, box[1], [entry, *argv])

    def close(self, timeout: float = 10.0) -> None:
        """End the server: parties still running are killed; waits up to ``timeout``."""
        try:
            self._process.stdin.close()
        except (BrokenPipeError, OSError):
            pass
        try:
            self._process.wait(timeout)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(timeout)
        self._reader.join(timeout)


def start_party_process(server: PartyServer | None, argv: list, log_path):
    """A party process: forked by ``server``, or (no ``fork`` here: ``server`` is None) a
    fresh ``python -m protocols._grpc_party`` interpreter."""
    if server is not None:
        return server.start(argv, log_path)
    with open(log_path, "wb") as log:
        return subprocess.Popen([sys.executable, "-m", "protocols._grpc_party", *argv],
                                stdout=log, stderr=log, stdin=subprocess.DEVNULL)


def new_party_server() -> PartyServer | None:
    """A PartyServer, or None where there is no ``os.fork`` (Windows).

    It starts loading at once, in its own process (about 2 s of imports and kernel loads);
    a caller with slow work of its own before its parties start (``omnifc demo`` imports
    scikit-learn and loads its data set) starts it first and hands it to
    :class:`~protocols.LocalSession` (``party_server=``), which then owns and closes it.
    :meth:`PartyServer.close` may be called more than once.
    """
    return PartyServer() if hasattr(os, "fork") else None


if __name__ == "__main__":
    serve()
