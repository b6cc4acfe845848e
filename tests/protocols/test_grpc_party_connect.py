"""A party that waits for a coordinator says so rarely: after 5 s, then each time the wait
doubles or the cause changes (issue 25 item 9), not every 5 s of a 300 s deadline."""

from __future__ import annotations

import logging
import types

import grpc
import pytest

from finite_field import PeerError
from protocols import _party_connect


class Clock:
    def __init__(self):
        self.now = 0.0

    def monotonic(self):
        return self.now


class NeverReady:
    """``channel_ready_future``'s stand-in: every wait runs out (and advances the clock)."""

    def __init__(self, clock):
        self.clock, self.cancelled = clock, False

    def result(self, timeout):
        self.clock.now += timeout
        raise grpc.FutureTimeoutError()

    def cancel(self):
        self.cancelled = True


def waiting_lines(monkeypatch, caplog, deadline, causes=None):
    clock = Clock()
    future = NeverReady(clock)
    monkeypatch.setattr(_party_connect.time, "monotonic", clock.monotonic)
    monkeypatch.setattr(_party_connect.grpc, "channel_ready_future", lambda channel: future)
    causes = causes or (lambda now: "connection refused")
    monkeypatch.setattr(_party_connect, "_diagnose",
                        lambda target, tls: (False, causes(clock.now)))
    with caplog.at_level(logging.INFO, logger="protocols"):
        with pytest.raises(PeerError, match=f"within {deadline:g} s"):
            _party_connect._wait_until_ready(None, "127.0.0.1:1", deadline, None,
                                          types.SimpleNamespace(party_id="a"))
    assert future.cancelled
    return [(r.levelname, r.getMessage()) for r in caplog.records
            if "waiting for the coordinator" in r.getMessage()]


def test_a_300_s_wait_says_so_a_few_times_not_sixty(monkeypatch, caplog):
    lines = waiting_lines(monkeypatch, caplog, 300.0)
    assert [message.rsplit(": ", 1)[1] for _, message in lines] == [
        "5 of 300 s", "10 of 300 s", "20 of 300 s", "40 of 300 s", "80 of 300 s",
        "160 of 300 s"]
    assert {level for level, _ in lines} == {"WARNING"}
    assert all("(connection refused)" in message for _, message in lines)


def test_a_short_wait_says_so_once(monkeypatch, caplog):
    assert len(waiting_lines(monkeypatch, caplog, 7.0)) == 1


def test_a_new_cause_is_said_at_once(monkeypatch, caplog):
    lines = waiting_lines(monkeypatch, caplog, 30.0,
                          causes=lambda now: "connection refused" if now < 12 else "no answer")
    assert [message.rsplit(": ", 1)[1] for _, message in lines] == [
        "5 of 30 s", "10 of 30 s", "15 of 30 s"]  # at 30 s it gives up instead
    assert "(no answer)" in lines[2][1]
