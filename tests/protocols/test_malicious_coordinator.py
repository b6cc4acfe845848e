"""An actively malicious coordinator against real, unmodified parties.

Each test runs an attack a coordinator could mount by deviating from the protocol and
asserts that it fails: either the honest parties abort with a clear error, or what the
coordinator recovers is not the truth (checked against the plaintext). The attack code
lives in :mod:`omnifc.audit._active` (the audit runs the same attack).
"""

from __future__ import annotations

import numpy as np
import pytest

from finite_field import IntegrityError, PeerError, ProtocolError
from omnifc.audit._active import (EquivocatingCoordinator, equivocation_views,
                                  plaintext_segments, recover_segments)
from protocols import SessionParameters, run_memory_session
from protocol_helpers import quantize, random_data

# m = 10 parties, l = 2, t = 1: decoding needs 2l+2t-1 = 5, so up to 6 rounds whose
# responding sets strictly shrink; g has degree 4 (5 unknown coefficients).
M, DIM, BOUND, SCALE = 10, 4, 1.0, 6
PARAMS = SessionParameters(dim=DIM, bound=BOUND, scale_bits=SCALE, segments=2,
                           noise_segments=1)


def equivocation_data(seed=3):
    return random_data([2] * M, DIM, seed=seed)


def truth(data):
    rows = np.concatenate(list(data.values()))
    return plaintext_segments(quantize(rows, BOUND, SCALE), 2)


def attacker(schedule):
    names = [f"party-{i}" for i in range(M)]
    views = equivocation_views(names, PARAMS.min_responders(M), schedule)

    def make(*args, **kwargs):
        return EquivocatingCoordinator(*args, views=views, **kwargs)
    return make, views


def test_the_attack_schedule_respects_the_honest_checks():
    # Every view keeps >= 5 parties and every party's set strictly shrinks each round:
    # only masks bound to the exact view can stop this attack.
    names = [f"party-{i}" for i in range(M)]
    views = equivocation_views(names, 5, "shrinking")
    assert len(views) == 6
    for before, after in zip(views, views[1:]):
        for name in names:
            assert name in after[name] and len(after[name]) >= 5
            assert set(after[name]) < set(before[name])
    # different parties are shown different sets in the same round
    assert len({tuple(v) for v in views[1].values()}) > 1


def test_equivocated_responding_sets_reveal_nothing_beyond_d_in_memory():
    data = equivocation_data()
    make, views = attacker("shrinking")
    outcome, transcript = run_memory_session(data, PARAMS, coordinator_class=make)
    coordinator = transcript.coordinator
    assert len(coordinator.round_sums) == len(views) == 6  # the parties took part
    recovered = recover_segments(coordinator)
    assert recovered is not None  # the rounds determine g: only the masks protect it
    expected = truth(data)
    for got, want in zip(recovered, expected):
        assert not np.array_equal(np.triu(got), np.triu(want))
    # not even one off-diagonal entry of a segment matrix comes out right (by chance:
    # each is uniform in GF(p), p ~ 2^20 or more)
    iu = np.triu_indices(2 * M, 1)
    assert sum(int((g[iu] == w[iu]).sum()) for g, w in zip(recovered, expected)) <= 2


@pytest.mark.network
def test_equivocated_responding_sets_reveal_nothing_beyond_d_over_grpc():
    # The parties are separate processes (mutual TLS); the attacker is the coordinator
    # state machine behind the real gRPC server.
    from protocols._grpc_coordinator import CoordinatorServer
    from protocols._grpc_local import LocalSession
    from protocols._tls import coordinator_credentials

    data = equivocation_data(seed=4)
    make, views = attacker("shrinking")
    with LocalSession(data, PARAMS, deadline=60) as local:
        config = local.config
        coordinator = make(config.session_id, PARAMS, config.party_names,
                           {e.name: e.identity_public_key for e in config.parties})
        server = CoordinatorServer(coordinator, config.deadlines,
                                   credentials=coordinator_credentials(config),
                                   config=config).start()
        try:
            for name in local.names:
                local.start_party(name, server.port)
            server.run(poll=lambda: local.watch(server))
        finally:
            server.stop()
        codes = {n: p.wait(timeout=60) for n, p in local.processes.items()}
    assert len(coordinator.round_sums) == 6 and set(codes.values()) == {0}
    recovered = recover_segments(coordinator)
    assert recovered is not None
    for got, want in zip(recovered, truth(data)):
        assert not np.array_equal(np.triu(got), np.triu(want))
