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


# -- the error, the bounds of each wait, and what is passed on --------------------------

def test_a_connection_error_blames_the_coordinator_end_and_names_the_reporter():
    from finite_field import DeadlineError
    party = types.SimpleNamespace(party_id="a")
    error = _party_connect._connection_error(party, "evaluation", "the stream broke")
    assert type(error) is PeerError
    assert (error.party, error.phase, error.reporter, error.detail) == (
        "coordinator", "evaluation", "party 'a'", "the stream broke (phase 'evaluation')")
    late = _party_connect._connection_error(party, "join", "no answer", kind=DeadlineError)
    assert type(late) is DeadlineError and (late.party, late.phase) == ("coordinator", "join")


class Recording:
    """``channel_ready_future``'s stand-in: records each wait's timeout; every wait runs
    out after ``step`` seconds at most (the clock advances by that)."""

    def __init__(self, clock, step=None):
        self.clock, self.step, self.timeouts, self.cancelled = clock, step, [], False

    def result(self, timeout):
        self.timeouts.append(timeout)
        self.clock.now += timeout if self.step is None else min(timeout, self.step)
        raise grpc.FutureTimeoutError()

    def cancel(self):
        self.cancelled = True


def _wait(monkeypatch, caplog, deadline, diagnose, step=None):
    """Run ``_wait_until_ready`` on a fake clock that starts at 1000 s; returns the error,
    the future, the channels it was made for and the 'waiting' lines."""
    clock = Clock()
    clock.now = 1000.0
    future = Recording(clock, step)
    channels = []

    def ready_future(channel):
        channels.append(channel)
        return future
    monkeypatch.setattr(_party_connect.time, "monotonic", clock.monotonic)
    monkeypatch.setattr(_party_connect.grpc, "channel_ready_future", ready_future)
    monkeypatch.setattr(_party_connect, "_diagnose", diagnose)
    channel, files = object(), object()
    with caplog.at_level(logging.INFO, logger="protocols"):
        with pytest.raises(PeerError) as info:
            _party_connect._wait_until_ready(channel, "127.0.0.1:1", deadline, files,
                                             types.SimpleNamespace(party_id="a"))
    assert channels == [channel] and future.cancelled
    lines = [r.getMessage() for r in caplog.records
             if "waiting for the coordinator" in r.getMessage()]
    return info.value, future, files, lines


def test_a_refused_handshake_ends_the_wait_at_once_naming_the_cause(monkeypatch, caplog):
    asked = []

    def diagnose(target, tls_files):
        asked.append((target, tls_files))
        return True, "the coordinator refused this party's certificate (x)"
    error, future, files, lines = _wait(monkeypatch, caplog, 300.0, diagnose)
    assert asked == [("127.0.0.1:1", files)] and future.timeouts == [5.0] and lines == []
    assert (error.party, error.phase, error.reporter, error.detail) == (
        "coordinator", "join", "party 'a'", "TLS handshake with 127.0.0.1:1 failed: the "
        "coordinator refused this party's certificate (x) (phase 'join')")


def test_the_last_wait_ends_at_the_deadline_and_the_error_names_it(monkeypatch, caplog):
    error, future, files, lines = _wait(monkeypatch, caplog, 5.5,
                                        lambda target, tls: (False, "connection refused"))
    assert future.timeouts == [5.0, 0.5]  # never past the deadline
    assert lines == ["waiting for the coordinator at 127.0.0.1:1 (connection refused): "
                     "5 of 5.5 s"]
    assert (error.party, error.phase, error.reporter, error.detail) == (
        "coordinator", "join", "party 'a'", "could not establish a connection to "
        "127.0.0.1:1 within 5.5 s (connection refused); is `omnifc serve` running there? "
        "(phase 'join')")


def test_waits_shorter_than_a_second_report_again_after_two_seconds(monkeypatch, caplog):
    # each wait ends after 0.5 s: said at once, then when the time waited has doubled,
    # counted from at least 1 s (2, 4, 8 s), not at every wait
    error, future, files, lines = _wait(monkeypatch, caplog, 10.0,
                                        lambda target, tls: (False, "no answer"), step=0.5)
    assert [line.rsplit(": ", 1)[1] for line in lines] == [
        "0 of 10 s", "2 of 10 s", "4 of 10 s", "8 of 10 s"]
    assert len(future.timeouts) == 20
