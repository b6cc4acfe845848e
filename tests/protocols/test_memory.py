"""The in-memory transport: exactness, dropouts, tampering and the coordinator's view."""

from __future__ import annotations

import numpy as np
import pytest

from finite_field import DeadlineError, AuthenticationError, PeerError
from protocols import SessionParameters, run_memory_session
from protocol_helpers import lagrange_weights, plaintext_sq_distances, quantize, random_data

#: run on the lowest and the highest protobuf (.ci/protobuf_matrix.sh)
pytestmark = pytest.mark.protobuf


def all_rows(data):
    return np.concatenate(list(data.values()))


@pytest.mark.parametrize("sizes, segments, dim, scale_bits", [
    ([5, 3, 4], 1, 4, 8),            # m = 3, l = 1
    ([4, 2, 3, 5, 1], 2, 5, 8),      # m = 5, l = 2 (d not divisible by l)
    ([3, 4, 2], 1, 6, 24),           # two RNS primes
])
@pytest.mark.parametrize("mode", ["masked", "transparent"])
def test_exact_against_plaintext_quantized_distances(sizes, segments, dim, scale_bits, mode):
    data = random_data(sizes, dim, seed=len(sizes) + dim)
    params = SessionParameters(dim=dim, bound=1.0, scale_bits=scale_bits, segments=segments,
                               mode=mode)
    outcome, _ = run_memory_session(data, params)
    expected = plaintext_sq_distances(all_rows(data), 1.0, scale_bits)
    assert np.array_equal(outcome.integer, expected)
    assert len(outcome.parameters["primes"]) == (2 if scale_bits == 24 else 1)
    assert np.array_equal(outcome.values, expected / 4.0**scale_bits)


def test_small_chunks_give_many_chunks_and_tiles_and_stay_exact():
    data = random_data([40, 30, 35], 8, seed=3)
    params = SessionParameters(dim=8, bound=1.0, scale_bits=10, chunk_bytes=4096)
    outcome, transcript = run_memory_session(data, params, record=True)
    assert np.array_equal(outcome.integer, plaintext_sq_distances(all_rows(data), 1.0, 10))
    assert len(transcript.of_kind("tile")) > 3 * 5
    assert max(len(m.data) for m in transcript.messages) < 4096 + 200


def test_dropout_in_evaluation_retries_with_the_remaining_parties():
    data = random_data([3, 4, 2, 3], 3, seed=5)  # m = 2l + 2t = 4
    # best effort (A = 0): the one check may be spent on the straggler
    params = SessionParameters(dim=3, bound=1.0, scale_bits=8, adversaries=0)
    outcome, _ = run_memory_session(data, params, drop={"party-1": "evaluation"})
    assert np.array_equal(outcome.integer, plaintext_sq_distances(all_rows(data), 1.0, 8))
    assert outcome.round == 2 and outcome.responders == ["party-0", "party-2", "party-3"]
    assert outcome.lost == ["party-1"]
    assert outcome.integrity == "unchecked: r = 0 redundant responders"
    # the default A = r = 1 keeps its check: an unchecked rerun is refused, the session ends
    with pytest.raises(PeerError, match=r"detecting 1 deviating party one check each "
                                        r"\(at least 4\)"):
        run_memory_session(data, SessionParameters(dim=3, bound=1.0, scale_bits=8),
                           drop={"party-1": "evaluation"})


def test_dropout_with_too_few_parties_names_the_party_and_phase():
    data = random_data([3, 4, 2], 3, seed=5)  # m = 2l + 2t - 1
    params = SessionParameters(dim=3, bound=1.0, scale_bits=8)
    with pytest.raises(PeerError) as info:
        run_memory_session(data, params, drop={"party-2": "evaluation"})
    assert (info.value.party, info.value.phase) == ("party-2", "evaluation")
    assert "decoding needs 3" in str(info.value)


@pytest.mark.parametrize("phase, error", [("join", DeadlineError), ("shares", PeerError)])
def test_a_party_lost_before_evaluation_is_an_error(phase, error):
    data = random_data([3, 4, 2, 2], 3, seed=5)
    with pytest.raises(error) as info:
        run_memory_session(data, SessionParameters(dim=3, bound=1.0, scale_bits=8),
                           drop={"party-3": phase})
    assert info.value.party == "party-3"


def test_flipped_byte_in_a_relayed_share_fails_the_run_with_an_authentication_error():
    data = random_data([3, 4, 2], 3, seed=5)
    flipped = []

    def tamper(dest, env):
        if env.HasField("share") and not flipped:
            data_ = bytearray(env.share.ciphertext)
            data_[0] ^= 0x80
            env.share.ciphertext = bytes(data_)
            flipped.append((env.share.sender, dest))
        return env

    # The receiver's integrity check fails and it reports the sender; the coordinator
    # cannot verify that claim, so it blames only the authenticated reporter and passes
    # the claim on.
    with pytest.raises(PeerError) as info:
        run_memory_session(data, SessionParameters(dim=3, bound=1.0, scale_bits=8),
                           tamper=tamper)
    [(sender, receiver)] = flipped
    assert (info.value.party, info.value.phase) == (receiver, "shares")
    assert f"reported by {receiver!r} (its report names {sender!r}): authentication" \
        in str(info.value)


def test_clustering_callback_returns_each_party_its_own_labels():
    data = random_data([3, 4, 2], 2, seed=1)
    outcome, transcript = run_memory_session(
        data, SessionParameters(dim=2, bound=1.0, scale_bits=8),
        cluster=lambda d: np.arange(d.shape[0]) % 2)
    labels = np.arange(9) % 2
    assert np.array_equal(outcome.labels, labels)
    assert np.array_equal(transcript.parties["party-1"].labels, labels[3:7])


# -- what the coordinator sees ---------------------------------------------------------

def _uploads(transcript, names, n, prime_index=0):
    """Each party's upload (upper triangle filled) as the coordinator received it."""
    out = {}
    for message in transcript.of_kind("tile"):
        tile = message.envelope().tile
        if tile.prime_index != prime_index:
            continue
        a, b = tile.row_start, tile.row_stop
        matrix = out.setdefault(message.sender, np.zeros((n, n), dtype=np.int64))
        matrix[a:b, a:] = np.frombuffer(tile.values, "<u4").reshape(b - a, n - a)
    return [out[name] for name in names]


def _per_segment_distances(x, segments):
    q = quantize(x, 1.0, 8)
    s = -(-q.shape[1] // segments)
    q = np.pad(q, ((0, 0), (0, s * segments - q.shape[1])))
    return [((q[:, None, o*s:(o+1)*s] - q[None, :, o*s:(o+1)*s]) ** 2).sum(-1)
            for o in range(segments)]


@pytest.mark.parametrize("mode", ["masked", "transparent"])
def test_coordinator_view_per_segment_leak_only_in_transparent_mode(mode):
    # l = 2: per-segment distances are more than D. The coordinator interpolates each
    # party's upload (divided by the public weight c_j in masked mode) at alpha_1, alpha_2.
    data = random_data([4, 3, 5, 2, 3], 4, seed=11)
    params = SessionParameters(dim=4, bound=1.0, scale_bits=8, segments=2, mode=mode)
    outcome, transcript = run_memory_session(data, params, record=True)
    names, n = list(data), outcome.integer.shape[0]
    p = outcome.parameters["primes"][0]
    alphas, betas = outcome.parameters["alphas"], outcome.parameters["betas"]
    uploads = _uploads(transcript, names, n)
    upper = np.triu_indices(n, 1)
    # The sum over the responding set is the only thing that decodes: it is exactly D.
    if mode == "masked":
        total = sum(u % p for u in uploads) % p
        assert np.array_equal(total[upper], outcome.integer[upper])
        weights = lagrange_weights(betas, alphas[0], p)
        weights = [(a + b) % p for a, b in zip(weights, lagrange_weights(betas, alphas[1], p))]
        uploads = [u * pow(w, -1, p) % p for u, w in zip(uploads, weights)]
    truth = _per_segment_distances(all_rows(data), 2)
    for o in range(2):
        w = lagrange_weights(betas, alphas[o], p)
        guess = sum(int(wj) * u % p for wj, u in zip(w, uploads)) % p
        hits = np.mean(guess[upper] == truth[o][upper])
        assert hits == (1.0 if mode == "transparent" else 0.0)


def test_coordinator_view_shares_are_ciphertext_that_does_not_decode():
    # Relayed shares: m - 1 >= l + t shares of every party pass through the coordinator.
    # Interpolating them at alpha_1 recovers a party's quantized rows when they are in the
    # clear (here: decrypted with the parties' keys, which only the test has); the
    # ciphertext the coordinator holds gives nothing.
    data = random_data([3, 2, 4], 2, seed=2)
    params = SessionParameters(dim=2, bound=1.0, scale_bits=8)
    outcome, transcript = run_memory_session(data, params, record=True)
    p = outcome.parameters["primes"][0]
    alphas, betas = outcome.parameters["alphas"], outcome.parameters["betas"]
    names = list(data)
    chunks = [m.envelope().share for m in transcript.of_kind("share")
              if m.sender == "party-0"]
    assert chunks and {c.receiver for c in chunks} == {"party-1", "party-2"}
    ciphertext, plaintext = {}, {}
    for c in chunks:
        keys = transcript.parties[c.receiver].keys["party-0"]
        opened = keys.decrypt(c.ciphertext, sender="party-0", round_=0, prime_index=0,
                              chunk_index=c.chunk_index)
        plaintext[c.receiver] = np.frombuffer(opened, "<u4").astype(np.int64)
        ciphertext[c.receiver] = np.frombuffer(c.ciphertext[:len(opened)], "<u4") \
            .astype(np.int64) % p
    points = [betas[names.index(r)] for r in ("party-1", "party-2")]
    w = lagrange_weights(points, alphas[0], p)
    secret = quantize(data["party-0"], 1.0, 8).reshape(-1) % p
    decode = lambda shares: (w[0] * shares["party-1"] + w[1] * shares["party-2"]) % p
    assert np.array_equal(decode(plaintext), secret)
    assert not np.any(decode(ciphertext) == secret)
    kinds = {m.kind for m in transcript.messages}
    assert kinds == {"hello", "confirmation", "share", "ready", "tile"}


def test_masked_upload_minus_the_masks_is_the_weighted_evaluation():
    # The masks are the only thing between the coordinator and c_j g(beta_j).
    data = random_data([3, 2, 3], 2, seed=4)
    params = SessionParameters(dim=2, bound=1.0, scale_bits=8)
    outcome, transcript = run_memory_session(data, params, record=True)
    names, n = list(data), outcome.integer.shape[0]
    p = outcome.parameters["primes"][0]
    party = transcript.parties["party-0"]
    [tile] = [m.envelope().tile for m in transcript.of_kind("tile") if m.sender == "party-0"]
    upload = np.frombuffer(tile.values, "<u4").astype(np.int64).reshape(n, n)
    from protocols._crypto import MaskView

    view = MaskView(transcript.session_id, 1, party.roster_digest, names)
    masks = sum(party.keys[peer].signed_mask(p, (n, n), my_index=0, peer_index=i, view=view,
                                             prime_index=0, tile_index=0)
                for i, peer in enumerate(names) if i)
    c0 = lagrange_weights(outcome.parameters["betas"], outcome.parameters["alphas"][0], p)[0]
    x = party.held[0]
    g = ((x[:, None, :] - x[None, :, :]) ** 2 % p).sum(-1) % p
    assert np.array_equal((upload - masks) % p, c0 * g % p)
    assert not np.array_equal(upload, c0 * g % p)


def test_library_call_modes_and_bad_transport():
    import omnifc
    from finite_field import ParameterError

    data = random_data([3, 2, 4], 3, seed=9)
    expected = plaintext_sq_distances(all_rows(data), 1.0, 8)
    for mode in ("masked", "transparent"):
        result = omnifc.secure_distance_matrix(data, bound=1.0, scale_bits=8, mode=mode)
        assert np.array_equal(result.integer_distances, expected)
        assert result.parameters["mode"] == mode and result.parameters["transport"] == "memory"
    with pytest.raises(ParameterError, match="transport"):
        omnifc.secure_distance_matrix(data, bound=1.0, scale_bits=8, transport="pigeon")
    with pytest.raises(ParameterError, match="mode"):
        omnifc.secure_distance_matrix(data, bound=1.0, scale_bits=8, mode="open")


def test_a_seeded_source_makes_the_whole_session_reproducible():
    # The test hook: one seeded ByteSource per party drives its noise AND its ephemeral
    # X25519 key, so masks (and every byte the coordinator receives) repeat exactly; the
    # default path draws everything from the OS CSPRNG and never repeats.
    from protocols import SessionParameters, run_memory_session

    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    data = {name: np.arange(6.0).reshape(3, 2) + i for i, name in enumerate("abc")}
    params = SessionParameters(dim=2, bound=8.0, scale_bits=4)
    identities = {name: Ed25519PrivateKey.generate() for name in data}

    def transcript(seed):
        sources = None if seed is None else {
            name: np.random.Generator(np.random.PCG64([seed, i])) for i, name in enumerate(data)}
        _, recorded = run_memory_session(data, params, session_id="s" * 32, record=True,
                                         sources=sources, identities=identities)
        return [m.data for m in recorded.messages]

    assert transcript(1) == transcript(1)
    assert transcript(1) != transcript(2)
    assert transcript(None) != transcript(None)
