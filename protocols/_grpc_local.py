"""Run a whole session over real gRPC on loopback: one process per party, mutual TLS.

:func:`run_local_grpc_session` is what ``secure_distance_matrix(..., transport="grpc")``,
``secure_sum(..., transport="grpc")`` and ``omnifc demo`` use. It writes throwaway
certificates, identity keys and a session config into a private temporary folder, serves
the coordinator in this process on ``127.0.0.1:0`` (an ephemeral port), starts
``python -m protocols._grpc_party`` for every party with the port on its command line
(forked from one server that imported the party's modules once,
:mod:`protocols._party_processes`), and
always stops every process it started and deletes the folder, also on errors and Ctrl-C.
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from finite_field import ParameterError

from ._config import (SESSION_FIELDS, ConfigParameters, Deadlines, TLSSettings,
                      dump_session_config, load_session_config)
from ._outcome import Outcome
from ._grpc_coordinator import CoordinatorServer, coordinator_from_config
from ._messages import SessionParameters
from ._party_processes import new_party_server, start_party_process
from ._demo_certificates import generate_certificates
from ._tls import coordinator_credentials

__all__ = ["run_local_grpc_session", "LocalSession"]

logger = logging.getLogger(__name__)


class LocalSession:
    """Certificates, config, data files and party processes of one loopback session.

    Use as a context manager; leaving it kills every process still running and removes the
    temporary folder. ``party_server``: a :func:`protocols.new_party_server` started
    earlier to fork the parties from (by default the session starts one with its first
    party); the session closes it.
    """

    def __init__(self, party_data: dict, parameters: SessionParameters, *,
                 deadline=60.0, insecure: bool = False, party_server=None) -> None:
        self.names = [str(n) for n in party_data]
        self.parameters = parameters
        self.directory = Path(tempfile.mkdtemp(prefix="omnifc-session-"))
        self.processes: dict = {}  # name -> PartyProcess (or Popen)
        # the party fork server, this session's to close: handed in (started earlier, so
        # that it loads while the caller does its own work), or started with the first
        # party (a session that starts none starts no server)
        self._server = party_server
        try:
            # a number: seconds per phase (join at least 120 s, for process start-up);
            # a Deadlines: exactly those
            deadlines = deadline if isinstance(deadline, Deadlines) else Deadlines(
                join=max(deadline, 120.0), shares=deadline, evaluation=deadline,
                result=min(deadline, 10.0))
            certs = generate_certificates(self.directory / "certs", self.names,
                                          coordinator_address="127.0.0.1:0",
                                          parameters=ConfigParameters.of(parameters),
                                          deadlines=deadlines,
                                          **{f.name: getattr(parameters, f.name)
                                             for f in SESSION_FIELDS})
            self.config = load_session_config(certs.config)
            if insecure:
                self.config = self.config.with_(tls=TLSSettings(enabled=False))
                dump_session_config(self.config, self.directory / "insecure.toml")
                self.config_path = self.directory / "insecure.toml"
            else:
                self.config_path = certs.config
            self.data_paths = {}
            for i, name in enumerate(self.names):
                path = self.directory / f"data-{i}.npy"
                np.save(path, np.asarray(party_data[name], dtype=np.float64))
                self.data_paths[name] = path
        except BaseException:
            self.close()
            raise

    def server(self, *, responders=None, cluster=None, tamper=None, out=None,
               memory_budget=None) -> CoordinatorServer:
        coordinator = coordinator_from_config(self.config, cluster=cluster,
                                              responders=responders,
                                              parameters=self.parameters, out=out,
                                              memory_budget=memory_budget)
        insecure = self.config.insecure
        return CoordinatorServer(
            coordinator, self.config.deadlines,
            credentials=None if insecure else coordinator_credentials(self.config),
            insecure=insecure, config=self.config, tamper=tamper)

    def start_party(self, name: str, port: int, *, fault: str | None = None):
        """Start party ``name`` as a process connecting to 127.0.0.1:``port`` (forked from
        the preloaded party server, :mod:`protocols._party_processes`): a
        :class:`~protocols._party_processes.PartyProcess` (pid, poll, wait, kill)."""
        command = ["--config",
                   str(self.config_path), "--party", name, "--data", str(self.data_paths[name]),
                   "--target", f"127.0.0.1:{port}", "--labels-out", str(self.labels_path(name)),
                   "--stats-out", str(self.directory / f"stats-{self.names.index(name)}.json")]
        if self.parameters.kind == "sum":
            command += ["--kind", "sum", "--rows", str(self.parameters.rows)]
        if fault:
            command += ["--fault", fault]
        if self._server is None:
            self._server = new_party_server()  # None where there is no fork (Windows)
        self.processes[name] = start_party_process(self._server, command,
                                                   self.directory / f"{name}.log")
        return self.processes[name]

    def labels_path(self, name: str) -> Path:
        return self.directory / f"labels-{self.names.index(name)}.npy"

    def received_labels(self, name: str):
        """The labels party ``name`` received and saved (None if it got none)."""
        path = self.labels_path(name)
        return np.load(path) if path.exists() else None

    def party_stats(self, name: str):
        """Party ``name``'s evaluation figures (:attr:`protocols.Party.timings`), or None
        if its process did not finish."""
        path = self.directory / f"stats-{self.names.index(name)}.json"
        return json.loads(path.read_text()) if path.exists() else None

    def watch(self, server: CoordinatorServer) -> None:
        """Report a party process that exited with an error before its stream ended."""
        for name, process in self.processes.items():
            code = process.poll()
            if code not in (None, 0) and name not in server.coordinator.lost:
                last = self.party_log(name).strip().splitlines()[-1:] or ["no output"]
                server.lost(name, f"its process exited with code {code} ({last[0][-300:]})",
                            final=True)

    def party_log(self, name: str) -> str:
        path = self.directory / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def close(self) -> None:
        for name, process in self.processes.items():
            if process.poll() is None:
                try:
                    process.wait(timeout=3.0)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(timeout=10.0)
        if self._server is not None:
            self._server.close()  # kills any party still running, then exits
            self._server = None
        shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> "LocalSession":
        return self

    def __exit__(self, *exc) -> None:
        if exc[0] is not None:  # failing: do not wait for well-behaved exits
            for process in self.processes.values():
                if process.poll() is None:
                    process.kill()
        self.close()


def run_local_grpc_session(party_data: dict, parameters: SessionParameters, *,
                           responders=None, cluster=None, deadline: float = 60.0,
                           insecure: bool = False, faults: dict | None = None,
                           kill_on: dict | None = None, tamper=None,
                           on_phase=None, out=None, memory_budget=None) -> Outcome:
    """One session over gRPC with every party in its own process on 127.0.0.1.

    Parameters
    ----------
    party_data : dict of str to array-like
    parameters : SessionParameters
    responders, cluster
        See :class:`protocols.Coordinator`.
    deadline : float
        Seconds allowed for the share exchange and for each evaluation round (joining
        gets at least 120 s: processes must start).
    insecure : bool
        No TLS (logs warnings). Mutual TLS by default.
    faults : dict of str to str, optional
        Test hooks per party (see :func:`protocols._grpc_party.run_party`).
    kill_on : dict of str to str, optional
        ``{party: phase}``: SIGKILL that party's process when the coordinator enters the
        phase (tests: a crash during evaluation).
    tamper : callable, optional
        Applied to every message the coordinator sends (tests: a malicious relay).
    on_phase : callable, optional
        ``on_phase(phase, round)`` on every phase change.
    out, memory_budget : optional
        Where the coordinator accumulates the result (see :class:`protocols.Coordinator`).

    Returns
    -------
    Outcome
    """
    if parameters.kind == "distance" and parameters.dim == 0:
        raise ParameterError("run_local_grpc_session needs an explicit dim")
    faults, kill_on = dict(faults or {}), dict(kill_on or {})
    with LocalSession(party_data, parameters, deadline=deadline, insecure=insecure) as local:
        server = local.server(responders=responders, cluster=cluster, tamper=tamper, out=out,
                              memory_budget=memory_budget).start()
        try:
            for name in local.names:
                local.start_party(name, server.port, fault=faults.get(name))

            def phase_changed(phase, round_):
                for name, when in kill_on.items():
                    process = local.processes.get(name)
                    if when == phase and process is not None and process.poll() is None:
                        logger.warning("killing party %r (test hook) in phase %r", name, phase)
                        process.kill()
                if on_phase is not None:
                    on_phase(phase, round_)

            try:
                return server.run(on_phase=phase_changed, poll=lambda: local.watch(server))
            except Exception:
                for name in local.names:
                    text = local.party_log(name).strip()
                    if text:
                        logger.info("party %r log:\n%s", name, text[-2000:])
                raise
        finally:
            server.stop()
