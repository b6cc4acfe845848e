"""Sessions over gRPC with faults on the parties' connections (tests and benchmarks only).

Not imported by production code. :func:`run_faulted_session` runs one session as
:func:`protocols._grpc_local.run_local_grpc_session` does (the coordinator in this process,
every party in its own process, mutual TLS on loopback) but each party dials its own
:class:`~protocols._fault_proxy.FaultProxy`, which forwards to the coordinator and applies
that party's fault spec; party processes can also be killed when the coordinator enters a
phase. It waits for every end with a bound, kills what overstays it (and says so), and
returns a :class:`FaultedRun`: what the coordinator and each party process ended with, when,
and what was left behind. :func:`classify` turns a run and the oracle D into one of
:data:`VERDICTS`.

The join deadline runs from the moment every party's stream is open (process start-up on a
loaded machine can take tens of seconds and is no part of what is tested), so short
deadlines stay meaningful.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from finite_field import OmniFCError

from ._fault_proxy import FaultProxy
from ._grpc_coordinator import ABORT_GRACE
from ._grpc_local import LocalSession

__all__ = ["run_faulted_session", "FaultedRun", "PartyEnd", "classify", "VERDICTS",
           "party_bound", "coordinator_bound"]

logger = logging.getLogger(__name__)

#: What a faulted session can end as (see :func:`classify`).
VERDICTS = ("exact", "abort", "unclear-abort", "hung", "wrong", "lost")

#: Seconds allowed on top of a computed bound for process exit and scheduling on a quiet
#: machine (no timing claim: a process past bound + slack is counted as hung); scaled up by
#: the load per CPU when the run starts (:func:`slack`), at most :data:`MAX_SLACK`.
SLACK = 15.0
MAX_SLACK = 150.0


def slack() -> float:
    """:data:`SLACK` times the load average per CPU (at least 1), at most :data:`MAX_SLACK`:
    on a machine shared by many processes, a process exits late without hanging."""
    per_cpu = os.getloadavg()[0] / max(1, os.cpu_count() or 1)
    return min(MAX_SLACK, SLACK * max(1.0, per_cpu))


def party_bound(deadlines) -> float:
    """Seconds a party process may run after its stream opened: its own session timeout
    (what :func:`protocols._grpc_party.join_from_config` gives ``run_party``)."""
    d = deadlines
    return d.join + d.shares + 4 * d.evaluation + d.result


def coordinator_bound(deadlines, rounds: int) -> float:
    """Seconds the coordinator may take from the open streams to its end: every phase's
    deadline, ``rounds`` evaluation rounds, the delivery wait and the abort grace."""
    d = deadlines
    return d.join + d.shares + rounds * d.evaluation + 2 * d.result + ABORT_GRACE


@dataclass
class PartyEnd:
    """How one party process ended.

    Attributes
    ----------
    code : int or None
        Exit status; None when it overstayed its bound and was killed (hung).
    seconds : float or None
        From the open streams (the start of :meth:`CoordinatorServer.run`) to its exit.
    error : str
        The last error line of its log ("" when it logged none).
    labels : ndarray or None
        The labels it saved (None: it got none).
    killed : bool
        Killed by the fault schedule (not a verdict).
    log : str
        The end of its log (for a diagnosis; the processes log no secrets).
    """

    code: int | None
    seconds: float | None
    error: str
    labels: np.ndarray | None
    killed: bool = False
    log: str = ""


@dataclass
class FaultedRun:
    """What one faulted session ended with (see :func:`run_faulted_session`)."""

    outcome: object = None            # Outcome, when the coordinator reported success
    error: BaseException | None = None
    seconds: float | None = None      # coordinator: open streams to its end; None: hung
    parties: dict = field(default_factory=dict)   # name -> PartyEnd
    fired: dict = field(default_factory=dict)     # name -> [(seconds, event, dir, offset)]
    phases: list = field(default_factory=list)    # [(seconds, phase, round)]
    files_left: list = field(default_factory=list)
    processes_left: list = field(default_factory=list)
    threads_left: int = 0
    volumes: dict = field(default_factory=dict)   # name -> {"up": bytes, "down": bytes}
    bound: float = 0.0                # the coordinator's bound (seconds)
    party_bound: float = 0.0
    slack: float = SLACK              # allowed on top of either bound (see slack())

    def phase_at(self, seconds: float) -> tuple:
        """``(phase, round)`` the coordinator was in at ``seconds``."""
        current = ("join", 0)
        for when, phase, round_ in self.phases:
            if when <= seconds:
                current = (phase, round_)
        return current


def _last_error(log: str) -> str:
    lines = [line for line in log.splitlines() if " ERROR " in line or "Error" in line]
    return lines[-1].strip()[-400:] if lines else ""


def run_faulted_session(party_data: dict, parameters, deadlines, *, faults=None, kills=None,
                        seed: int = 0, cluster=None, rounds: int = 2,
                        ready_timeout: float = 300.0, memory_budget=None) -> FaultedRun:
    """One session over gRPC, each party behind its own fault proxy.

    Parameters
    ----------
    party_data : dict of str to array-like
    parameters : SessionParameters
    deadlines : Deadlines
    faults : dict of str to str, optional
        ``{party: spec}`` for :class:`~protocols._fault_proxy.FaultSpec` (others: a clean
        relay).
    kills : dict of str to str, optional
        ``{party: phase}``: SIGKILL that party's process when the coordinator enters the
        phase.
    seed : int
        Seeds the proxies' jitter.
    cluster : callable, optional
        The coordinator's clustering (then every party receives labels).
    rounds : int
        Evaluation rounds the coordinator's bound allows for (a dropout reruns the round).
    ready_timeout : float
        Seconds for every party process to start and open its stream.

    Returns
    -------
    FaultedRun
    """
    faults, kills = dict(faults or {}), dict(kills or {})
    run = FaultedRun(bound=coordinator_bound(deadlines, rounds),
                     party_bound=party_bound(deadlines), slack=slack())
    with LocalSession(party_data, parameters, deadline=deadlines) as local:
        directory = local.directory
        server = local.server(cluster=cluster, memory_budget=memory_budget).start()
        proxies, killed, start = {}, set(), time.monotonic()
        thread, hung = None, False
        try:
            for i, name in enumerate(local.names):
                proxies[name] = FaultProxy(f"127.0.0.1:{server.port}", faults.get(name),
                                           seed=seed * 1000 + i)
            opened = time.monotonic()

            def phase_changed(phase, round_, detail):
                if detail is not None:
                    return
                run.phases.append((time.monotonic(), phase, round_))
                for name, when in kills.items():
                    process = local.processes.get(name)
                    if when == phase and process is not None and process.poll() is None:
                        logger.info("killing party %r (fault schedule) in phase %r", name,
                                    phase)
                        process.kill()
                        killed.add(name)

            # every phase change as the coordinator makes it, also before run() starts
            server.coordinator.progress = phase_changed
            for name in local.names:
                local.start_party(name, proxies[name].port)
            # process start-up is not what is tested: the clock starts once every stream is
            # open (or a process died: the coordinator's poll reports it)
            end = opened + ready_timeout
            while time.monotonic() < end:
                with server.lock:
                    if server.seen >= set(local.names):
                        break
                if any(p.poll() is not None for p in local.processes.values()):
                    break
                time.sleep(0.01)
            start = time.monotonic()

            def serve():
                try:
                    run.outcome = server.run(poll=lambda: local.watch(server))
                except BaseException as error:  # noqa: BLE001 - recorded, judged by classify
                    run.error = error
                run.seconds = time.monotonic() - start

            thread = threading.Thread(target=serve, name="omnifc-faulted-serve", daemon=True)
            thread.start()
            thread.join(run.bound + run.slack)
            hung = thread.is_alive()
            if hung:  # stopping the server below ends run()
                logger.warning("the coordinator did not end within %.0f s",
                               run.bound + run.slack)
        finally:
            server.stop()
        if thread is not None:
            thread.join(10.0)
            if hung:
                run.seconds = None
        # every party process ends within its own session timeout (plus slack); polled
        # together, so each one's exit time is its own
        exits: dict = {}
        end = start + run.party_bound + run.slack
        while len(exits) < len(local.processes) and time.monotonic() < end:
            for name, process in local.processes.items():
                if name not in exits and process.poll() is not None:
                    exits[name] = time.monotonic() - start
            time.sleep(0.05)
        for name, process in local.processes.items():
            if name not in exits and process.poll() is not None:
                exits[name] = time.monotonic() - start
            if name not in exits:  # hung: killed, no exit time
                process.kill()
                process.wait(timeout=10.0)
            run.parties[name] = PartyEnd(code=process.returncode if name in exits else None,
                                         seconds=exits.get(name),
                                         error=_last_error(local.party_log(name)),
                                         labels=local.received_labels(name),
                                         killed=name in killed,
                                         log=local.party_log(name)[-3000:])
        run.phases = [(t - start, phase, round_) for t, phase, round_ in run.phases]
        for name, proxy in proxies.items():
            run.fired[name] = [(t - start, what, direction, offset)
                               for t, _, what, direction, offset in proxy.events
                               if what in ("reset", "pause", "half-open", "corrupt")]
            proxy.close()
            run.volumes[name] = {"up": proxy.forwarded("up"), "down": proxy.forwarded("down")}
            run.threads_left += proxy.threads_alive()
        processes = dict(local.processes)
    # LocalSession.close() ran: its folder is gone and every process has ended
    run.files_left = [str(directory)] if directory.exists() else []
    run.processes_left = [name for name, p in processes.items() if p.poll() is None]
    return run


def classify(run: FaultedRun, expected: np.ndarray) -> tuple:
    """``(verdict, reason)`` of a run against the oracle D ``expected``.

    ``exact``: the coordinator reported success with D == expected, every party that was
    not reported undelivered saved exactly its labels and exited 0, and every process ended
    within its bound. ``abort``: the coordinator raised an OmniFCError within its bound and
    every party process not killed by the schedule exited 1 with an error line, within its
    bound. ``unclear-abort``: an abort where some end gave no error (or exited 0).
    ``hung``: some end overstayed its bound. ``wrong``: a reported D or saved labels that
    differ. ``lost``: success reported, but a party without its labels that the coordinator
    did not report as undelivered.
    """
    if run.seconds is None or run.seconds > run.bound + run.slack:
        return "hung", f"the coordinator did not end within {run.bound + run.slack:.0f} s"
    overstayed = [n for n, p in run.parties.items() if p.code is None]
    if overstayed:
        return "hung", f"party processes killed after {run.party_bound + run.slack:.0f} s: " \
            f"{overstayed}"
    outcome = run.outcome
    if outcome is not None:
        if not np.array_equal(np.asarray(outcome.integer), expected):
            return "wrong", "the coordinator reported a D that differs from the oracle"
        for i, name in enumerate(outcome.party_names):
            end = run.parties[name]
            if name in outcome.undelivered:
                continue
            if outcome.labels is not None:
                start = outcome.row_offsets[i]
                own = outcome.labels[start:start + outcome.rows[i]]
                if end.labels is None:
                    return "lost", f"party {name!r} has no labels, reported delivered"
                if not np.array_equal(end.labels, own):
                    return "wrong", f"party {name!r} saved labels that differ"
            if end.code != 0:
                return "lost", f"party {name!r} exited {end.code} ({end.error}), " \
                    "reported delivered"
        return "exact", ", ".join(f"{n} undelivered: {r}"
                                  for n, r in outcome.undelivered.items())
    if not isinstance(run.error, OmniFCError):
        return "unclear-abort", f"the coordinator failed with {run.error!r}"
    silent = [n for n, p in run.parties.items()
              if not p.killed and (p.code != 1 or not p.error)]
    if silent:
        return "unclear-abort", f"no clear error from {silent}"
    if any(re.search(r"Traceback", p.error) for p in run.parties.values()):
        return "unclear-abort", "a party ended with a traceback"
    return "abort", str(run.error)
