"""Party processes of a loopback session, forked from one server that imported them once.

A party process imports numpy, gRPC, cryptography and protobuf before it can say hello:
about 0.7 CPU seconds each. Started as fresh interpreters, the four parties of
``omnifc demo`` paid that four times over on two cores, most of the demo's join phase.
:func:`start_party_process` forks each party from multiprocessing's *forkserver* instead:
one helper process, started on first use and reused by every later session of this
process, imports :data:`PRELOAD` once; each party is then a ``fork()`` of it, a separate
process with its own memory, keys and gRPC channel, in a few milliseconds.

Safe to fork: the server only imports those modules. It creates no gRPC channel or
server (gRPC core initializes with the first of them, in the child), no thread pool of
numba (not imported) and holds no secret: each child loads its own config, keys and rows
after the fork, from the files its arguments name. The child gets the environment and the
working folder of the caller at the time of the call (not those of the server's start),
its output goes to its log file, and its exit code is the party's, as with
``python -m protocols._grpc_party``. Where there is no forkserver (Windows), a fresh
interpreter is started as before.

>>> "forkserver" in __import__("multiprocessing").get_all_start_methods()
True
"""

from __future__ import annotations

import importlib
import multiprocessing
import os
import subprocess
import sys

__all__ = ["PRELOAD", "PartyProcess", "start_party_process"]

#: What the fork server imports once: everything a party process needs up to its hello.
PRELOAD = ["protocols._grpc_party"]


def _context():
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return None
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    return context


def _child(entry: str, argv: list, log_path: str, environment: dict, cwd: str) -> None:
    """In the forked child: the caller's environment and folder, output to the log, then
    ``entry`` ("module:function") called with ``argv``; its return value is the exit code."""
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    os.environ.clear()
    os.environ.update(environment)
    os.chdir(cwd)
    module, function = entry.split(":")
    try:
        code = getattr(importlib.import_module(module), function)(argv)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    sys.exit(code)


class PartyProcess:
    """A forked party process with the part of :class:`subprocess.Popen` sessions use:
    ``pid``, ``args``, ``returncode``, ``poll()``, ``wait(timeout)``, ``kill()``,
    ``terminate()``, ``send_signal(sig)``. ``returncode`` is -N for a party killed by
    signal N, as for Popen."""

    def __init__(self, process, args: list) -> None:
        self._process = process
        self.args = args

    @property
    def pid(self) -> int:
        return self._process.pid

    @property
    def returncode(self):
        return self._process.exitcode

    def poll(self):
        return self._process.exitcode

    def wait(self, timeout=None) -> int:
        self._process.join(timeout)
        if self._process.exitcode is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self._process.exitcode

    def send_signal(self, sig) -> None:
        if self._process.exitcode is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        self._process.kill()

    def terminate(self) -> None:
        self._process.terminate()


def start_party_process(argv: list, log_path, *, entry: str = "protocols._grpc_party:main"):
    """Start ``python -m protocols._grpc_party argv`` (``entry`` called with ``argv``) with
    its output in ``log_path``: a :class:`PartyProcess` forked from the preloaded server,
    or a :class:`subprocess.Popen` where there is no forkserver."""
    context = _context()
    if context is None:
        module = entry.split(":")[0]
        with open(log_path, "wb") as log:
            return subprocess.Popen([sys.executable, "-m", module, *argv], stdout=log,
                                    stderr=log, stdin=subprocess.DEVNULL)
    process = context.Process(target=_child, args=(entry, list(argv), str(log_path),
                                                   dict(os.environ), os.getcwd()),
                              name=f"omnifc party {argv[argv.index('--party') + 1]}"
                              if "--party" in argv else "omnifc party", daemon=True)  # never outlives this process
    process.start()
    return PartyProcess(process, [entry, *argv])
