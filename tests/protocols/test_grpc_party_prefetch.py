"""The gRPC party reads its stream in a thread of its own (protocols/_grpc_party.py,
``_Prefetched``): messages come out in order while the party is busy sending, the call's
error or end comes after them (and stays), and done/cancel/code are the call's."""

from __future__ import annotations

import threading

import grpc
import pytest

from protocols import _grpc_party

pytestmark = pytest.mark.timeout(30)


class _Call:
    """A stand-in for a gRPC streaming call: yields ``items``; each waits for ``gate``."""

    def __init__(self, items, error=None):
        self.items, self.error = list(items), error
        self.taken = []
        self.cancelled = False

    def __iter__(self):
        for item in self.items:
            self.taken.append(item)
            yield item
        if self.error is not None:
            raise self.error

    def done(self):
        return len(self.taken) == len(self.items)

    def cancel(self):
        self.cancelled = True
        return True

    def code(self):
        return grpc.StatusCode.CANCELLED if self.cancelled else None


class _Failure(grpc.RpcError):
    pass


def test_messages_are_read_ahead_in_order_while_nobody_iterates():
    call = _Call(range(500))
    stream = _grpc_party._Prefetched(call)
    stream.join(10)  # the reader took every message though the party read none yet
    assert call.taken == list(range(500))
    assert list(stream) == list(range(500))
    assert list(stream) == []  # ended, and stays ended


def test_the_calls_error_follows_its_messages_and_is_raised_again():
    stream = _grpc_party._Prefetched(_Call(["a", "b"], error=_Failure("broken")))
    assert next(stream) == "a" and next(stream) == "b"
    for _ in range(2):
        with pytest.raises(_Failure, match="broken"):
            next(stream)


def test_done_cancel_and_code_are_the_calls():
    call = _Call([])
    stream = _grpc_party._Prefetched(call)
    stream.join(10)
    assert stream.done() is True
    assert stream.cancel() is True and call.cancelled
    assert stream.code() == grpc.StatusCode.CANCELLED


def test_a_reader_blocked_on_the_call_does_not_block_the_party():
    gate = threading.Event()

    def slow():
        yield "first"
        gate.wait(10)
        yield "second"

    class Slow(_Call):
        def __iter__(self):
            return slow()

    stream = _grpc_party._Prefetched(Slow([]))
    assert next(stream) == "first"  # while the call still waits for its second message
    gate.set()
    assert next(stream) == "second"
