"""A local Flower deployment's processes on 127.0.0.1 (SuperLink, SuperNodes), for the
example's tests and ``omnifc bench flower``: started each in its own session, stopped with
every process they started.

Flower's SuperNode starts a SuperExec, which starts a ``flwr-clientapp`` process per message,
and the SuperLink does the same for its ServerApp, each in a session of its own: killing the
started processes' groups is not enough, so :meth:`LocalProcesses.stop` walks /proc for the
whole tree (Linux) and signals every process of it, SIGTERM then SIGKILL. Nothing here
imports flwr.
"""

from __future__ import annotations

import logging
import os
import pathlib
import signal
import socket
import subprocess
import time

__all__ = ["LocalProcesses", "descendants", "free_port", "wait_listening"]

logger = logging.getLogger(__name__)


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (free when asked; the caller binds it soon after)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def descendants(roots) -> set:
    """``roots`` and every process descended from them (from /proc's parent links)."""
    children: dict = {}
    for stat in pathlib.Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    tree, todo = set(), list(roots)
    while todo:
        pid = todo.pop()
        if pid not in tree:
            tree.add(pid)
            todo += children.get(pid, [])
    return tree


def _signal_all(pids, sig) -> None:
    for pid in pids:
        for kill in (os.killpg, os.kill):
            try:
                kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass


def wait_listening(port: int, process: subprocess.Popen | None = None,
                   timeout: float = 60.0) -> None:
    """Return once something accepts on 127.0.0.1:``port``; raise ``RuntimeError`` when
    ``process`` exits first or ``timeout`` seconds pass."""
    deadline = time.monotonic() + float(timeout)
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"the process meant to listen on 127.0.0.1:{port} exited "
                               f"with {process.returncode}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise RuntimeError(f"nothing listened on 127.0.0.1:{port} within {timeout:g} s")


class LocalProcesses:
    """Processes started in their own sessions, their output in ``folder/<name>.log``;
    :meth:`stop` ends them and every process they started. A context manager."""

    def __init__(self, folder: pathlib.Path) -> None:
        self.folder = pathlib.Path(folder)
        self.started: list = []   # (name, Popen, log file)
        self.stopped: set = set()

    def start(self, name: str, argv: list, env: dict | None = None,
              cwd: pathlib.Path | None = None) -> subprocess.Popen:
        log = open(self.folder / f"{name}.log", "wb")
        try:
            process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env,
                                       cwd=self.folder if cwd is None else cwd,
                                       start_new_session=True, stdin=subprocess.DEVNULL)
        except BaseException:
            log.close()
            raise
        self.started.append((name, process, log))
        return process

    def log(self, name: str) -> str:
        return (self.folder / f"{name}.log").read_text(errors="replace")

    def tree(self) -> set:
        """The started processes and all their descendants."""
        return descendants(process.pid for _, process, _ in self.started)

    def stop(self, grace: float = 10.0) -> set:
        """SIGTERM to the whole tree, up to ``grace`` seconds for the started processes to
        exit, then SIGKILL to whatever of the tree (and of its new descendants) is left.
        Returns the pids that were signalled."""
        tree = self.tree()
        _signal_all(tree, signal.SIGTERM)
        deadline = time.monotonic() + float(grace)
        for _, process, _ in self.started:
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        tree |= descendants(tree)  # anything started meanwhile
        _signal_all(tree, signal.SIGKILL)
        for name, process, log in self.started:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                logger.warning("%s (pid %d) did not exit after SIGKILL", name, process.pid)
            log.close()
        self.stopped |= tree
        return tree

    def alive(self) -> list:
        """Pids of the stopped tree that still run (zombies excepted: not ours to reap)."""
        out = []
        for pid in sorted(self.stopped):
            try:
                state = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if state != "Z":
                out.append(pid)
        return out

    def __enter__(self) -> "LocalProcesses":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
