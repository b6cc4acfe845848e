"""``keepalive``: after that many seconds of silence either end of a party's connection
pings the other, and a ping unanswered for as long breaks the connection, which is then
reconnected like a reset (docs/protocol.md, "Faults on the network"). The session runs
over gRPC are rows of tests/protocols/test_faults_grpc.py (half-open, with and without)."""

from __future__ import annotations

import time

import grpc
import pytest

from finite_field import ParameterError
from protocols import SessionParameters
from protocols._fault_proxy import FaultProxy
from protocols._generated import omnifc_pb2 as pb
from protocols._generated import omnifc_pb2_grpc as pb_grpc
from protocols._tls import keepalive_options
from protocol_helpers import silent_server


def _params(**kw):
    return SessionParameters(dim=3, bound=1.0, scale_bits=8, **kw)


@pytest.mark.parametrize("value, ok", [(0, True), (0.999, False), (1, True), (30.0, True),
                                       (3600, True), (3600.001, False), (-1, False),
                                       (float("inf"), False), (True, False), ("30", False)])
def test_keepalive_is_0_or_1_to_3600_seconds(value, ok):
    if ok:
        assert _params(keepalive=value).keepalive == float(value)
        return
    with pytest.raises(ParameterError, match=r"keepalive must be 0 \(no keepalive\) or a "
                       r"number of seconds in \[1, 3600\], got "):
        _params(keepalive=value)


def test_keepalive_defaults_to_30_s_and_travels_in_the_roster():
    assert _params().keepalive == 30.0
    params = _params(keepalive=0.0)
    msg = params.to_proto(params.plan(4))
    assert msg.HasField("keepalive") and msg.keepalive == 0.0
    assert SessionParameters.from_proto(msg).keepalive == 0.0
    msg.ClearField("keepalive")  # an older coordinator: the default
    assert SessionParameters.from_proto(msg).keepalive == 30.0


def test_the_options_ping_after_the_silence_and_wait_as_long():
    options = keepalive_options(7.0)
    assert options["grpc.keepalive_time_ms"] == options["grpc.http2.ping_timeout_ms"] == 7000
    assert options["grpc.http2.max_ping_strikes"] == 0  # the other end's pings: accepted
    assert options["grpc.http2.min_ping_interval_without_data_ms"] <= 7000
    assert keepalive_options(0) == {}


def _silent_link_ends_after(seconds_keepalive: float, deadline: float,
                            fault: str = "half-open@bytes=2000") -> float | None:
    """Seconds until a stream through a proxy with ``fault`` (half-open by default) fails
    (None: it is still open at ``deadline``), with keepalive at both ends."""
    options = list(keepalive_options(seconds_keepalive).items())
    with silent_server(options) as (_, port), \
            FaultProxy(f"127.0.0.1:{port}", fault) as proxy:
        channel = grpc.insecure_channel(f"127.0.0.1:{proxy.port}", options=options)

        def requests():  # the party keeps writing into the silent link
            for _ in range(int(deadline / 0.05) + 40):
                yield pb.Envelope(ready=pb.Ready(session_id="s" * 100, party_id="p",
                                                 phase="join"))
                time.sleep(0.05)

        start = time.monotonic()
        call = pb_grpc.CoordinatorStub(channel).Session(requests(), timeout=deadline)
        try:
            for _ in call:
                pass
        except grpc.RpcError as error:
            if error.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                return None
            assert error.code() == grpc.StatusCode.UNAVAILABLE, error
            return time.monotonic() - start
        finally:
            channel.close()
        return None


@pytest.mark.network
@pytest.mark.timeout(120)
def test_a_half_open_link_is_noticed_within_twice_the_keepalive_and_not_without_it():
    # at the bound: 1 s of silence, then a ping unanswered for 1 s; the link goes
    # half-open about 0.1 s in; 1.5 s of slack for the loaded machine
    noticed = _silent_link_ends_after(1.0, deadline=20.0)
    assert noticed is not None and noticed <= 2 * 1.0 + 0.1 + 1.5, noticed
    # gRPC's defaults (keepalive 0): nothing notices it before the call's own deadline
    assert _silent_link_ends_after(0.0, deadline=6.0) is None


@pytest.mark.network
@pytest.mark.timeout(120)
def test_a_silence_shorter_than_the_keepalive_leaves_the_link_alone():
    # 0.5 s of nothing moving, keepalive 2 s: no ping is due, the stream lives on
    assert _silent_link_ends_after(2.0, deadline=6.0, fault="pause=0.5s@bytes=2000") is None
