"""Nothing of a party's stream or warm-up outlives :func:`protocols.run_party`.

A party process that had logged its error sometimes never exited (a CI run, under load):
the interpreter's exit collected a gRPC call whose ``__del__`` waited for a lock held by
gRPC's daemon thread, frozen by the exit (gdb: ``_MultiThreadedRendezvous.__del__`` and
``handle_event`` both in ``threading.RLock.__enter__``). The numba warm-up thread has the
same hazard with numba's compiler lock. So :meth:`_Link.close` waits for gRPC's sending
thread and drops the call and the channel, and the warm-up stops between kernels and is
waited for.
"""

from __future__ import annotations

import queue
import socket
import threading
import time

import grpc
import pytest

from finite_field import DeadlineError, _jit
from protocols import SessionParameters, _grpc_party
from protocols._faults import Fault
from protocols._generated import omnifc_pb2 as pb
import protocol_helpers


@pytest.fixture
def silent_server():
    with protocol_helpers.silent_server() as running:
        yield running


class _Party:
    party_id = "party-0"
    parameters = SessionParameters(dim=2, bound=1.0, scale_bits=8)


def envelope():
    return pb.Envelope(ready=pb.Ready(session_id="s", party_id="party-0", phase="join"))


@pytest.mark.timeout(60)
def test_close_waits_for_grpcs_sending_thread_and_drops_the_call(silent_server):
    servicer, port = silent_server
    link = _grpc_party._Link(_Party(), f"127.0.0.1:{port}", None, True, 30.0, Fault(None))
    link.open([envelope()])
    assert servicer.first.wait(10)
    for _ in range(8):  # the queue fills: the sending thread is busy or blocked
        link.outgoing.put(envelope(), timeout=5)
    senders = list(link._senders)
    assert senders and all(t.is_alive() for t in senders)
    call = link.responses
    start = time.monotonic()
    link.close()
    assert time.monotonic() - start < _grpc_party._CLOSE_WAIT + 1
    assert not any(t.is_alive() for t in senders)  # ended before close() returned
    assert link.responses is None and link.channel is None
    assert call.done() and call.code() == grpc.StatusCode.CANCELLED
    link.close()  # closing again is harmless


class SlowToEnd(queue.Queue):
    """The party's outgoing queue, whose end marker takes the sending thread a while."""

    def get(self, *args, **kwargs):
        item = super().get(*args, **kwargs)
        if item is _grpc_party._END:
            time.sleep(0.5)
        return item


@pytest.mark.timeout(60)
def test_close_waits_for_a_sending_thread_slow_to_end(silent_server):
    servicer, port = silent_server
    link = _grpc_party._Link(_Party(), f"127.0.0.1:{port}", None, True, 30.0, Fault(None))
    link.outgoing = SlowToEnd(maxsize=8)
    link.open([envelope()])
    assert servicer.first.wait(10)
    end = time.monotonic() + 10
    while not link._senders and time.monotonic() < end:
        time.sleep(0.01)
    senders = list(link._senders)
    link.close()
    assert senders and not any(t.is_alive() for t in senders)


class SlowKernel:
    """Stands for a lazy kernel whose load takes a while."""

    def __init__(self, log, name):
        self.log, self.name, self.compiled = log, name, False

    def dispatcher(self):
        self.log.append(self.name)
        time.sleep(0.3)
        self.compiled = True


@pytest.mark.timeout(30)
def test_the_warm_up_stops_between_kernels_and_is_waited_for(monkeypatch):
    log: list = []
    monkeypatch.setattr(_jit, "_REGISTRY", [SlowKernel(log, i) for i in range(20)])
    warming = _jit.warm_up_in_background()
    end = time.monotonic() + 10
    while not log and time.monotonic() < end:
        time.sleep(0.01)
    assert warming.stop(timeout=10) is True
    assert not warming._thread.is_alive()
    assert 1 <= len(log) <= 2          # the kernel loading when stopped, perhaps one more
    assert log == list(range(len(log)))
    stop = threading.Event()
    stop.set()
    assert _jit.warm_up(stop) == 0     # a stopped warm-up loads nothing more
    assert len(log) <= 2


@pytest.mark.timeout(60)
def test_a_reconnect_never_outlasts_the_sessions_own_timeout():
    # The chaos run's half-open party: its link was noticed dead late in the session and
    # the reconnect then took its whole reconnect_grace (30 s), past the party's own
    # timeout. The session timeout bounds the reconnect too: nothing listens on the
    # port, the link's timeout is 3 s, the grace 30 s, and it gives up at 3 s naming both.
    class Party(_Party):
        phase = "evaluation"
        parameters = SessionParameters(dim=2, bound=1.0, scale_bits=8, reconnect_grace=30)

    with socket.socket() as probe:  # a free port on loopback, nothing listening after
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    link = _grpc_party._Link(Party(), f"127.0.0.1:{port}", None, True, 3.0, Fault(None))
    start = time.monotonic()
    with pytest.raises(DeadlineError, match=r"the session did not finish within 3 s "
                                            r"\(its timeout\) while reconnecting"):
        link.reconnect("the stream to the coordinator failed: UNAVAILABLE")
    assert time.monotonic() - start < 3.0 + 2.5
    link.close()
