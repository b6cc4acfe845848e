"""A loopback TCP proxy that injects network faults (tests and benchmarks only).

Not imported by production code. One :class:`FaultProxy` per party connection: it listens
on ``127.0.0.1:0`` and forwards every accepted connection to the coordinator's address, so
a party started with ``--target 127.0.0.1:<proxy port>`` talks to the real coordinator
through it. Mutual TLS runs end to end through the proxy (it only moves bytes): every
certificate carries the SAN 127.0.0.1, which does not depend on the port, so the party
still verifies the coordinator's pinned certificate and a corrupted byte is caught by TLS.

Faults are declared by a :class:`FaultSpec`, parsed from a comma-separated string:

``latency=50ms``           each chunk is delayed by that much (order kept)
``jitter=20ms``            plus a uniform delay in [-jitter, +jitter] (seeded; never < 0)
``rate=2MB/s``             a bandwidth cap (bytes per second; k, M, G = 10^3, 10^6, 10^9)
``reset@bytes=N``          exactly N bytes are forwarded, then both sockets are reset (RST)
``pause=3s@bytes=N``       after N bytes nothing moves in either direction for 3 s
``half-open@bytes=N``      after N bytes nothing moves any more and nothing is closed
                           (until :meth:`FaultProxy.close`)
``corrupt@bytes=N``        the byte at offset N (0-based) is XORed with ``xor`` (default 0xFF)
``dir=up|down|both``       where the fault applies: ``up`` party -> coordinator (default),
                           ``down`` coordinator -> party, ``both``
``every``                  apply the fault to every connection, not only the first

Byte offsets count the bytes of one direction of one TCP connection (``up`` unless
``dir=down``; with ``both`` the up direction triggers). Only the first connection is faulted
unless ``every`` is given: a party that reconnects gets a clean link.

Every wait is bounded (sockets poll with short timeouts and watch a closing flag);
:meth:`FaultProxy.close` ends every thread within seconds. Use as a context manager.

Examples
--------
>>> FaultSpec.parse("pause=3s@bytes=2000,dir=both")
FaultSpec(latency=0.0, jitter=0.0, rate=None, action='pause', at_bytes=2000, pause=3.0, \
direction='both', every=False, xor=255)
>>> FaultSpec.parse("latency=50ms,jitter=20ms").latency
0.05
"""

from __future__ import annotations

import logging
import queue
import random
import re
import select
import socket
import struct
import threading
import time
from dataclasses import dataclass, field

from finite_field import ParameterError

__all__ = ["FaultSpec", "FaultProxy", "ACTIONS"]

logger = logging.getLogger(__name__)

#: The faults triggered at a byte offset (at most one per spec).
ACTIONS = ("reset", "pause", "half-open", "corrupt")

_CHUNK = 65536
_POLL = 0.1          # seconds between checks of the closing flag
_QUEUE_CHUNKS = 64   # chunks buffered per direction (memory stays bounded by ~4 MiB)
_EOF, _RESET = object(), object()

_UNITS = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9}


def _seconds(text: str, key: str) -> float:
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(ms|s)?\s*", text)
    if not match:
        raise ParameterError(f"fault spec: {key}={text!r} is not a duration like 50ms or 3s")
    value = float(match.group(1))
    return value / 1000.0 if match.group(2) == "ms" else value


def _rate(text: str) -> float:
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([kKmMgG]?)B/s\s*", text)
    if not match or float(match.group(1)) <= 0:
        raise ParameterError(f"fault spec: rate={text!r} is not a positive rate like 2MB/s")
    return float(match.group(1)) * _UNITS[match.group(2).lower()]


@dataclass(frozen=True)
class FaultSpec:
    """What a :class:`FaultProxy` does to the bytes it forwards (see the module docstring).

    Attributes
    ----------
    latency, jitter : float
        Seconds of delay per chunk and its uniform spread.
    rate : float or None
        Bytes per second (None: no cap).
    action : str or None
        One of :data:`ACTIONS`, triggered once ``at_bytes`` bytes went through.
    at_bytes : int or None
    pause : float
        Seconds of the ``pause`` action.
    direction : str
        ``up`` (party -> coordinator), ``down`` or ``both``.
    every : bool
        Fault every connection (default: only the first).
    xor : int
        What the ``corrupt`` action XORs the byte with (1..255).
    """

    latency: float = 0.0
    jitter: float = 0.0
    rate: float | None = None
    action: str | None = None
    at_bytes: int | None = None
    pause: float = 0.0
    direction: str = "up"
    every: bool = False
    xor: int = 0xFF

    def __post_init__(self) -> None:
        if self.latency < 0 or self.jitter < 0 or self.pause < 0:
            raise ParameterError("fault spec: durations must be >= 0")
        if self.direction not in ("up", "down", "both"):
            raise ParameterError(f"fault spec: dir must be up, down or both, got "
                                 f"{self.direction!r}")
        if self.action is not None:
            if self.action not in ACTIONS:
                raise ParameterError(f"fault spec: unknown action {self.action!r} "
                                     f"(one of {', '.join(ACTIONS)})")
            if self.at_bytes is None or self.at_bytes < 0:
                raise ParameterError(f"fault spec: {self.action} needs @bytes=N with N >= 0")
        if not 1 <= self.xor <= 255:
            raise ParameterError(f"fault spec: xor must be in 1..255, got {self.xor}")

    @classmethod
    def parse(cls, text: str | None) -> "FaultSpec":
        """A spec from its string form; None or ``""`` or ``"none"``: no fault."""
        values: dict = {}
        for item in (text or "").split(","):
            item = item.strip()
            if not item or item == "none":
                continue
            head, _, trigger = item.partition("@")
            key, eq, value = head.partition("=")
            key = key.strip()
            if trigger:
                tkey, _, tvalue = trigger.partition("=")
                if tkey.strip() != "bytes" or not tvalue.strip().isdigit():
                    raise ParameterError(f"fault spec: {item!r}: the trigger must be "
                                         "@bytes=N")
                if "action" in values:
                    raise ParameterError(f"fault spec {text!r}: at most one of "
                                         f"{', '.join(ACTIONS)}")
                values["action"], values["at_bytes"] = key, int(tvalue)
                if key == "pause":
                    if not eq:
                        raise ParameterError(f"fault spec: {item!r}: pause needs a duration "
                                             "(pause=3s@bytes=N)")
                    values["pause"] = _seconds(value, key)
                elif eq:
                    raise ParameterError(f"fault spec: {item!r}: {key} takes no value")
            elif key in ("latency", "jitter"):
                values[key] = _seconds(value, key)
            elif key == "rate":
                values["rate"] = _rate(value)
            elif key == "dir":
                values["direction"] = value.strip()
            elif key == "every" and not eq:
                values["every"] = True
            elif key == "xor":
                values["xor"] = int(value, 0)
            else:
                raise ParameterError(f"fault spec: unknown item {item!r}")
        return cls(**values)

    def __str__(self) -> str:
        parts = []
        if self.latency:
            parts.append(f"latency={self.latency * 1000:g}ms")
        if self.jitter:
            parts.append(f"jitter={self.jitter * 1000:g}ms")
        if self.rate:
            parts.append(f"rate={int(self.rate)}B/s" if self.rate == int(self.rate)
                         else f"rate={self.rate}B/s")
        if self.action == "pause":
            parts.append(f"pause={self.pause:g}s@bytes={self.at_bytes}")
        elif self.action:
            parts.append(f"{self.action}@bytes={self.at_bytes}")
        if self.direction != "up":
            parts.append(f"dir={self.direction}")
        if self.every:
            parts.append("every")
        if self.xor != 0xFF:
            parts.append(f"xor={self.xor}")
        return ",".join(parts) or "none"

    def applies(self, direction: str) -> bool:
        return self.direction in (direction, "both")

    def triggers(self, direction: str) -> bool:
        """Whether the byte offset of ``direction`` triggers the action."""
        return self.action is not None and (
            self.direction == direction or (self.direction == "both" and direction == "up"))


@dataclass
class _Link:
    """One proxied TCP connection: the two sockets and what both directions share."""

    index: int
    client: socket.socket
    server: socket.socket
    spec: FaultSpec
    rng: random.Random
    blocked_until: float = 0.0   # monotonic; inf: half-open for good
    done: threading.Event = field(default_factory=threading.Event)
    threads: list = field(default_factory=list)
    forwarded: dict = field(default_factory=lambda: {"up": 0, "down": 0})
    ended: int = 0               # directions finished (2: the link is over)


class FaultProxy:
    """Forward ``127.0.0.1:port`` to ``target`` (``host:port``), applying ``spec``.

    Parameters
    ----------
    target : str
        Where to forward (the coordinator's ``host:port``).
    spec : FaultSpec or str, optional
        The fault (default none: an exact relay).
    seed : int
        Seeds the jitter (the fault schedule is reproducible; no secret depends on it).
    connect_timeout : float
        Seconds to connect to ``target`` for each accepted connection.

    Attributes
    ----------
    port : int
        Where the proxy listens (on 127.0.0.1).
    events : list of tuple
        ``(monotonic seconds, connection index, what, direction, byte offset)`` for every
        fault fired and every connection opened or ended.
    fired : threading.Event
        Set once the triggered action happened.
    """

    def __init__(self, target: str, spec: FaultSpec | str | None = None, *, seed: int = 0,
                 connect_timeout: float = 5.0) -> None:
        host, _, port = target.rpartition(":")
        self.target = (host.strip("[]") or "127.0.0.1", int(port))
        self.spec = spec if isinstance(spec, FaultSpec) else FaultSpec.parse(spec)
        self.seed = seed
        self.connect_timeout = connect_timeout
        self.events: list = []
        self.fired = threading.Event()
        self.links: list[_Link] = []
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(16)
        self._listener.settimeout(_POLL)
        self.port = self._listener.getsockname()[1]
        self._acceptor = threading.Thread(target=self._accept, name=f"fault-proxy-{self.port}",
                                          daemon=True)
        self._acceptor.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def forwarded(self, direction: str = "up") -> int:
        """Bytes forwarded in ``direction`` over all connections so far."""
        with self._lock:
            return sum(link.forwarded[direction] for link in self.links)

    def _event(self, link: _Link | None, what: str, direction: str = "", offset: int = 0):
        with self._lock:
            self.events.append((time.monotonic(), -1 if link is None else link.index, what,
                                direction, offset))
        logger.info("fault proxy %d: connection %s %s %s %d", self.port,
                    "-" if link is None else link.index, what, direction, offset)

    # -- accepting --------------------------------------------------------------------
    def _accept(self) -> None:
        while not self._closing.is_set():
            try:
                client, _ = self._listener.accept()
            except (socket.timeout, TimeoutError):
                continue
            except OSError:
                return  # the listener was closed
            try:
                server = socket.create_connection(self.target, timeout=self.connect_timeout)
            except OSError as error:
                logger.info("fault proxy %d: cannot reach %s: %s", self.port, self.target, error)
                _reset(client)
                continue
            with self._lock:
                index = len(self.links)
                spec = self.spec if index == 0 or self.spec.every else FaultSpec()
                link = _Link(index, client, server, spec,
                             random.Random(f"{self.seed}:{index}"))
                self.links.append(link)
            for sock in (client, server):
                sock.setblocking(False)  # every wait below is a select with a timeout
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._event(link, "open")
            for direction, source, dest in (("up", client, server), ("down", server, client)):
                pipe: queue.Queue = queue.Queue(maxsize=_QUEUE_CHUNKS)
                for role, target in (("read", self._read), ("write", self._write)):
                    thread = threading.Thread(
                        target=target, args=(link, direction, source if role == "read"
                                             else dest, pipe),
                        name=f"fault-proxy-{self.port}-{index}-{direction}-{role}",
                        daemon=True)
                    link.threads.append(thread)
            for thread in link.threads:
                thread.start()

    # -- one direction: a reader that cuts and stamps chunks, a writer that delays them --
    def _put(self, link: _Link, pipe: queue.Queue, item) -> bool:
        while not (self._closing.is_set() or link.done.is_set()):
            try:
                pipe.put(item, timeout=_POLL)
                return True
            except queue.Full:
                continue
        return False

    def _read(self, link: _Link, direction: str, source: socket.socket,
              pipe: queue.Queue) -> None:
        spec = link.spec
        offset, due = 0, 0.0
        triggers = spec.triggers(direction)
        delayed = spec.applies(direction) and (spec.latency or spec.jitter)
        while not (self._closing.is_set() or link.done.is_set()):
            try:
                readable, _, _ = select.select([source], [], [], _POLL)
                if not readable:
                    continue
                data = source.recv(_CHUNK)
            except (BlockingIOError, InterruptedError):
                continue
            except (OSError, ValueError):  # reset by the peer, or closed here
                self._put(link, pipe, (0.0, _RESET, offset))
                return
            if not data:
                self._put(link, pipe, (due, _EOF, offset))
                return
            now = time.monotonic()
            if delayed:
                delay = spec.latency + link.rng.uniform(-spec.jitter, spec.jitter)
                due = max(due, now + max(0.0, delay))  # order kept, never earlier than sent
            else:
                due = now
            if triggers and offset <= spec.at_bytes < offset + len(data):
                cut = spec.at_bytes - offset
                if spec.action == "corrupt":
                    data = bytearray(data)
                    data[cut] ^= spec.xor
                    data = bytes(data)
                    self._event(link, "corrupt", direction, spec.at_bytes)
                    self.fired.set()
                else:  # forward exactly at_bytes, then act
                    if cut and not self._put(link, pipe, (due, data[:cut], offset)):
                        return
                    offset += cut
                    self._put(link, pipe, (due, spec.action, offset))
                    data = data[cut:]
                    if spec.action == "reset":
                        return
                triggers = False
            elif triggers and spec.at_bytes == offset + len(data) and \
                    spec.action in ("reset", "pause", "half-open"):
                # the trigger sits exactly at the end of this chunk
                if not self._put(link, pipe, (due, data, offset)):
                    return
                offset += len(data)
                self._put(link, pipe, (due, spec.action, offset))
                if spec.action == "reset":
                    return
                triggers = False
                continue
            if data and not self._put(link, pipe, (due, data, offset)):
                return
            offset += len(data)

    def _wait_until(self, link: _Link, moment: float) -> bool:
        """Sleep until ``moment`` (monotonic) and the link is not blocked; False: closing."""
        while not (self._closing.is_set() or link.done.is_set()):
            now = time.monotonic()
            until = max(moment, link.blocked_until)
            if now >= until:
                return True
            time.sleep(min(_POLL, until - now))
        return False

    def _write(self, link: _Link, direction: str, dest: socket.socket,
               pipe: queue.Queue) -> None:
        spec = link.spec
        capped = spec.rate if spec.applies(direction) else None
        ready_at = 0.0  # rate cap: monotonic time from which the next piece may go
        try:
            while not (self._closing.is_set() or link.done.is_set()):
                try:
                    due, item, offset = pipe.get(timeout=_POLL)
                except queue.Empty:
                    continue
                if not self._wait_until(link, due):
                    return
                if item is _RESET:
                    self._event(link, "peer-reset", direction, offset)
                    self._reset_link(link)
                    return
                if item is _EOF:
                    try:
                        dest.shutdown(socket.SHUT_WR)
                    except OSError:
                        pass
                    self._event(link, "eof", direction, offset)
                    return
                if item == "reset":
                    self._event(link, "reset", direction, offset)
                    self.fired.set()
                    self._reset_link(link)
                    return
                if item == "pause":
                    link.blocked_until = max(link.blocked_until,
                                             time.monotonic() + spec.pause)
                    self._event(link, "pause", direction, offset)
                    self.fired.set()
                    continue
                if item == "half-open":
                    link.blocked_until = float("inf")
                    self._event(link, "half-open", direction, offset)
                    self.fired.set()
                    continue
                view = memoryview(item)
                while view:
                    if not self._wait_until(link, 0.0):
                        return
                    piece = view[:max(1, int(capped * 0.05))] if capped else view
                    if capped and not self._wait_until(link, ready_at):
                        return
                    before = time.monotonic()
                    try:
                        _, writable, _ = select.select([], [dest], [], _POLL)
                        count = dest.send(piece) if writable else 0
                    except (BlockingIOError, InterruptedError):
                        count = 0
                    if not count:
                        continue
                    piece = piece[:count]
                    if capped:  # the piece occupies the link for count / rate seconds
                        ready_at = max(ready_at, before) + count / capped
                    with self._lock:
                        link.forwarded[direction] += len(piece)
                    view = view[len(piece):]
        except (OSError, ValueError):
            self._event(link, "send-failed", direction, 0)
            self._reset_link(link)
        finally:
            with self._lock:
                link.ended += 1
                over = link.ended == 2
            if over and not link.done.is_set():
                link.done.set()
                _close(link.client)
                _close(link.server)

    def _reset_link(self, link: _Link) -> None:
        link.done.set()
        _reset(link.client)
        _reset(link.server)

    # -- lifecycle ------------------------------------------------------------------------
    def close(self, timeout: float = 10.0) -> None:
        """Stop accepting, close every connection, join every thread (bounded)."""
        self._closing.set()
        _close(self._listener)
        end = time.monotonic() + timeout
        self._acceptor.join(max(0.0, end - time.monotonic()))
        with self._lock:
            links = list(self.links)
        for link in links:
            link.done.set()
            _close(link.client)
            _close(link.server)
        for link in links:
            for thread in link.threads:
                thread.join(max(0.0, end - time.monotonic()))
        alive = [t.name for link in links for t in link.threads if t.is_alive()]
        if self._acceptor.is_alive():
            alive.append(self._acceptor.name)
        if alive:
            logger.warning("fault proxy %d: threads still running after close: %s",
                           self.port, alive)

    def threads_alive(self) -> int:
        with self._lock:
            links = list(self.links)
        return sum(t.is_alive() for link in links for t in link.threads) + \
            self._acceptor.is_alive()

    def __enter__(self) -> "FaultProxy":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _reset(sock: socket.socket) -> None:
    """Close with an RST (SO_LINGER 0), not a FIN."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    _close(sock)


def _close(sock: socket.socket) -> None:
    try:
        sock.close()
    except OSError:
        pass
