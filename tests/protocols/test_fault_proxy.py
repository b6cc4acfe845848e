"""The loopback fault proxy alone (protocols/_fault_proxy.py): bytes are forwarded exactly,
each fault does what its spec says and nothing else, every thread ends on close().

A plain TCP server on 127.0.0.1:0 stands in for the coordinator; every socket and thread
the tests open is closed in the test."""

from __future__ import annotations

import socket
import threading
import time

import numpy as np
import pytest

from finite_field import ParameterError
from protocols._fault_proxy import FaultProxy, FaultSpec

pytestmark = [pytest.mark.network]


class Server:
    """Accepts connections on 127.0.0.1:0; for each, records what arrives (with arrival
    times) and sends ``reply`` back. ``ended[i]`` says how connection i ended: ``eof``,
    ``reset`` or ``open`` (still open when the server was closed)."""

    def __init__(self, reply: bytes = b"") -> None:
        self.reply = reply
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.1)
        self.port = self.listener.getsockname()[1]
        self.received: list[bytearray] = []
        self.arrivals: list[list] = []
        self.ended: list[str] = []
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._accept, daemon=True)]
        self.threads[0].start()

    def _accept(self):
        while not self.stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except (socket.timeout, TimeoutError):
                continue
            index = len(self.received)
            self.received.append(bytearray())
            self.arrivals.append([])
            self.ended.append("open")
            thread = threading.Thread(target=self._serve, args=(conn, index), daemon=True)
            self.threads.append(thread)
            thread.start()

    def _serve(self, conn, index):
        conn.settimeout(0.1)
        with conn:
            if self.reply:
                conn.sendall(self.reply)
            while not self.stop.is_set():
                try:
                    data = conn.recv(65536)
                except (socket.timeout, TimeoutError):
                    continue
                except ConnectionResetError:
                    self.ended[index] = "reset"
                    return
                if not data:
                    self.ended[index] = "eof"
                    return
                self.received[index] += data
                self.arrivals[index].append((time.monotonic(), len(self.received[index])))

    def wait(self, index, size, timeout=10.0):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if len(self.received) > index and len(self.received[index]) >= size:
                return True
            time.sleep(0.01)
        return False

    def wait_end(self, index, timeout=10.0):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if len(self.ended) > index and self.ended[index] != "open":
                return self.ended[index]
            time.sleep(0.01)
        return "open"

    def close(self):
        self.stop.set()
        for thread in self.threads:
            thread.join(5)
        self.listener.close()
        assert not any(t.is_alive() for t in self.threads)


@pytest.fixture
def server():
    s = Server()
    yield s
    s.close()


def payload(size, seed=0):
    return np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8).tobytes()


def client(proxy):
    sock = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
    return sock


def recv_all(sock, size, timeout=10.0):
    sock.settimeout(0.2)
    out = bytearray()
    end = time.monotonic() + timeout
    while len(out) < size and time.monotonic() < end:
        try:
            data = sock.recv(65536)
        except (socket.timeout, TimeoutError):
            continue
        if not data:
            break
        out += data
    return bytes(out)


# -- the spec --------------------------------------------------------------------------
def test_specs_parse_and_print_back():
    spec = FaultSpec.parse("latency=50ms,jitter=20ms,rate=2MB/s")
    assert (spec.latency, spec.jitter, spec.rate, spec.action) == (0.05, 0.02, 2e6, None)
    assert FaultSpec.parse("pause=3s@bytes=7,dir=both") == FaultSpec(
        action="pause", at_bytes=7, pause=3.0, direction="both")
    assert FaultSpec.parse("reset@bytes=200000") == FaultSpec(action="reset", at_bytes=200000)
    assert FaultSpec.parse("half-open@bytes=0,every").every
    assert FaultSpec.parse("corrupt@bytes=5,xor=1").xor == 1
    assert FaultSpec.parse(None) == FaultSpec.parse("none") == FaultSpec()
    for text in ("latency=50ms,jitter=20ms,rate=2000000B/s", "pause=3s@bytes=7,dir=both",
                 "corrupt@bytes=5,dir=down,every,xor=1", "none"):
        assert str(FaultSpec.parse(text)) == text
        assert FaultSpec.parse(str(FaultSpec.parse(text))) == FaultSpec.parse(text)


@pytest.mark.parametrize("text, phrase", [
    ("latency=fast", "not a duration"),
    ("rate=-1MB/s", "not a positive rate"),
    ("rate=2MB", "not a positive rate"),
    ("explode@bytes=3", "unknown action 'explode'"),
    ("reset@time=3", "trigger must be @bytes=N"),
    ("reset", "unknown item 'reset'"),
    ("pause@bytes=3", "pause needs a duration"),
    ("reset=1@bytes=3", "reset takes no value"),
    ("reset@bytes=3,corrupt@bytes=4", "at most one of"),
    ("dir=sideways", "dir must be up, down or both"),
    ("corrupt@bytes=1,xor=0", "xor must be in 1..255"),
])
def test_bad_specs_are_refused_with_the_reason(text, phrase):
    with pytest.raises(ParameterError, match=phrase):
        FaultSpec.parse(text)


# -- exact relay ------------------------------------------------------------------------
@pytest.mark.timeout(30)
def test_without_a_fault_every_byte_is_forwarded_exactly_both_ways():
    reply = payload(300_000, seed=2)
    srv = Server(reply=reply)
    try:
        with FaultProxy(f"127.0.0.1:{srv.port}") as proxy:
            sent = payload(1_000_003, seed=1)
            with client(proxy) as sock:
                sock.sendall(sent)
                assert recv_all(sock, len(reply)) == reply
                sock.shutdown(socket.SHUT_WR)
                assert srv.wait_end(0) == "eof"          # the FIN is forwarded
            assert bytes(srv.received[0]) == sent
            assert proxy.forwarded("up") == len(sent)
            assert proxy.forwarded("down") == len(reply)
            assert not proxy.fired.is_set()
        assert proxy.threads_alive() == 0
    finally:
        srv.close()


# -- reset ------------------------------------------------------------------------------
@pytest.mark.timeout(30)
def test_a_reset_forwards_exactly_n_bytes_then_resets_both_ends(server):
    with FaultProxy(f"127.0.0.1:{server.port}", "reset@bytes=200000") as proxy:
        sent = payload(500_000)
        with client(proxy) as sock:
            with pytest.raises((ConnectionResetError, BrokenPipeError)):
                sock.sendall(sent)
                sock.settimeout(5)
                # the RST may arrive after our writes went into the buffer: a read sees it
                assert sock.recv(1) == b"", "the proxy must reset, not close"
                raise AssertionError("the client end was closed, not reset")
        assert server.wait_end(0) == "reset"
        # the proxy forwarded exactly 200,000 bytes; the receiver keeps those it read before
        # the RST arrived (a reset discards what is still unread), never one more
        assert proxy.links[0].forwarded["up"] == 200_000
        got = bytes(server.received[0])
        assert len(got) <= 200_000 and got == sent[:len(got)]
        assert proxy.fired.is_set()
        assert [e[2:] for e in proxy.events if e[2] == "reset"] == [("reset", "up", 200_000)]
    assert proxy.threads_alive() == 0


@pytest.mark.timeout(30)
def test_only_the_first_connection_is_faulted_unless_every(server):
    with FaultProxy(f"127.0.0.1:{server.port}", "reset@bytes=10") as proxy:
        with client(proxy) as first:
            first.sendall(b"0123456789abc")
            assert server.wait_end(0) == "reset"
        with client(proxy) as second:                  # a reconnect gets a clean link
            second.sendall(b"0123456789abc")
            assert server.wait(1, 13)
        assert proxy.links[0].forwarded["up"] == 10
        assert b"0123456789".startswith(bytes(server.received[0]))
        assert bytes(server.received[1]) == b"0123456789abc"
    with FaultProxy(f"127.0.0.1:{server.port}", "reset@bytes=10,every") as proxy:
        for index in (2, 3):
            with client(proxy) as sock:
                try:
                    sock.sendall(b"0123456789abc")
                except (ConnectionResetError, BrokenPipeError):
                    pass
                assert server.wait_end(index) == "reset"
            assert proxy.links[index - 2].forwarded["up"] == 10
            assert b"0123456789".startswith(bytes(server.received[index]))


# -- corruption -------------------------------------------------------------------------
@pytest.mark.timeout(30)
@pytest.mark.parametrize("offset", [0, 65535, 65536, 123_457, 299_999])
def test_corruption_flips_exactly_the_chosen_byte(server, offset):
    with FaultProxy(f"127.0.0.1:{server.port}", f"corrupt@bytes={offset}") as proxy:
        sent = payload(300_000, seed=offset)
        with client(proxy) as sock:
            sock.sendall(sent)
            assert server.wait(0, len(sent))
    got = np.frombuffer(bytes(server.received[0]), dtype=np.uint8)
    expected = np.frombuffer(sent, dtype=np.uint8).copy()
    expected[offset] ^= 0xFF
    assert got.size == expected.size and np.array_equal(got, expected)
    assert np.flatnonzero(got != np.frombuffer(sent, dtype=np.uint8)).tolist() == [offset]


@pytest.mark.timeout(30)
def test_corruption_downstream_leaves_the_upstream_alone():
    reply = payload(100_000, seed=4)
    srv = Server(reply=reply)
    try:
        with FaultProxy(f"127.0.0.1:{srv.port}", "corrupt@bytes=777,dir=down,xor=1") as proxy:
            sent = payload(100_000, seed=5)
            with client(proxy) as sock:
                sock.sendall(sent)
                got = recv_all(sock, len(reply))
                assert srv.wait(0, len(sent))
        assert bytes(srv.received[0]) == sent
        expected = bytearray(reply)
        expected[777] ^= 1
        assert got == bytes(expected)
    finally:
        srv.close()


# -- timing faults (loose lower bounds against wall time) --------------------------------
@pytest.mark.timeout(60)
def test_the_rate_cap_holds_against_wall_time(server):
    rate, size = 1_000_000, 600_000
    with FaultProxy(f"127.0.0.1:{server.port}", f"rate={rate}B/s") as proxy:
        sent = payload(size, seed=7)
        with client(proxy) as sock:
            start = time.monotonic()
            sock.sendall(sent)
            assert server.wait(0, size, timeout=30)
            elapsed = time.monotonic() - start
    assert bytes(server.received[0]) == sent
    # a cap: never faster than size / rate (minus the first 50 ms piece); loose above
    assert elapsed >= (size - 0.05 * rate) / rate, elapsed
    assert elapsed < 20 * size / rate, elapsed


@pytest.mark.timeout(60)
def test_latency_delays_and_jitter_keeps_the_order(server):
    with FaultProxy(f"127.0.0.1:{server.port}", "latency=300ms,jitter=100ms",
                    seed=3) as proxy:
        with client(proxy) as sock:
            start = time.monotonic()
            messages = [bytes([i]) * 100 for i in range(40)]
            for message in messages:
                sock.sendall(message)
                time.sleep(0.005)
            assert server.wait(0, 4000, timeout=20)
    assert bytes(server.received[0]) == b"".join(messages)   # in order, nothing lost
    first_arrival = server.arrivals[0][0][0]
    assert first_arrival - start >= 0.2 - 0.01                # latency - jitter at least


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_a_pause_stops_everything_for_its_duration_then_resumes_exactly(server):
    with FaultProxy(f"127.0.0.1:{server.port}", "pause=1.5s@bytes=50000") as proxy:
        sent = payload(120_000, seed=8)
        with client(proxy) as sock:
            sock.sendall(sent)
            assert server.wait(0, len(sent), timeout=20)
    assert bytes(server.received[0]) == sent
    times = dict((size, t) for t, size in server.arrivals[0])
    before = max(t for t, size in server.arrivals[0] if size <= 50_000)
    after = min(t for t, size in server.arrivals[0] if size > 50_000)
    assert max(s for s in times if s <= 50_000) == 50_000      # cut exactly at the offset
    assert after - before >= 1.4, after - before
    assert proxy.fired.is_set()


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_half_open_stops_traffic_without_closing_until_close(server):
    proxy = FaultProxy(f"127.0.0.1:{server.port}", "half-open@bytes=1000,dir=both")
    try:
        sock = client(proxy)
        sock.sendall(payload(5000))
        assert server.wait(0, 1000)
        time.sleep(1.5)
        assert len(server.received[0]) == 1000            # nothing more went through
        assert server.ended[0] == "open"                  # and nothing was closed
        sock.settimeout(0.5)
        with pytest.raises((socket.timeout, TimeoutError)):
            sock.recv(1)                                  # the client sees no close either
        sock.shutdown(socket.SHUT_WR)                     # nor is its FIN forwarded
        time.sleep(0.5)
        assert server.ended[0] == "open"
    finally:
        proxy.close()
        sock.close()
    assert proxy.threads_alive() == 0
    assert server.wait_end(0) in ("eof", "reset")         # close() ends the link


@pytest.mark.timeout(30)
def test_close_ends_every_thread_and_refuses_new_connections(server):
    proxy = FaultProxy(f"127.0.0.1:{server.port}", "half-open@bytes=0")
    socks = [client(proxy) for _ in range(3)]
    assert server.wait_end(0, timeout=0.3) == "open"
    proxy.close(timeout=5)
    assert proxy.threads_alive() == 0
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", proxy.port), timeout=2).close()
    for sock in socks:
        sock.close()


@pytest.mark.timeout(30)
def test_an_unreachable_target_resets_the_client():
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.close()                                      # nobody listens there now
    with FaultProxy(f"127.0.0.1:{port}", connect_timeout=1.0) as proxy:
        # The reset can land before connect() has returned (a timed connect checks
        # SO_ERROR after its poll), or on the first read: the same outcome either way.
        with pytest.raises(ConnectionResetError):
            with client(proxy) as sock:
                sock.settimeout(5)
                sock.recv(1)
    assert proxy.threads_alive() == 0
