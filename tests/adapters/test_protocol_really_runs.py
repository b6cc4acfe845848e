"""The secure paths of the adapters really run the protocol (issue 14).

The adapter tests compare secure results with the plaintext path, which a plaintext
shortcut also satisfies. Here a spy replaces the in-memory transport entry point
(``protocols.run_memory_session``): it counts the sessions, runs each one for real with
the coordinator's transcript recorded, and checks in that transcript that the coordinator
received only ciphertext share chunks and group seeds and masked tiles: no party's
quantized row, decrypted share or group seed appears in anything it received; no tile
entry equals the party's evaluation g(beta_j), unweighted or weighted by c_j (with
integrity checks a tile is U_j = g(beta_j) + M_j, without c_j g(beta_j) + mask_j), or its
plaintext secure-sum contribution; and the uploads decode to the plaintext D mod p. The
adapter's result must be the session's result."""

from __future__ import annotations

import numpy as np
import pytest

import protocols
import protocols._memory
from omnifc.adapters import clove, fmcl, raw
from omnifc.adapters._common import secure_group_sums

#: What the coordinator may receive from parties in masked mode: signed hellos, signed
#: roster confirmations, AES-GCM share chunks, ready notes, AES-GCM group seeds (integrity
#: checks) and masked tiles.
ALLOWED_KINDS = {"hello", "confirmation", "share", "ready", "group_seed", "tile"}


class Spy:
    """Wraps ``run_memory_session``: every session runs, recorded, and is kept here."""

    def __init__(self, original):
        self.original = original
        self.sessions = []   # (parameters, party_data, outcome, transcript)

    def __call__(self, party_data, parameters, **options):
        options["record"] = True
        outcome, transcript = self.original(party_data, parameters, **options)
        self.sessions.append((parameters, party_data, outcome, transcript))
        return outcome, transcript

    def kinds(self):
        return [parameters.kind for parameters, *_ in self.sessions]


@pytest.fixture
def spy(monkeypatch):
    spy = Spy(protocols._memory.run_memory_session)
    monkeypatch.setattr(protocols, "run_memory_session", spy)
    monkeypatch.setattr(protocols._memory, "run_memory_session", spy)
    return spy


def _packed(values) -> bytes:
    return np.ascontiguousarray(values, dtype="<u4").tobytes()


def _sq_distances(x, y, p):
    """Squared distances of the rows of x and y mod p, with Python integers."""
    x, y = np.asarray(x, dtype=object), np.asarray(y, dtype=object)
    diff = x[:, None, :] - y[None, :, :]
    return (diff * diff).sum(axis=2) % p


def _checked(parameters, responders: int) -> bool:
    """Whether the round uploads with integrity checks: r = |B| - (2l+2t-1) >= 1."""
    need = 2 * parameters.segments + 2 * parameters.noise_segments - 1
    return parameters.integrity != "off" and responders - need >= 1


def assert_coordinator_saw_no_plaintext(session):
    parameters, party_data, outcome, transcript = session
    assert parameters.mode == "masked"
    received = transcript.messages
    kinds = {m.kind for m in received}
    assert kinds <= ALLOWED_KINDS, kinds
    assert "tile" in kinds and (parameters.kind == "sum" or "share" in kinds)
    primes = [int(p) for p in outcome.parameters["primes"]]
    blob = b"".join(m.data for m in received)
    for name, party in transcript.parties.items():
        rows = np.asarray(party.quantized, dtype=np.int64).reshape(party.quantized.shape[0], -1)
        for row in rows:
            if np.count_nonzero(row) == 0 or row.size < 2:
                continue  # too short or all zero to be a meaningful witness
            for p in primes:
                assert _packed(row % p) not in blob, f"a plaintext row of {name} was sent"
        # The shares each party decrypted never crossed the coordinator in the clear.
        for k, held in enumerate(getattr(party, "held", [])):
            for share in np.asarray(held)[:: max(1, len(held) // 8)]:
                assert _packed(share) not in blob, f"a plaintext share reached {name}"
        # Nor did the integrity group seeds (AES-GCM ciphertext only).
        for seed in getattr(party, "_seeds", {}).values():
            assert seed not in blob, f"a plaintext group seed of {name} was sent"
    tiles = [m for m in received if m.kind == "tile"]
    if parameters.kind == "sum":  # every tile is masked: no entry equals the plaintext one
        assert "group_seed" not in kinds
        for m in tiles:
            tile = m.envelope().tile
            p = primes[tile.prime_index]
            plain = transcript.parties[m.sender].quantized.reshape(-1)[
                tile.row_start:tile.row_stop] % p
            seen = np.frombuffer(tile.values, dtype="<u4").astype(np.int64)
            assert seen.shape == plain.shape
            assert np.count_nonzero(seen == plain) <= max(1, plain.size // 100), \
                f"an unmasked sum tile from {m.sender}"
        return
    assert_distance_tiles_masked(parameters, transcript, tiles, primes)


def assert_distance_tiles_masked(parameters, transcript, tiles, primes):
    """Every distance tile is U_j = g(beta_j) + M_j (checks) or c_j g(beta_j) + mask_j: no
    entry reveals the party's evaluation g(beta_j), weighted or not; yet the uploads are
    what D is decoded from (sum_j c_j U_j, resp. sum_j U_j, is the plaintext D mod p)."""
    names = list(transcript.parties)
    any_party = transcript.parties[names[0]]
    quantized = np.concatenate([np.asarray(transcript.parties[n].quantized, dtype=np.int64)
                                .reshape(transcript.parties[n].quantized.shape[0], -1)
                                for n in names])
    rounds = {m.envelope().tile.round for m in tiles}
    assert len(rounds) == 1, rounds  # an honest run: one round, no rerun
    responders = [n for n in names if any(m.sender == n for m in tiles)]
    checked = _checked(parameters, len(responders))
    assert ("group_seed" in {m.kind for m in transcript.messages}) == checked
    position = [names.index(r) for r in responders]
    for k, p in enumerate(primes):
        weights = dict(zip(responders, (int(c) for c in
                                        any_party.plan.codes[k].decoding_weights(position))))
        uploads, evaluations = {}, {}   # (a, b) -> running sums mod p
        for m in tiles:
            tile = m.envelope().tile
            if tile.prime_index != k:
                continue
            a, b = tile.row_start, tile.row_stop
            held = transcript.parties[m.sender].held[k]
            g = _sq_distances(held[a:b], held[a:], p).astype(np.int64)
            seen = np.frombuffer(tile.values, dtype="<u4").astype(np.int64).reshape(g.shape)
            c = weights[m.sender]
            for what, plain in [("unweighted g(beta_j)", g), ("c_j g(beta_j)", c * g % p)]:
                assert np.count_nonzero(seen == plain) <= max(1, plain.size // 100), \
                    f"an unmasked tile ({what}) from {m.sender}"
            factor = c if checked else 1   # integrity uploads are unweighted
            uploads[a, b] = (uploads.get((a, b), 0) + factor * seen.astype(object)) % p
            evaluations[a, b] = (evaluations.get((a, b), 0) + c * g.astype(object)) % p
        assert uploads, f"no tile for prime {p}"
        for (a, b), total in uploads.items():
            plain_d = _sq_distances(quantized[a:b], quantized[a:], p)
            # The reference g(beta_j) is right: the weighted evaluations decode to D ...
            assert np.array_equal(evaluations[a, b], plain_d)
            # ... and so do the masked uploads the coordinator received.
            assert np.array_equal(total, plain_d), f"the uploads do not decode to D mod {p}"


def test_raw_adapter_runs_one_masked_session_and_returns_its_d(spy):
    rng = np.random.default_rng(0)
    parties = {"a": rng.normal(0, 1, (6, 3)), "b": rng.normal(1, 1, (5, 3)),
               "c": rng.normal(-1, 1, (4, 3))}
    result = raw.run(parties, bound=5.0, n_clusters=2, random_state=0)
    assert spy.kinds() == ["distance"]
    parameters, data, outcome, _ = spy.sessions[0]
    assert list(data) == list(parties)
    for name in parties:
        assert np.array_equal(np.asarray(data[name]), parties[name])
    assert np.array_equal(result.distances, outcome.values)
    assert_coordinator_saw_no_plaintext(spy.sessions[0])


def test_raw_adapter_plaintext_reference_runs_no_session(spy):
    parties = {"a": np.eye(3), "b": np.ones((2, 3)), "c": np.zeros((2, 3))}
    raw.run(parties, bound=2.0, n_clusters=2, secure=False)
    assert spy.sessions == []  # the spy sees the difference between the two paths


def test_fmcl_runs_two_masked_sessions_whose_results_it_combines(spy):
    clients, _ = fmcl.synthetic_domains(clients_per_domain=2, samples=60, seed=1)
    sig = [fmcl.signature(x, y, 10) for x, y in clients]
    means, weights = np.stack([s[0] for s in sig]), np.stack([s[1] for s in sig])
    secure = fmcl.secure_thermometer_distances(means, weights, resolution=8)
    assert spy.kinds() == ["distance", "distance"]
    # One party per client plus the public all-zero anchor row (the last party).
    for session, rows in zip(spy.sessions, (0, 1)):
        data = session[1]
        assert len(data) == len(clients) + 1
        expected = [fmcl.thermometer_rows(m, w, 8)[rows] for m, w in zip(means, weights)]
        for got, want in zip(list(data.values())[:-1], expected):
            assert np.array_equal(np.asarray(got).reshape(-1), np.asarray(want).reshape(-1))
        assert not np.asarray(list(data.values())[-1]).any()
    d_z, d_t = (session[2].values for session in spy.sessions)
    assert np.array_equal(secure, fmcl.fmcl_from_anchored(d_z, d_t, 8))
    # and the combination is the direct FMCL distance of the quantized signature.
    assert np.array_equal(secure, fmcl.quantized_fmcl_distances(means, weights, resolution=8))
    for session in spy.sessions:
        assert_coordinator_saw_no_plaintext(session)


def test_clove_round_runs_a_distance_session_and_a_secure_sum(spy):
    clients, _, _ = clove.linear_mixture(n_clusters=2, clients_per_cluster=3, dim=4,
                                         train_points=40, seed=0)
    start = clove.random_unit_models(2, 4, seed=0)
    run = clove.run_clove(clients, start, n_clusters=2, rounds=1)
    assert spy.kinds() == ["distance", "sum"]
    (_, _, d_outcome, _), (_, _, sum_outcome, _) = spy.sessions
    assert np.array_equal(run.distances[0], d_outcome.values)      # one party per client
    assert np.array_equal(run.costs[0], sum_outcome.values.reshape(run.costs[0].shape))
    for session in spy.sessions:
        assert_coordinator_saw_no_plaintext(session)


def test_secure_group_sums_is_one_masked_sum(spy):
    rows = np.array([[0.5, 0.25, 1.0], [0.75, 0.5, 0.0], [1.0, 1.0, 0.5], [0.25, 0.0, 0.75]])
    groups = np.array([1, 0, 1, 0])
    sums = secure_group_sums(rows, groups, bound=1.0, scale_bits=8, nonnegative=True)
    assert spy.kinds() == ["sum"]
    assert np.array_equal(sums.totals, [[1.0, 0.5, 0.75], [1.5, 1.25, 1.5]])
    assert np.array_equal(sums.totals, spy.sessions[0][2].values.reshape(2, 3))
    assert_coordinator_saw_no_plaintext(spy.sessions[0])
