"""Connection hygiene of the gRPC coordinator (issue 14): one stream per party."""

from __future__ import annotations

import queue
import threading
import time

import grpc
import pytest

from protocols import SessionParameters
from protocols._generated import omnifc_pb2 as pb
from protocols._generated import omnifc_pb2_grpc as pb_grpc
from protocols._grpc_local import LocalSession
from protocols._grpc_party import party_from_config
from protocols._tls import make_channel, party_credentials
from protocol_helpers import queued_requests, random_data

pytestmark = [pytest.mark.network, pytest.mark.timeout(60)]

_END = object()


def _wait_for(condition, seconds):
    end = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > end:
            return False
        time.sleep(0.05)
    return True


@pytest.mark.parametrize("grace", [0.0, 30.0])
def test_second_stream_for_a_connected_party_is_refused_and_the_first_survives(grace):
    # without a grace period a second stream is refused at once (ALREADY_EXISTS); with
    # one, a second stream must resume first (docs/protocol.md, "Reconnect"): a replayed
    # hello on it gets an ErrorReport on that stream only
    data = random_data([2, 2, 2], 2, seed=5)
    params = SessionParameters(dim=2, bound=1.0, scale_bits=8, reconnect_grace=grace)
    with LocalSession(data, params, deadline=10) as local:
        server = local.server().start()
        channels = []
        first_out: queue.Queue = queue.Queue()
        try:
            target = f"127.0.0.1:{server.port}"
            credentials = party_credentials(local.config, "party-0")
            party = party_from_config(local.config, "party-0", data["party-0"],
                                      parameters=params)
            first = make_channel(target, credentials)
            channels.append(first)
            grpc.channel_ready_future(first).result(timeout=10)
            for env in party.start():
                first_out.put(env)
            first_stream = pb_grpc.CoordinatorStub(first).Session(
                queued_requests(first_out, _END), timeout=30)
            assert _wait_for(lambda: "party-0" in server.coordinator.hellos, 10)

            # The same certificate opens a second stream (a replay, or a second process).
            second = make_channel(target, credentials)
            channels.append(second)
            grpc.channel_ready_future(second).result(timeout=10)
            second_out: queue.Queue = queue.Queue()
            if grace:
                hello = pb.Envelope()
                hello.hello.CopyFrom(party._hello)  # the first stream's hello, replayed
                second_out.put(hello)
            second_stream = pb_grpc.CoordinatorStub(second).Session(
                queued_requests(second_out, _END), timeout=10)
            got = []
            reader = threading.Thread(
                target=lambda: got.append(_first_outcome(second_stream, messages=bool(grace))),
                daemon=True)
            reader.start()
            reader.join(15)
            second_out.put(_END)
            assert got, "the second stream neither got an answer nor ended"
            if grace:
                (report,), status = got[0]
                assert status == grpc.StatusCode.OK
                assert (report.error.kind, report.error.party, report.error.message) == (
                    "peer", "party-0", "resume refused: party 'party-0' is already "
                    "connected; a new stream must resume")
            else:
                assert got[0] == grpc.StatusCode.ALREADY_EXISTS, got[0]
            # The first connection is untouched: the coordinator still waits in join,
            # with party-0's hello, and has not failed.
            assert server.coordinator.error is None
            assert server.coordinator.phase == "join"
            assert "party-0" in server.coordinator.hellos
            assert not first_stream.done()
        finally:
            first_out.put(_END)
            for channel in channels:
                channel.close()
            server.stop()


def _first_outcome(stream, messages=False):
    """The status code that ends ``stream``, or "message" if it delivered one
    (``messages``: every message and the status)."""
    if messages:
        got = []
        try:
            for env in stream:
                got.append(env)
            return got, grpc.StatusCode.OK
        except grpc.RpcError as error:
            return got, error.code()
    try:
        for _ in stream:
            return "message"
        return grpc.StatusCode.OK
    except grpc.RpcError as error:
        return error.code()
