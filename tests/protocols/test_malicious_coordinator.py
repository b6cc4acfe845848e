"""An actively malicious coordinator against real, unmodified parties.

Each test runs an attack a coordinator could mount by deviating from the protocol and
asserts that it fails: either the honest parties abort with a clear error, or what the
coordinator recovers is not the truth (checked against the plaintext). The attack code
lives in :mod:`omnifc.audit._active` (the audit runs the same attack).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from finite_field import AuthenticationError, InputError, IntegrityError, PeerError, ProtocolError
from omnifc.audit._active import (EquivocatingCoordinator, equivocation_views,
                                  plaintext_segments, recover_segments)
from protocols import Coordinator, SessionParameters, run_memory_session
from protocols._crypto import PROTOCOL_VERSION, EphemeralKey
from protocols._generated import omnifc_pb2 as pb
from protocols._identity import sign
from protocols._memory import Transcript
from protocols._messages import envelope
from protocols._party import hello_transcript
from protocol_helpers import Session, plaintext_sq_distances, quantize, random_data

# m = 10 parties, l = 2, t = 1: decoding needs 2l+2t-1 = 5, so up to 6 rounds whose
# responding sets strictly shrink; g has degree 4 (5 unknown coefficients).
M, DIM, BOUND, SCALE = 10, 4, 1.0, 6
PARAMS = SessionParameters(dim=DIM, bound=BOUND, scale_bits=SCALE, segments=2,
                           noise_segments=1)
# The equivocation attack targets the weighted pairwise masks (integrity="off"); with the
# integrity checks on, the masks come from group seeds bound to the view (tests below).
PAIRWISE = replace(PARAMS, integrity="off")


def equivocation_data(seed=3):
    return random_data([2] * M, DIM, seed=seed)


def truth(data):
    rows = np.concatenate(list(data.values()))
    return plaintext_segments(quantize(rows, BOUND, SCALE), 2)


def attacker(schedule):
    names = [f"party-{i}" for i in range(M)]
    views = equivocation_views(names, PAIRWISE.min_responders(M), schedule)

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
    outcome, transcript = run_memory_session(data, PAIRWISE, coordinator_class=make)
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
@pytest.mark.usefixtures("shared_party_server")
def test_equivocated_responding_sets_reveal_nothing_beyond_d_over_grpc():
    # The parties are separate processes (mutual TLS); the attacker is the coordinator
    # state machine behind the real gRPC server.
    from protocols._grpc_coordinator import CoordinatorServer
    from protocols._grpc_local import LocalSession
    from protocols._tls import coordinator_credentials

    data = equivocation_data(seed=4)
    make, views = attacker("shrinking")
    with LocalSession(data, PAIRWISE, deadline=60) as local:
        config = local.config
        coordinator = make(config.session_id, PAIRWISE, config.party_names,
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


# -- rounds ------------------------------------------------------------------------------

def test_rounds_beyond_the_strict_subset_rule_abort_every_party():
    # "pairings": after an honest round 1, every round tells each party B = everyone but
    # its partner in a new pairing; from round 3 on the sets do not shrink, so honest
    # parties refuse round 3 (without the rule, six rounds of this recover every segment
    # matrix when masks ignore the view).
    data = equivocation_data(seed=5)
    make, views = attacker("pairings")
    assert len(views) == 6
    seen = Transcript()
    with pytest.raises(PeerError) as info:
        run_memory_session(data, PAIRWISE, coordinator_class=make, observe=seen)
    assert "not a strict subset" in str(info.value) and info.value.phase == "evaluation"
    assert len(seen.coordinator.round_sums) <= 2
    assert recover_segments(seen.coordinator) is None
    for party in seen.parties.values():
        assert party.phase == "failed" and "strict subset" in str(party.error)
        assert party.error.party == "coordinator"


class _Replaying(Coordinator):
    """Sends every RoundStart twice (a replay) or repeats B in round 2."""

    mode = "replay"

    def _start_round(self, responders):
        out = super()._start_round(responders)
        if self.mode == "replay":
            return out + out
        again = pb.RoundStart(session_id=self.session_id, round=self.round + 1,
                              responders=responders)
        return out + [(dest, envelope(round_start=again)) for dest, _ in out]


@pytest.mark.parametrize("mode, expected", [("replay", "does not follow round 1"),
                                            ("same-set", "not a strict subset")])
def test_replayed_round_start_and_repeated_set_are_refused(mode, expected):
    data = random_data([2, 3, 2, 2], 3, seed=6)   # m = 4, l = t = 1: need 3

    def make(*args, **kwargs):
        coordinator = _Replaying(*args, **kwargs)
        coordinator.mode = mode
        return coordinator
    seen = Transcript()
    try:  # the coordinator may finish round 1 before the refusals reach it
        run_memory_session(data, SessionParameters(dim=3, bound=1.0, scale_bits=8),
                           coordinator_class=make, observe=seen)
    except PeerError as error:
        assert expected in str(error)
    for party in seen.parties.values():
        assert party.phase == "failed" and expected in str(party.error)
        assert party.result is None


def test_dropouts_shrink_the_set_and_the_honest_coordinator_stays_within_the_cap():
    # m = 6, l = t = 1 (need 3): two parties crash one after the other; the honest
    # coordinator retries with the remaining parties of B each time (strict subsets).
    data = random_data([2] * 6, 3, seed=7)
    # best effort (A = 0): the dropouts may take every check
    params = SessionParameters(dim=3, bound=1.0, scale_bits=8, adversaries=0)
    outcome, _ = run_memory_session(data, params, responders=[f"party-{i}" for i in range(5)],
                                    drop={"party-4": "evaluation"})
    assert outcome.round == 2 and outcome.responders == [f"party-{i}" for i in range(4)]
    rows = np.concatenate(list(data.values()))
    assert np.array_equal(outcome.integer, plaintext_sq_distances(rows, 1.0, 8))


# -- roster ------------------------------------------------------------------------------

def test_a_reordered_roster_is_refused_by_every_party():
    data = random_data([2, 3, 2], 3, seed=8)

    def reordered(session_id, parameters, names, pinned, **kwargs):
        return Coordinator(session_id, parameters, names[::-1], pinned, **kwargs)
    seen = Transcript()
    with pytest.raises(PeerError, match="in this order") as info:
        run_memory_session(data, SessionParameters(dim=3, bound=1.0, scale_bits=8),
                           coordinator_class=reordered, observe=seen)
    assert info.value.phase == "join"
    for party in seen.parties.values():
        assert party.phase == "failed" and "in this order" in str(party.error)
        assert not hasattr(party, "keys")  # nothing derived, nothing sent


def test_a_roster_with_a_duplicated_party_is_refused():
    data = random_data([2, 3, 2], 3, seed=8)
    session = Session(data, SessionParameters(dim=3, bound=1.0, scale_bits=8))
    hellos = session.hellos()
    out = []
    for name, hello in hellos.items():
        out = session.coordinator.receive(name, hello) or out
    roster = out[0][1]
    roster.roster.parties[2].CopyFrom(roster.roster.parties[1])
    with pytest.raises(PeerError, match="in this order"):
        list(session.parties["party-0"].receive(roster))


# -- replayed hellos, substituted keys, freshness -------------------------------------------

def _roster_substitution(replacement_for, target):
    """A coordinator that swaps hellos in the roster it sends to ``target``."""

    class Substituting(Coordinator):
        def _send_roster(self):
            out = super()._send_roster()
            changed = []
            for dest, env in out:
                if dest == target:
                    env = pb.Envelope.FromString(env.SerializeToString())
                    for entry in env.roster.parties:
                        if entry.hello.party_id in replacement_for:
                            entry.hello.CopyFrom(replacement_for[entry.hello.party_id])
                changed.append((dest, env))
            return changed
    return Substituting


def test_a_hello_replayed_from_an_earlier_run_is_never_accepted():
    # Run 1 of a session config (same session id, same identity keys) is recorded; in run
    # 2 the coordinator shows party-0 the roster with party-2's hello from run 1 (validly
    # signed) and everybody else the genuine one. The roster digest binds every hello, so
    # party-0 confirms another digest than the others: the session stops at the roster
    # confirmation, before any share is encrypted (before that step, party-0 sent party-2
    # shares encrypted to run 1's ephemeral key, and only party-1's AES-GCM check of
    # party-0's shares ended the session; tests/protocols/test_roster_confirmation.py).
    data = random_data([2, 3, 2], 3, seed=9)
    params = SessionParameters(dim=3, bound=1.0, scale_bits=8)
    identities = {name: Ed25519PrivateKey.generate() for name in data}
    _, run1 = run_memory_session(data, params, session_id="same-config", record=True,
                                 identities=identities)
    old = {m.sender: m.envelope().hello for m in run1.of_kind("hello")}
    seen = Transcript()
    with pytest.raises(PeerError) as info:
        run_memory_session(data, params, session_id="same-config", identities=identities,
                           coordinator_class=_roster_substitution({"party-2": old["party-2"]},
                                                                  "party-0"),
                           observe=seen, record=True)
    assert (info.value.party, info.value.phase) == ("party-0", "confirm")
    assert "another roster" in str(info.value)
    assert not seen.of_kind("share")
    assert [m.sender for m in seen.of_kind("confirmation")] == ["party-0"]  # refused at once
    assert all(p.phase == "failed" and not hasattr(p, "keys") for p in seen.parties.values())


def test_a_whole_roster_replayed_from_an_earlier_run_is_refused():
    data = random_data([2, 3, 2], 3, seed=9)
    params = SessionParameters(dim=3, bound=1.0, scale_bits=8)
    identities = {name: Ed25519PrivateKey.generate() for name in data}
    _, run1 = run_memory_session(data, params, session_id="same-config", record=True,
                                 identities=identities)
    old = {m.sender: m.envelope().hello for m in run1.of_kind("hello")}
    seen = Transcript()
    with pytest.raises(PeerError, match="own hello"):
        run_memory_session(data, params, session_id="same-config", identities=identities,
                           coordinator_class=_roster_substitution(old, "party-1"),
                           observe=seen)
    assert "own hello" in str(seen.parties["party-1"].error)


@pytest.mark.parametrize("how", ["unsigned", "signed-by-another-key"])
def test_substituted_ephemeral_keys_are_refused(how):
    data = random_data([2, 3, 2], 3, seed=10)
    params = SessionParameters(dim=3, bound=1.0, scale_bits=8)
    forged = pb.Hello()

    class Substituting(Coordinator):
        def _send_roster(self):
            hello = self.hellos["party-2"]
            forged.CopyFrom(hello)
            forged.ephemeral_public_key = EphemeralKey.generate().public_bytes
            if how == "signed-by-another-key":
                forged.signature = sign(Ed25519PrivateKey.generate(), hello_transcript(forged))
            self.hellos["party-2"] = forged
            return super()._send_roster()
    seen = Transcript()
    with pytest.raises(PeerError):
        run_memory_session(data, params, coordinator_class=Substituting, observe=seen)
    for name in ("party-0", "party-1"):
        error = seen.parties[name].error
        assert isinstance(error, AuthenticationError) and error.party == "party-2"
        assert error.phase == "join"


def test_ephemeral_keys_and_run_nonces_are_fresh_per_run_and_party():
    data = random_data([2, 3], 3, seed=11)
    data["party-2"] = data["party-0"]
    params = SessionParameters(dim=3, bound=1.0, scale_bits=8)
    identities = {name: Ed25519PrivateKey.generate() for name in data}
    hellos = []
    for _ in range(2):  # the same config twice
        _, run = run_memory_session(data, params, session_id="same", record=True,
                                    identities=identities)
        hellos += [m.envelope().hello for m in run.of_kind("hello")]
    assert len(hellos) == 6
    assert all(len(h.run_nonce) == 32 and len(h.ephemeral_public_key) == 32 for h in hellos)
    assert len({h.run_nonce for h in hellos}) == 6
    assert len({h.ephemeral_public_key for h in hellos}) == 6
    assert len({h.signature for h in hellos}) == 6


# -- fail closed ---------------------------------------------------------------------------

def test_garbage_in_range_tiles_end_the_session_with_an_integrity_error_everywhere():
    data = random_data([3, 2, 3], 3, seed=12)
    params = SessionParameters(dim=3, bound=1.0, scale_bits=8)

    class Garbage(Coordinator):  # as if party-1 uploaded uniformly random values < p
        def _on_tile(self, sender, tile, payload):
            if sender == "party-1":
                p = self.plan.primes[tile.prime_index]
                rng = np.random.default_rng(0)
                payload = rng.integers(0, p, len(payload) // 4).astype("<u4").tobytes()
            return super()._on_tile(sender, tile, payload)
    seen = Transcript()
    with pytest.raises(IntegrityError) as info:
        run_memory_session(data, params, coordinator_class=Garbage, observe=seen)
    assert info.value.phase == "decode" and "no-wrap bound" in str(info.value)
    assert seen.coordinator.outcome is None and seen.coordinator.phase == "failed"
    for party in seen.parties.values():
        assert party.phase == "failed" and party.labels is None and party.result is None
        assert party.error.phase == "decode" and "no-wrap bound" in str(party.error)


def test_an_exception_in_the_clustering_callback_aborts_the_session_everywhere():
    data = random_data([3, 2, 3], 3, seed=13)
    seen = Transcript()
    with pytest.raises(ProtocolError, match="clustering failed.*ZeroDivisionError"):
        run_memory_session(data, SessionParameters(dim=3, bound=1.0, scale_bits=8),
                           cluster=lambda d: 1 / 0, observe=seen)
    assert seen.coordinator.outcome is None
    for party in seen.parties.values():
        assert party.phase == "failed" and party.result is None
        assert "clustering failed" in str(party.error) and party.error.phase == "decode"


def test_a_party_blaming_another_party_is_blamed_itself():
    data = random_data([2, 3, 2], 3, seed=14)
    session = Session(data, SessionParameters(dim=3, bound=1.0, scale_bits=8))
    session.run_until("shares")
    report = envelope(error=pb.ErrorReport(session_id="test-session", reporter="party-0",
                                           party="party-2", phase="shares", kind="integrity",
                                           message="party-2 sent garbage"))
    with pytest.raises(PeerError) as info:
        session.coordinator.receive("party-1", report)  # authenticated as party-1
    assert info.value.party == "party-1"
    assert "reported by 'party-1' (its report names 'party-2')" in str(info.value)
    reports = session.coordinator.abort()
    assert {dest for dest, _ in reports} == set(data)
    assert all(env.error.party == "party-1" and env.error.phase == "shares"
               for _, env in reports)


def test_an_oversized_hello_is_refused_by_the_coordinator_before_allocating():
    data = random_data([2, 3, 2], 3, seed=15)
    session = Session(data, SessionParameters(dim=3, bound=1.0, scale_bits=8))
    hellos = session.hellos()
    hello = hellos["party-1"]
    hello.hello.n_rows = 1 << 44
    hello.hello.signature = sign(session.keys["party-1"], hello_transcript(hello.hello))
    session.coordinator.receive("party-0", hellos["party-0"])
    with pytest.raises(PeerError, match="max_rows_per_party") as info:
        session.coordinator.receive("party-1", hello)
    assert (info.value.party, info.value.phase) == ("party-1", "join")
    assert all(env.error.phase == "join" and "max_rows_per_party" in env.error.message
               for _, env in session.coordinator.abort())


def test_an_oversized_roster_is_refused_by_every_party_before_allocating():
    # A coordinator colluding with party-1 (which signs a hello claiming 2^44 rows) sends
    # it to the honest parties: they stop with a clear error instead of a MemoryError.
    data = random_data([2, 3, 2], 3, seed=16)
    session = Session(data, SessionParameters(dim=3, bound=1.0, scale_bits=8))
    hellos = session.hellos()
    big = pb.Hello()
    big.CopyFrom(hellos["party-1"].hello)
    big.n_rows = 1 << 44
    big.signature = sign(session.keys["party-1"], hello_transcript(big))
    roster = pb.Roster(session_id="test-session", protocol_version=PROTOCOL_VERSION,
                       parameters=session.coordinator.parameters.to_proto(
                           session.coordinator.plan))
    offset = 0
    for name in session.names:
        hello = big if name == "party-1" else hellos[name].hello
        roster.parties.add(hello=hello, row_offset=offset)
        offset += hello.n_rows
    for name in ("party-0", "party-2"):
        party = session.parties[name]
        with pytest.raises(PeerError, match="max_rows_per_party") as info:
            list(party.receive(envelope(roster=roster)))
        assert info.value.party == "coordinator"
        report = party.error_report(info.value)
        assert report.error.phase == "join" and "max_rows_per_party" in report.error.message


def test_total_row_cap_is_checked_too():
    data = random_data([2, 3, 2], 3, seed=17)
    params = SessionParameters(dim=3, bound=1.0, scale_bits=8, max_rows_per_party=3,
                               max_rows_total=6)
    with pytest.raises(PeerError, match="max_rows_total = 6"):
        run_memory_session(data, params)
    with pytest.raises(InputError, match="max_rows_per_party = 2"):
        run_memory_session(data, SessionParameters(dim=3, bound=1.0, scale_bits=8,
                                                   max_rows_per_party=2))


def test_transparent_mode_warns_at_coordinator_and_parties(caplog):
    data = random_data([2, 3, 2], 3, seed=18)
    with caplog.at_level("WARNING", logger="protocols"):
        run_memory_session(data, SessionParameters(dim=3, bound=1.0, scale_bits=8,
                                                   mode="transparent"))
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert sum("TRANSPARENT" in w for w in warnings) == 4  # coordinator + 3 parties


def test_an_unexpected_exception_in_a_party_becomes_an_error_report_naming_the_phase(
        monkeypatch):
    # A bug (here: the distance kernel raising) must not escape as a bare exception: the
    # party fails with a ProtocolError naming its phase and reports it.
    import protocols._party as party_module

    def broken(*args, **kwargs):
        raise MemoryError("simulated")
    monkeypatch.setattr(party_module.DistanceTiles, "tile", broken)
    data = random_data([2, 3, 2], 3, seed=19)
    seen = Transcript()
    with pytest.raises(PeerError, match="unexpected MemoryError") as info:
        run_memory_session(data, SessionParameters(dim=3, bound=1.0, scale_bits=8),
                           observe=seen)
    assert info.value.phase == "evaluation"
    for party in seen.parties.values():
        assert party.phase == "failed" and isinstance(party.error, ProtocolError)
        assert party.result is None


def test_garbage_in_a_secure_sum_is_an_integrity_error_naming_the_check():
    rng = np.random.default_rng(20)
    data = {f"party-{i}": rng.uniform(-1, 1, (1, 4)) for i in range(3)}
    params = SessionParameters(dim=4, bound=1.0, scale_bits=8, kind="sum")

    class Garbage(Coordinator):
        def _on_tile(self, sender, tile, payload):
            if sender == "party-2":
                p = self.plan.primes[tile.prime_index]
                payload = np.full(len(payload) // 4, p // 2, dtype="<u4").tobytes()
            return super()._on_tile(sender, tile, payload)
    seen = Transcript()
    with pytest.raises(IntegrityError, match="every decoded sum must lie in") as info:
        run_memory_session(data, params, coordinator_class=Garbage, observe=seen)
    assert info.value.phase == "decode" and seen.coordinator.outcome is None
    assert all(p.phase == "failed" and p.result is None for p in seen.parties.values())
