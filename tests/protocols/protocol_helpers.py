"""Shared helpers of the protocol tests: random party data and a manual session driver."""

from __future__ import annotations

import contextlib
import threading
import time
from concurrent import futures

import grpc

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from finite_field import ProtocolError
from protocols import Coordinator, Party, SessionParameters
from protocols import public_key_bytes
from protocols._generated import omnifc_pb2_grpc as pb_grpc

# The plaintext references live in the one oracle module (tests/oracles.py); they are
# re-exported here for the protocol tests that import them from this module.
from oracles import lagrange_weights, plaintext_sq_distances, quantize  # noqa: F401


class SilentCoordinator(pb_grpc.CoordinatorServicer):
    """Reads one request, then nothing (so the party's sending thread blocks), until the
    call ends."""

    def __init__(self):
        self.first = threading.Event()

    def Session(self, request_iterator, context):
        next(request_iterator)
        self.first.set()
        end = time.monotonic() + 20
        while context.is_active() and time.monotonic() < end:
            time.sleep(0.05)
        return iter(())


@contextlib.contextmanager
def silent_server(options=()):
    """A loopback gRPC server (insecure, gRPC channel arguments ``options``) whose
    coordinator is a :class:`SilentCoordinator`: yields ``(servicer, port)``."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2), options=list(options))
    servicer = SilentCoordinator()
    pb_grpc.add_CoordinatorServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield servicer, port
    finally:
        server.stop(None).wait(5)


def queued_requests(box, end=None):
    """A gRPC request iterator fed by a queue: its items, in order, until ``end``."""
    while True:
        item = box.get()
        if item is end:
            return
        yield item


def random_data(sizes, dim, seed=0, low=-1.0, high=1.0):
    rng = np.random.default_rng(seed)
    return {f"party-{i}": rng.uniform(low, high, (n, dim)) for i, n in enumerate(sizes)}


class Session:
    """A coordinator and parties wired by hand, for message-level tests."""

    def __init__(self, data: dict, parameters: SessionParameters, session_id="test-session"):
        self.names = list(data)
        self.keys = {n: Ed25519PrivateKey.generate() for n in self.names}
        self.pinned = {n: public_key_bytes(k) for n, k in self.keys.items()}
        self.parties = {n: Party(n, data[n], session_id=session_id, parameters=parameters,
                                 identity_key=self.keys[n], pinned=self.pinned)
                        for n in self.names}
        self.coordinator = Coordinator(session_id, parameters, self.names, self.pinned)
        self.parameters = parameters

    def hellos(self):
        return {n: p.start()[0] for n, p in self.parties.items()}

    def deliver_all(self, pairs):
        """Deliver coordinator output to parties; return what they send back (sender, env)."""
        back = []
        for dest, env in pairs:
            for out in self.parties[dest].receive(env):
                back.append((dest, out))
        return back

    def confirm(self, pairs):
        """Deliver the roster broadcast ``pairs`` to the parties and their roster
        confirmations to the coordinator; return its relay of them (dest, envelope)."""
        relay = []
        for sender, env in self.deliver_all(pairs):
            relay = self.coordinator.receive(sender, env) or relay
        return relay

    def _reached(self, phase) -> bool:
        c = self.coordinator
        if phase == "confirm":  # roster sent, confirmations not yet relayed
            return c.phase == "shares" and not c.confirmed
        return c.phase == phase and (phase != "shares" or c.confirmed)

    def run_until(self, phase):
        """Run the session with a FIFO until the coordinator reaches ``phase``
        (``"shares"``: the roster confirmations relayed, so the parties' answer to what is
        queued is their shares; ``"confirm"``: the roster sent, nothing confirmed)."""
        queue = [("coordinator", n, env) for n, env in self.hellos().items()]
        while queue and not self._reached(phase):
            dest, sender, env = queue.pop(0)
            if dest == "coordinator":
                for d, e in self.coordinator.receive(sender, env):
                    queue.append((d, "coordinator", e))
            else:
                for e in self.parties[dest].receive(env):
                    queue.append(("coordinator", dest, e))
        return queue

    def tiles(self):
        """Run to the evaluation phase; return the parties' tiles as (sender, envelope)."""
        queue = self.run_until("evaluation")
        out = []
        for dest, sender, env in queue:
            if dest != "coordinator":
                out += [(dest, e) for e in self.parties[dest].receive(env)]
        return [(s, e) for s, e in out if e.HasField("tile")]


def child_report(argv):
    """A stand-in party entry for tests/protocols/test_party_processes.py: prints the
    environment variable ``argv[0]``, the working folder and the parent pid, whether the
    party's modules were imported before it ran and whether numba was; then sleeps
    ``argv[2]`` seconds, prints "done" and returns ``int(argv[1])`` as the exit code."""
    import os
    import sys

    print(os.environ.get(argv[0]), os.getcwd(), os.getppid(), flush=True)
    print("to stderr", file=sys.stderr, flush=True)
    print("preloaded" if "protocols._grpc_party" in sys.modules else "not preloaded",
          "numba" if "numba" in sys.modules else "no numba", flush=True)
    time.sleep(float(argv[2]))
    print("done", flush=True)
    return int(argv[1])


def child_kernels(argv):
    """A stand-in party entry: prints how many numba kernels were loaded before it ran
    and how many exist, then whether a kernel computes exactly here (squared distances
    mod p of small rows against Python integers); exit code 0."""
    import finite_field
    from finite_field._jit import _REGISTRY

    loaded = sum(kernel.compiled for kernel in _REGISTRY)
    p = 2**31 - 1
    x = np.random.default_rng(0).integers(0, p, (40, 3))
    got = finite_field.sq_distances(x, p)
    rows = [[int(v) for v in row] for row in x]
    expected = [[sum((a - b) ** 2 for a, b in zip(r, s)) % p for s in rows] for r in rows]
    print(loaded, len(_REGISTRY), "exact" if got.tolist() == expected else "WRONG",
          flush=True)
    return 0


class Link:
    """A FIFO session where one party's link can break and be resumed."""

    def __init__(self, session: Session):
        self.s = session
        self.c = session.coordinator
        self.queue = []           # (dest, sender, env)
        self.down: set = set()
        self.stashed = {}         # party -> its interrupted generator
        self.lost_in_flight = 0

    def start(self):
        self.queue = [("coordinator", n, env) for n, env in self.s.hellos().items()]

    def _to_coordinator(self, sender, env):
        try:
            out = self.c.receive(sender, env)
        except ProtocolError:
            assert self.c.error is not None  # failed closed; the test looks at why
            return
        for d, e in out:
            if e.HasField("share"):
                self.last_share_to = d
            self.queue.append((d, "coordinator", e))

    def step(self, break_when=None):
        """Deliver one queued message. ``break_when(name, env, sent)`` is asked before
        each envelope a party sends; True breaks that party's link there (the envelope
        and everything after it in this generator is not delivered now)."""
        dest, sender, env = self.queue.pop(0)
        if dest == "coordinator":
            if sender in self.down:
                self.lost_in_flight += 1
                return
            self._to_coordinator(sender, env)
            return
        if dest in self.down or dest in self.c.lost:
            return  # never arrives (the coordinator holds it for the replay)
        self._drain(dest, self.s.parties[dest].receive(env), break_when)

    def _drain(self, name, gen, break_when=None):
        sent = 0
        for out in gen:
            if break_when is not None and break_when(name, out, sent):
                self.cut(name)
                self.lost_in_flight += 1  # this one was sent, and lost in flight
                self.stashed[name] = gen
                return
            sent += 1
            self.queue.append(("coordinator", name, out))

    def cut(self, name):
        self.down.add(name)
        # messages from it still queued are in flight: lost
        kept = []
        for item in self.queue:
            if item[0] == "coordinator" and item[1] == name:
                self.lost_in_flight += 1
            else:
                kept.append(item)
        self.queue = kept
        for d, e in self.c.party_away(name):
            self.queue.append((d, "coordinator", e))

    def resume(self, name):
        party = self.s.parties[name]
        party.resume_request()
        challenge = self.c.resume_challenge(name)
        answer = party.answer_challenge(challenge)
        out = self.c.resume(name, answer)
        self.down.discard(name)
        accepted = out[0][1]
        assert accepted.HasField("resume_accepted")
        for e in party.resumed(accepted):
            self.queue.append(("coordinator", name, e))
        gen = self.stashed.pop(name, None)
        if gen is not None:
            self._drain(name, gen)
        for _, e in out[1:]:
            self.queue.append((name, "coordinator", e))
        return accepted.resume_accepted

    def run(self, break_when=None, limit=100_000):
        for _ in range(limit):
            if not self.queue or self.c.error is not None:
                return
            if self.c.outcome is not None:  # the results still go out, nothing comes back
                self.queue = [item for item in self.queue if item[0] != "coordinator"]
                if not self.queue:
                    return
            self.step(break_when)
        raise AssertionError("the session did not settle")


def resume_parameters(**changes) -> SessionParameters:
    """The reconnect tests' session: d = 3, R = 1, q = 8, 4 KiB tiles (about a dozen per
    prime at n = 110), reconnect_grace = 5 s."""
    values = dict(dim=3, bound=1.0, scale_bits=8, chunk_bytes=4096, reconnect_grace=5.0)
    values.update(changes)
    return SessionParameters(**values)


def resume_oracle(session, data) -> np.ndarray:
    """The exact integer D of ``data`` in the session's roster order (R = 1, q = 8)."""
    return plaintext_sq_distances(np.vstack([data[n] for n in session.names]), 1.0, 8)
