"""Integrity checks wired into the protocol (issue 10), in memory.

The parties are the real state machines; a deviating party is the same test fault as the
gRPC party process's (``protocols._faults.corrupt``): ``corrupt-upload`` (wrong
evaluations), ``bad-share:RECEIVER`` (a share off the sender's polynomial),
``collude:PEER`` (two parties whose errors cancel in the first parity check). Every
expected value is computed independently: plaintext distances with Python integers,
parity rows and decoding weights from Python-int Lagrange formulas.
"""

from __future__ import annotations

import logging
from dataclasses import replace

import numpy as np
import pytest

from finite_field import AuthenticationError, DeviationError, IntegrityError, ParameterError, PeerError, ProtocolError
from protocols import Coordinator, SessionParameters, run_memory_session
from protocols._faults import FAULT_STRIDE
from protocols._memory import Transcript
from oracles import parity_rows
from protocol_helpers import lagrange_weights, plaintext_sq_distances, random_data

pytestmark = pytest.mark.timeout(600)

BOUND, SCALE = 1.0, 8


def rows(data):
    return np.concatenate(list(data.values()))


def params(**changes):
    return SessionParameters(dim=3, bound=BOUND, scale_bits=SCALE, **changes)


def exact(outcome, data, scale=SCALE):
    return np.array_equal(outcome.integer, plaintext_sq_distances(rows(data), BOUND, scale))


def uploads_by_tile(transcript, round_=None):
    """{(round, prime index, tile index): {sender: int64 tile}} from a recorded transcript."""
    out = {}
    for message in transcript.of_kind("tile"):
        tile = message.envelope().tile
        if round_ is not None and tile.round != round_:
            continue
        values = np.frombuffer(tile.values, dtype="<u4").astype(np.int64)
        out.setdefault((tile.round, tile.prime_index, tile.tile_index), {})[tile.sender] = \
            (tile.row_start, values)
    return out


def independent_syndromes_and_sum(transcript, outcome, round_):
    """(every syndrome is zero, c.U equals the plaintext D) recomputed with Python ints."""
    coordinator = transcript.coordinator
    plan, names = coordinator.plan, coordinator.names
    responders = sorted(outcome.responders, key=names.index)
    all_zero, sums_ok = True, True
    for (r, k, index), uploads in uploads_by_tile(transcript, round_).items():
        code = plan.codes[k]
        p = code.prime
        points = [code.betas[names.index(x)] for x in responders]
        checks = len(responders) - plan.min_responders
        c = [sum(w) % p for w in zip(*[lagrange_weights(points, a, p)
                                        for a in code.alphas[:code.segments]])]
        mu = parity_rows(points, checks, p)
        stacked = np.stack([uploads[x][1] for x in responders]).astype(object)
        for row in mu:
            syndrome = sum(int(w) * stacked[j] for j, w in enumerate(row)) % p
            all_zero &= not np.any(syndrome)
        total = np.array(sum(int(w) * stacked[j] for j, w in enumerate(c)) % p, dtype=np.int64)
        a = uploads[responders[0]][0]
        n = coordinator.n_total
        expected = outcome.integer[a:a + total.size // (n - a), a:].reshape(-1) % p
        sums_ok &= np.array_equal(total, expected)
    return all_zero, sums_ok


# -- honest sessions ----------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["masked", "transparent"])
@pytest.mark.parametrize("scale, n_primes", [(8, 1), (16, 2)])
def test_honest_sessions_have_every_syndrome_exactly_zero_over_many_seeds(mode, scale,
                                                                          n_primes):
    for seed in range(12 if n_primes == 1 else 5):
        m = 4 + seed % 4  # r = 1..4 checks
        data = random_data([2 + (seed + i) % 3 for i in range(m)], 4, seed=seed)
        session = SessionParameters(dim=4, bound=BOUND if scale == 8 else 8.0,
                                    scale_bits=scale, mode=mode)
        outcome, transcript = run_memory_session(data, session, record=True)
        assert len(outcome.parameters["primes"]) == n_primes
        assert np.array_equal(outcome.integer, plaintext_sq_distances(
            rows(data), session.bound, scale))
        assert outcome.deviations == [] and outcome.round == 1
        assert outcome.integrity.startswith(f"checked: s = {m - 3} ")
        zero, sums = independent_syndromes_and_sum(transcript, outcome, 1)
        assert zero and sums, seed
        for party in transcript.parties.values():
            assert list(party.result.deviations) == []
            assert party.result.integrity == outcome.integrity


def test_masked_integrity_uploads_are_not_the_raw_evaluations_and_seeds_stay_sealed():
    from finite_field import cross_sq_distances

    data = random_data([3, 2, 4, 3, 2], 3, seed=5)
    outcome, transcript = run_memory_session(data, params(), record=True)
    assert exact(outcome, data)
    p = outcome.parameters["primes"][0]
    uploads = uploads_by_tile(transcript, 1)
    n = transcript.coordinator.n_total
    for name, party in transcript.parties.items():
        g = cross_sq_distances(party.held[0], party.held[0], p)
        for (_, k, _), tile in uploads.items():
            a, values = tile[name]
            raw = g[a:a + values.size // (n - a), a:].reshape(-1)
            if k == 0:  # masked: (almost) no entry equals the raw evaluation
                assert np.mean(values == raw) < 0.05
    # every seed travelled only inside AES-GCM: no recorded byte string contains one
    seeds = [s for party in transcript.parties.values() for s in party._seeds.values()]
    assert len(seeds) >= 5
    blob = b"".join(m.data for m in transcript.messages)
    assert transcript.of_kind("group_seed") and not any(s in blob for s in seeds)


def test_integrity_off_keeps_the_weighted_pairwise_uploads():
    data = random_data([3, 2, 4, 3, 2], 3, seed=6)
    outcome, transcript = run_memory_session(data, params(integrity="off"), record=True)
    assert exact(outcome, data) and outcome.integrity == "off"
    assert transcript.of_kind("group_seed") == []
    # the plain sum of the uploads is D (weighted uploads with cancelling pairwise masks)
    p = outcome.parameters["primes"][0]
    for (_, k, _), tile in uploads_by_tile(transcript, 1).items():
        total = sum(v for _, v in tile.values()) % p
        a = next(iter(tile.values()))[0]
        n = transcript.coordinator.n_total
        assert np.array_equal(total, outcome.integer[a:a + total.size // (n - a), a:]
                              .reshape(-1) % p)


def test_no_redundancy_says_so_once_loudly(caplog):
    data = random_data([3, 2, 4], 3, seed=7)  # m = K = 3: r = 0
    with caplog.at_level(logging.WARNING, logger="protocols"):
        outcome, _ = run_memory_session(data, params())
    assert exact(outcome, data)
    assert outcome.integrity.startswith("unchecked: r = 0")
    loud = [r.getMessage() for r in caplog.records if "NO INTEGRITY CHECK" in r.getMessage()]
    assert len(loud) == 1  # one process: said once, by the coordinator, not by each party
    assert loud[0].startswith("session ")
    unchecked = [r for r in caplog.records if "NO INTEGRITY CHECK" in r.getMessage()]
    assert [r.levelname for r in unchecked] == ["WARNING"]
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="protocols"):
        run_memory_session(data, params())     # a second session in the same process
    again = [r for r in caplog.records if "NO INTEGRITY CHECK" in r.getMessage()]
    assert len(again) == 4 and {r.levelname for r in again} == {"DEBUG"}
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="protocols"):
        run_memory_session(data, params(integrity="off"))
    assert not [r for r in caplog.records if "NO INTEGRITY CHECK" in r.getMessage()]


# -- deviating parties ----------------------------------------------------------------------

def _run(m, faults, integrity, mode="masked", seed=0, adversaries=None):
    data = random_data([3 + (i % 3) for i in range(m)], 3, seed=seed)
    seen = Transcript()
    try:
        outcome, _ = run_memory_session(data, params(integrity=integrity, mode=mode,
                                                     adversaries=adversaries),
                                        faults=faults, observe=seen)
    except ProtocolError as error:
        return data, None, error, seen
    return data, outcome, None, seen


@pytest.mark.parametrize("mode", ["masked", "transparent"])
def test_a_wrong_upload_is_corrected_and_named_in_the_result_of_every_party(mode):
    for seed in range(3):
        data, outcome, error, seen = _run(5, {"party-1": "corrupt-upload"}, "correct", mode,
                                          seed)
        assert error is None and exact(outcome, data)
        [deviation] = outcome.deviations
        assert deviation["named"] == ["party-1"] and deviation["action"] == "corrected"
        assert outcome.responders == list(data) and outcome.round == 1
        for party in seen.parties.values():
            [message] = party.result.deviations
            assert list(message.named) == ["party-1"] and message.action == "corrected"


@pytest.mark.parametrize("mode", ["masked", "transparent"])
def test_a_wrong_upload_under_detect_is_excluded_and_the_rerun_is_exact(mode):
    data, outcome, error, seen = _run(5, {"party-3": "corrupt-upload"}, "detect", mode,
                                      adversaries=1)
    assert error is None and exact(outcome, data)
    assert outcome.round == 2 and "party-3" not in outcome.responders
    [deviation] = outcome.deviations
    assert deviation["named"] == ["party-3"] and deviation["action"] == "excluded"
    assert outcome.integrity.startswith("checked: s = 1 ")  # the rerun is checked too
    for party in seen.parties.values():
        assert [list(d.named) for d in party.result.deviations] == [["party-3"]]


def test_a_wrong_upload_with_one_check_is_detected_and_nothing_is_returned():
    # m = K + 1: one check detects but cannot locate; no one is named, nothing returned
    # ("correct" cannot correct even one deviator with one check: refused at load)
    with pytest.raises(ParameterError, match=r"r >= 2A = 2"):
        _run(4, {"party-2": "corrupt-upload"}, "correct")
    for integrity in ("detect",):
        data, outcome, error, seen = _run(4, {"party-2": "corrupt-upload"}, integrity)
        assert outcome is None and isinstance(error, DeviationError)
        assert isinstance(error, IntegrityError)
        assert error.named == () and error.suspects == ()
        assert "could not be located" in str(error) and error.phase == "decode"
        assert seen.coordinator.outcome is None
        for party in seen.parties.values():
            assert party.result is None and party.labels is None and party.phase == "failed"


@pytest.mark.parametrize("mode", ["masked", "transparent"])
def test_a_share_off_the_polynomial_to_one_recipient_leaves_the_suspect_pair(mode):
    # errors at one evaluator, confined to the sender's rows: sender or recipient
    data, outcome, error, seen = _run(5, {"party-1": "bad-share:party-3"}, "correct", mode)
    assert error is None and exact(outcome, data)
    [deviation] = outcome.deviations
    assert deviation["named"] == [] and deviation["suspects"] == [["party-1"], ["party-3"]]
    for party in seen.parties.values():
        [message] = party.result.deviations
        assert [list(s.parties) for s in message.suspects] == [["party-1"], ["party-3"]]
        assert list(message.named) == []
    # under detect with A = 1 (radius 1: located): the pair cannot be told apart, abort
    data, outcome, error, seen = _run(5, {"party-1": "bad-share:party-3"}, "detect", mode,
                                      adversaries=1)
    assert outcome is None and isinstance(error, DeviationError)
    assert error.named == () and error.suspects == (("party-1",), ("party-3",))
    assert all(p.result is None for p in seen.parties.values())
    # with one more party still: a suspect is never excluded (one of them is innocent), so
    # the session ends with the pair as suspects rather than excluding an honest party
    data, outcome, error, seen = _run(6, {"party-1": "bad-share:party-3"}, "detect", mode,
                                      adversaries=1)
    assert outcome is None and isinstance(error, DeviationError)
    assert error.named == () and error.suspects == (("party-1",), ("party-3",))


def test_colluding_errors_cancel_in_the_first_check_and_are_caught_by_the_second():
    faults = {"party-1": "collude:party-4", "party-4": "collude:party-1"}
    data = random_data([3 + (i % 3) for i in range(7)], 3, seed=0)
    # transparent: the errors are visible, check that they cancel in mu_1 and not in mu_2
    outcome, transcript = run_memory_session(data, params(mode="transparent",
                                                          integrity="correct", adversaries=2),
                                             faults=faults, record=True)
    assert exact(outcome, data)
    [deviation] = outcome.deviations
    assert deviation["named"] == ["party-1", "party-4"]
    coordinator = transcript.coordinator
    code = coordinator.plan.codes[0]
    p = code.prime
    points = [code.betas[j] for j in range(7)]
    mu = parity_rows(points, 2, p)
    honest = {name: party for name, party in transcript.parties.items()}
    from finite_field import cross_sq_distances
    n = coordinator.n_total
    for (_, k, _), tile in uploads_by_tile(transcript, 1).items():
        if k:
            continue
        errors = []
        for j, name in enumerate(data):
            a, values = tile[name]
            g = cross_sq_distances(honest[name].held[0], honest[name].held[0], p)
            raw = g[a:a + values.size // (n - a), a:].reshape(-1)
            errors.append(((values - raw) % p).astype(object))
        assert np.count_nonzero(errors[1]) and np.count_nonzero(errors[4])
        assert np.count_nonzero(errors[1]) == len(errors[1][::FAULT_STRIDE])
        first = sum(mu[0][j] * errors[j] for j in range(7)) % p
        second = sum(mu[1][j] * errors[j] for j in range(7)) % p
        assert not np.any(first) and np.count_nonzero(second) == np.count_nonzero(errors[1])
    # masked, both policies (two colluders: A = 2 declared; r = 4 = 2A)
    for integrity, action in (("correct", "corrected"), ("detect", "excluded")):
        data2, outcome, error, seen = _run(7, faults, integrity, adversaries=2)
        assert error is None and exact(outcome, data2)
        assert outcome.deviations[0]["named"] == ["party-1", "party-4"]
        assert outcome.deviations[0]["action"] == action


def test_colluding_pair_beyond_the_radius_aborts_without_naming_anyone():
    # m = 5: s = 2 checks; two wrong evaluators per entry: with the declared A = 2 (detect:
    # radius 0) detected, not located; with A = 1 (one step past the bound: radius 1) they
    # are not located either (or, located, explain nothing within A): never a result,
    # never an innocent named
    faults = {"party-1": "collude:party-4", "party-4": "collude:party-1"}
    for integrity, adversaries in (("correct", 1), ("detect", 1), ("detect", 2)):
        data, outcome, error, seen = _run(5, faults, integrity, adversaries=adversaries)
        assert outcome is None and isinstance(error, DeviationError)
        assert error.named == () and "could not be located" in str(error)
        assert all(p.result is None for p in seen.parties.values())


# -- the coordinator relays seeds it cannot read --------------------------------------------

def test_a_tampered_group_seed_aborts_the_session():
    data = random_data([3, 2, 4, 3, 2], 3, seed=8)
    tampered = []

    def tamper(dest, env):
        if env.HasField("group_seed") and not tampered:
            box = bytearray(env.group_seed.ciphertext)
            box[0] ^= 1
            env.group_seed.ciphertext = bytes(box)
            tampered.append(dest)
        return env
    seen = Transcript()
    with pytest.raises(PeerError) as info:
        run_memory_session(data, params(), tamper=tamper, observe=seen)
    assert info.value.party == tampered[0] and "authentication" in str(info.value)
    assert isinstance(seen.parties[tampered[0]].error, AuthenticationError)
    assert all(p.result is None for p in seen.parties.values())


def test_a_group_seed_moved_to_another_group_or_round_is_refused():
    data = random_data([3, 2, 4, 3, 2], 3, seed=9)
    moved = []

    def tamper(dest, env):
        if env.HasField("group_seed") and not moved:
            env.group_seed.round += 1  # a seed for a round that has not started
            moved.append(dest)
        return env
    seen = Transcript()
    with pytest.raises(PeerError):
        run_memory_session(data, params(), tamper=tamper, observe=seen)
    assert seen.parties[moved[0]].phase == "failed"
    assert "does not fit this round" in str(seen.parties[moved[0]].error)


def test_the_coordinator_refuses_a_seed_outside_the_public_groups():
    data = random_data([3, 2, 4, 3, 2], 3, seed=10)

    class Forging(Coordinator):
        def _on_group_seed(self, sender, msg):
            msg.members.append("party-4") if "party-4" not in msg.members else None
            return super()._on_group_seed(sender, msg)

    with pytest.raises(PeerError) as info:
        run_memory_session(data, params(), coordinator_class=Forging)
    assert "does not fit" in str(info.value) and info.value.phase == "evaluation"


def test_equivocated_responding_sets_with_integrity_on_stop_at_the_group_seeds():
    # The issue-9 attack (each party shown its own B) against integrity masks: the seeds
    # are bound to the view, so parties shown different sets refuse each other's seeds;
    # only the honest first round completes and nothing beyond D is recoverable.
    from omnifc.audit._active import (EquivocatingCoordinator, equivocation_views,
                                      recover_segments)

    m = 10
    session = SessionParameters(dim=4, bound=1.0, scale_bits=6, segments=2)
    names = [f"party-{i}" for i in range(m)]
    views = equivocation_views(names, session.min_responders(m), "shrinking")

    def make(*args, **kwargs):
        return EquivocatingCoordinator(*args, views=views, **kwargs)
    seen = Transcript()
    with pytest.raises(ProtocolError):
        run_memory_session(random_data([2] * m, 4, seed=3), session, coordinator_class=make,
                           observe=seen)
    assert len(seen.coordinator.round_sums) == 1  # the honest round: D only
    assert recover_segments(seen.coordinator) is None
    failed = [p for p in seen.parties.values() if p.phase == "failed"]
    assert failed and all(p.result is None for p in seen.parties.values())
    assert any(isinstance(p.error, AuthenticationError) for p in failed)


def test_session_parameters_validate_integrity():
    from finite_field import ParameterError

    with pytest.raises(ParameterError, match="integrity must be one of"):
        params(integrity="maybe")
    assert params().integrity == "detect"
    # a roster whose parameters differ from a party's own (integrity) is refused
    data = random_data([3, 2, 4, 3], 3, seed=11)

    class Lying(Coordinator):
        def _send_roster(self):
            out = super()._send_roster()
            for _, env in out:
                env.roster.parameters.integrity = "off"
            return out
    with pytest.raises(PeerError):
        run_memory_session(data, params(), coordinator_class=Lying)


def test_a_result_is_never_half_returned_when_a_rerun_is_impossible():
    data, outcome, error, seen = _run(4, {"party-0": "corrupt-upload"}, "detect")
    assert outcome is None and seen.coordinator.outcome is None
    assert seen.coordinator.phase == "failed"
    for party in seen.parties.values():
        assert party.labels is None and party.result is None
        assert party.error.phase == "decode"


def test_the_session_config_carries_integrity_validated_and_fingerprinted(tmp_path, caplog):
    from finite_field import ParameterError
    from protocols import generate_certificates, load_session_config
    from protocols._grpc_coordinator import parameters_from_config

    with pytest.raises(ParameterError, match=r"\[session\] adversaries: .*r >= 2A = 2"):
        generate_certificates(tmp_path / "four", ["a", "b", "c", "d"],  # r = 1
                              coordinator_address="127.0.0.1:0", integrity="correct")
    certs = generate_certificates(tmp_path / "s", ["a", "b", "c", "d", "e"],
                                  coordinator_address="127.0.0.1:0", integrity="correct")
    config = load_session_config(certs.config)
    assert config.integrity == "correct"
    assert 'integrity = "correct"' in certs.config.read_text()
    assert "adversaries = 1 " in certs.config.read_text()  # stated: floor(r/2) = 1
    assert parameters_from_config(config).integrity == "correct"
    assert parameters_from_config(config).adversaries == config.adversaries == 1
    off = config.with_(integrity="off", adversaries=0)  # a file states A: 0 with "off"
    assert off.fingerprint != config.fingerprint  # every participant agrees on it
    with pytest.raises(ParameterError, match="integrity must be one of"):
        config.with_(integrity="sometimes")
    text = certs.config.read_text().replace('integrity = "correct"', 'integrity = "never"')
    bad = tmp_path / "bad.toml"
    bad.write_text(text)
    with pytest.raises(ParameterError, match=r"\[session\] integrity must be one of"):
        load_session_config(bad)
    # an old config without the key means the default
    old = tmp_path / "old.toml"
    old.write_text("\n".join(line for line in certs.config.read_text().splitlines()
                             if not line.startswith("integrity")))
    assert load_session_config(old).integrity == "detect"


def test_serve_and_join_print_a_notice_when_nothing_can_be_checked(tmp_path, capsys):
    from omnifc.cli.cmd_session import announce_session
    from protocols import generate_certificates, load_session_config

    three = load_session_config(generate_certificates(
        tmp_path / "k", ["a", "b", "c"], coordinator_address="127.0.0.1:0").config)
    announce_session(three, "coordinator")
    assert "no integrity check is possible: 3 parties" in capsys.readouterr().out
    four = load_session_config(generate_certificates(
        tmp_path / "r", ["a", "b", "c", "d"], coordinator_address="127.0.0.1:0").config)
    announce_session(four, "a")
    assert "integrity: detect, A = 1 of r = 1 redundant: every deviation by up to 1 party" \
        in capsys.readouterr().out
    announce_session(four.with_(integrity="off", adversaries=0), "a")
    assert 'integrity = "off"' in capsys.readouterr().out


def test_the_coordinator_keeps_running_sums_not_every_upload():
    # m = 7, s = 4: at most s + 1 = 5 uint32 arrays per open tile and prime, fewer than
    # |B| = 7 uploads, and nothing left once every tile is decoded
    data = random_data([30] * 7, 3, seed=12)
    peak = []

    class Watching(Coordinator):
        def _accumulate(self, sender, k, index, values):
            super()._accumulate(sender, k, index, values)
            peak.append(sum(acc.sums.nbytes for acc in self._open_sums._open.values()))

    session = replace(params(), chunk_bytes=4096)  # many tiles
    outcome, transcript = run_memory_session(data, session, coordinator_class=Watching)
    assert exact(outcome, data)
    n = transcript.coordinator.n_total
    tiles = transcript.coordinator.tiles
    entries = sum((b - a) * (n - a) for a, b in tiles)
    assert len(tiles) > 10 and max(peak) <= 5 * entries * 4
    assert max(peak) < 7 * entries * 4 and len(transcript.coordinator._open_sums) == 0
    # the memory transport interleaves the parties' uploads tile by tile (issue 11): one
    # tile is open at a time, so the running sums never exceed those of the largest tile
    assert max(peak) == 5 * max((b - a) * (n - a) for a, b in tiles) * 4


def test_every_fault_is_detected_over_many_seeds():
    # never an unflagged result, never an innocent named alone, D exact when returned
    cases = [(5, {"party-2": "corrupt-upload"}, {"party-2"}),
             (6, {"party-0": "bad-share:party-4"}, {"party-0", "party-4"}),
             (7, {"party-2": "collude:party-6", "party-6": "collude:party-2"},
              {"party-2", "party-6"})]
    for seed in range(6):
        for m, faults, culprits in cases:
            for integrity in ("detect", "correct"):
                data, outcome, error, _ = _run(m, faults, integrity, seed=seed)
                if outcome is None:
                    assert isinstance(error, DeviationError)
                    assert set(error.named) <= culprits
                    continue
                assert exact(outcome, data) and outcome.deviations, (seed, faults)
                for deviation in outcome.deviations:
                    assert set(deviation["named"]) <= culprits
                    assert all(set(s) & culprits for s in deviation["suspects"])


def test_the_public_api_passes_integrity_through():
    import omnifc

    data = random_data([3, 2, 4, 3, 2], 3, seed=13)
    result = omnifc.secure_distance_matrix(data, bound=BOUND, scale_bits=SCALE,
                                           integrity="correct")
    assert np.array_equal(result.integer_distances,
                          plaintext_sq_distances(rows(data), BOUND, SCALE))
    assert result.parameters["integrity"] == "correct"
    assert result.parameters["integrity_status"].startswith("checked: s = 2 ")
    assert result.parameters["deviations"] == []
    off = omnifc.secure_distance_matrix(data, bound=BOUND, scale_bits=SCALE, integrity="off")
    assert off.parameters["integrity_status"] == "off"
    model = omnifc.FederatedClustering("kmeans", 2, bound=BOUND, scale_bits=SCALE,
                                       integrity="off").fit(data)
    assert model.distance_result_.parameters["integrity"] == "off"
