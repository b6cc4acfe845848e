"""The in-memory transport: exactness, dropouts, tampering and the coordinator's view."""

from __future__ import annotations

import re

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from finite_field import AuthenticationError, DeadlineError, PeerError, ProtocolError
from protocols import SessionParameters, run_memory_session
from protocol_helpers import lagrange_weights, plaintext_sq_distances, quantize, random_data
from protocols import (
    Coordinator,
    SessionParameters,
    Transcript,
    _memory,
    public_key_bytes,
    run_memory_session,
)
from protocols._generated import omnifc_pb2 as pb
from protocols._memory import ReceivedMessage
from protocols._party import Party


#: run by .ci/run on the lowest and the highest protobuf too (.ci/protobuf_matrix.sh)
pytestmark = [pytest.mark.protobuf, pytest.mark.protobuf_matrix, pytest.mark.timeout(120)]


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
    x = party.held[0].astype(np.int64)  # held as uint32: the reference works in int64
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
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from protocols import SessionParameters, run_memory_session

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


# -- folded in from test_memory_bites.py --------------------------------------------------
# Tests that bite on protocols/_memory.py (issue 14, mutation testing).
#
# The transport is observed from outside: a spy coordinator class (the documented
# ``coordinator_class`` hook) and a spy party class (the real Party, recording what it
# receives) see every message in both directions. The expectations come from the
# documentation of :func:`run_memory_session` (who receives what, in which order, which
# arguments reach the coordinator) and from plaintext distances computed with Python
# integers.

# best effort (A = 0): the dropout tests spend the one check of m = 4 on the straggler
PARAMS = SessionParameters(dim=3, bound=1.0, scale_bits=8, adversaries=0)
#: The phases of the messages a coordinator receives (ReceivedMessage's docstring).
PHASE = {"hello": "join", "confirmation": "shares", "share": "shares", "ready": "shares",
         "tile": "evaluation", "group_seed": "evaluation", "error": "error"}


def _rows(data):
    return np.concatenate(list(data.values()))


class SpyParty(Party):
    """The real party; records every envelope it is handed (the object itself)."""

    log: list = []

    def receive(self, env):
        SpyParty.log.append((self.party_id, env))
        return super().receive(env)


@pytest.fixture
def spy_party(monkeypatch):
    SpyParty.log = []
    monkeypatch.setattr(_memory, "Party", SpyParty)
    return SpyParty.log


class SpyCoordinator(Coordinator):
    """The honest coordinator; records what it receives and how the transport calls it."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.received = []      # (sender, envelope object, its bytes)
        self.calls = []         # ("expire",) / ("party_lost", name, reason)

    def receive(self, sender, env):
        self.received.append((sender, env, env.SerializeToString()))
        return super().receive(sender, env)

    def expire(self):
        self.calls.append(("expire",))
        return super().expire()

    def party_lost(self, name, reason="connection lost"):
        self.calls.append(("party_lost", name, reason))
        return super().party_lost(name, reason)


def test_a_fresh_session_id_reaches_everyone():
    data = random_data([2, 2, 2], 3, seed=1)
    ids = []
    for _ in range(2):
        outcome, transcript = run_memory_session(data, PARAMS)
        sid = transcript.session_id
        assert re.fullmatch(r"session-[0-9a-f]{16}", sid), sid
        assert transcript.coordinator.session_id == sid
        assert {p.session_id for p in transcript.parties.values()} == {sid}
        ids.append(sid)
    assert ids[0] != ids[1]
    _, transcript = run_memory_session(data, PARAMS, session_id="mine")
    assert transcript.session_id == "mine" == transcript.coordinator.session_id
    assert {p.session_id for p in transcript.parties.values()} == {"mine"}


def test_given_identities_are_pinned_and_missing_ones_are_fresh():
    data = random_data([2, 2, 2], 3, seed=1)
    key = Ed25519PrivateKey.generate()
    pins = []
    for _ in range(2):
        _, transcript = run_memory_session(data, PARAMS,
                                           identities={"party-0": key, "party-1": None})
        pinned = transcript.parties["party-2"].pinned
        assert set(pinned) == {"party-0", "party-1", "party-2"}
        assert pinned["party-0"] == public_key_bytes(key)
        assert transcript.parties["party-0"]._identity is key
        for party in transcript.parties.values():
            assert party.pinned == pinned
        pins.append(pinned)
    assert pins[0]["party-1"] != pins[1]["party-1"]
    assert pins[0]["party-2"] != pins[1]["party-2"]


def test_the_coordinator_class_gets_the_documented_arguments(tmp_path):
    seen = []

    def factory(*args, **kwargs):
        seen.append((args, kwargs))
        return Coordinator(*args, **kwargs)

    data = random_data([2, 3, 2], 3, seed=2)
    cluster = lambda d: np.zeros(d.shape[0], dtype=np.int64)  # noqa: E731
    outcome, transcript = run_memory_session(data, PARAMS, coordinator_class=factory,
                                             session_id="s1", cluster=cluster)
    [(args, kwargs)] = seen
    assert args[:3] == ("s1", PARAMS, ["party-0", "party-1", "party-2"])
    assert args[3] == {n: p.pinned[n] for n, p in transcript.parties.items()}
    assert kwargs == {"responders": None, "cluster": cluster}
    assert outcome.labels.tolist() == [0] * 7
    seen.clear()
    out = tmp_path / "d.npy"
    outcome, _ = run_memory_session(data, PARAMS, coordinator_class=factory, out=out,
                                    memory_budget=0, tile_bytes=4096,
                                    responders=["party-0", "party-1", "party-2"])
    [(args, kwargs)] = seen
    assert kwargs == {"responders": ["party-0", "party-1", "party-2"], "cluster": None,
                      "out": out, "memory_budget": 0, "tile_bytes": 4096}
    assert np.array_equal(np.load(out), plaintext_sq_distances(_rows(data), 1.0, 8))
    seen.clear()
    run_memory_session(data, PARAMS, coordinator_class=factory, memory_budget=10**9)
    assert seen[0][1] == {"responders": None, "cluster": None, "memory_budget": 10**9}


def test_the_record_is_every_received_message_in_order():
    data = random_data([3, 2, 4], 3, seed=3)
    outcome, transcript = run_memory_session(data, PARAMS, record=True,
                                             coordinator_class=SpyCoordinator)
    received = transcript.coordinator.received
    assert [(m.sender, m.data) for m in transcript.messages] == \
        [(sender, data_) for sender, _, data_ in received]
    for message in transcript.messages:
        env = message.envelope()
        assert isinstance(env, pb.Envelope) and env.SerializeToString() == message.data
        assert message.kind == env.WhichOneof("body")
        assert message.phase == PHASE[message.kind]
    kinds = [m.kind for m in transcript.messages]
    assert kinds[:3] == ["hello"] * 3
    assert {m.sender for m in transcript.of_kind("hello")} == set(data)
    assert set(kinds) == {"hello", "confirmation", "share", "ready", "tile"}
    assert len(transcript.of_kind("confirmation")) == 3
    assert len(transcript.of_kind("ready")) == 3
    assert all(m.kind == "tile" for m in transcript.of_kind("tile"))
    assert np.array_equal(outcome.integer, plaintext_sq_distances(_rows(data), 1.0, 8))
    # without record= nothing is kept, and the transcript given as observe= is the one used
    seen = Transcript()
    _, transcript = run_memory_session(data, PARAMS, observe=seen)
    assert transcript is seen and seen.messages == []
    assert set(seen.parties) == set(data) and isinstance(seen.coordinator, Coordinator)


def test_received_message_parses_its_bytes():
    env = pb.Envelope(ready=pb.Ready(session_id="x"))
    message = ReceivedMessage("a", "ready", "shares", env.SerializeToString())
    assert message.envelope() == env
    transcript = Transcript(messages=[message, ReceivedMessage("b", "tile", "evaluation",
                                                                b"")])
    assert transcript.of_kind("ready") == [message]
    assert [m.sender for m in transcript.of_kind("tile")] == ["b"]
    assert Transcript().session_id == "" and Transcript().coordinator is None


@pytest.mark.parametrize("serialize", [True, False, None])
def test_every_message_passes_through_its_bytes_unless_told_otherwise(serialize, spy_party):
    data = random_data([2, 3, 2], 3, seed=4)
    sent = []

    def tamper(dest, env):
        sent.append((dest, env, env.SerializeToString()))
        return env

    options = {} if serialize is None else {"serialize": serialize}  # default: True
    serialize = True if serialize is None else serialize
    outcome, transcript = run_memory_session(data, PARAMS, tamper=tamper,
                                             coordinator_class=SpyCoordinator, **options)
    # every message the coordinator sent reached its destination, in order and unchanged
    assert [(dest, raw) for dest, _, raw in sent] == \
        [(name, env.SerializeToString()) for name, env in spy_party]
    same = [got is env for (_, env, _), (_, got) in zip(sent, spy_party)]
    assert all(same) if not serialize else not any(same)
    # and what the parties sent reached the coordinator as objects or as fresh parses
    assert all(isinstance(env, pb.Envelope) for _, env, _ in transcript.coordinator.received)
    kinds = {}
    for dest, env, _ in sent:
        kinds.setdefault(dest, []).append(env.WhichOneof("body"))
    for name in data:
        assert kinds[name][0] == "roster" and kinds[name][-1] == "result"
        assert kinds[name].count("round_start") == 1
        assert kinds[name].count("share") == 2  # one chunk from each other party
    assert all(p.phase == "done" for p in transcript.parties.values())
    labels = transcript.parties["party-1"]
    assert np.array_equal(outcome.integer, plaintext_sq_distances(_rows(data), 1.0, 8))
    assert labels.result is not None


def test_a_party_that_never_joins_stops_the_session_at_the_join_deadline():
    data = random_data([2, 2, 2, 2], 3, seed=5)
    seen = Transcript()
    with pytest.raises(DeadlineError) as info:
        run_memory_session(data, PARAMS, drop={"party-1": "join"}, record=True, observe=seen,
                           coordinator_class=SpyCoordinator)
    assert (info.value.party, info.value.phase) == ("party-1", "join")
    assert [m.sender for m in seen.messages] == ["party-0", "party-2", "party-3"]
    assert seen.coordinator.calls == [("expire",)]
    for name in data:  # told by the coordinator's abort (party-1 too: not lost)
        party = seen.parties[name]
        assert party.phase == "failed"
        assert "missed the deadline" in str(party.error)


@pytest.mark.parametrize("phase", ["shares", "evaluation"])
def test_a_dropped_party_is_reported_lost_as_a_crash(phase, spy_party):
    data = random_data([2, 2, 2, 2], 3, seed=6)  # m = 4: one may drop in evaluation
    seen = Transcript()
    kwargs = dict(drop={"party-3": phase}, record=True, observe=seen,
                  coordinator_class=SpyCoordinator)
    if phase == "shares":
        with pytest.raises(PeerError) as info:
            run_memory_session(data, PARAMS, **kwargs)
        assert (info.value.party, info.value.phase) == ("party-3", "shares")
        assert str(info.value).endswith(": process crashed")
    else:
        outcome, _ = run_memory_session(data, PARAMS, **kwargs)
        assert outcome.lost == ["party-3"]
        assert np.array_equal(outcome.integer, plaintext_sq_distances(_rows(data), 1.0, 8))
    lost = [c for c in seen.coordinator.calls if c[0] == "party_lost"]
    assert lost == [("party_lost", "party-3", "process crashed")]
    # the dropped party never handled the message of that phase, nor anything after it
    got = [env.WhichOneof("body") for name, env in spy_party if name == "party-3"]
    first = {"shares": "confirmations", "evaluation": "round_start"}[phase]
    assert first not in got
    sent = [m.kind for m in seen.messages if m.sender == "party-3"]
    # its roster confirmation; once it got everyone's, three share chunks (one per other
    # party), then a ready note once it got theirs
    assert sent == ["hello", "confirmation"] + ([] if phase == "shares" else
                                                ["share"] * 3 + ["ready"])


def test_a_failing_coordinator_tells_every_party(spy_party):
    data = random_data([3, 4, 2], 3, seed=5)
    flipped = []

    def tamper(dest, env):
        if env.HasField("share") and not flipped:
            raw = bytearray(env.share.ciphertext)
            raw[0] ^= 0x80
            env.share.ciphertext = bytes(raw)
            flipped.append(dest)
        return env

    seen = Transcript()
    with pytest.raises(PeerError) as info:
        run_memory_session(data, PARAMS, tamper=tamper, record=True, observe=seen)
    [receiver] = flipped
    # the receiver's own report reached the coordinator
    reports = seen.of_kind("error")
    assert [m.sender for m in reports] == [receiver]
    assert reports[0].envelope().error.kind == "authentication"
    assert info.value.party == receiver
    # every other party got the coordinator's ErrorReport and failed with it
    for name, party in seen.parties.items():
        assert party.phase == "failed", name
    errors = [(name, env.error.reporter) for name, env in spy_party
              if env.WhichOneof("body") == "error"]
    assert sorted(errors) == sorted((n, "coordinator") for n in data if n != receiver)


def test_a_session_with_nothing_in_flight_and_no_deadline_action_stalls():
    class Idle(Coordinator):
        def expire(self):
            return []  # a deadline that does nothing

    data = random_data([2, 2, 2], 3, seed=7)
    with pytest.raises(ProtocolError) as info:
        run_memory_session(data, PARAMS, drop={"party-2": "join"}, coordinator_class=Idle)
    assert str(info.value) == "the session stalled with nothing in flight"
    assert type(info.value) is ProtocolError


def test_an_error_in_a_lazy_evaluation_is_reported_by_that_party(monkeypatch, spy_party):
    data = random_data([30, 20, 25], 3, seed=8)
    params = SessionParameters(dim=3, bound=1.0, scale_bits=8, chunk_bytes=4096)
    evaluate = Party._evaluate
    calls = {"n": 0}

    def failing(self, k, a, b):
        if self.party_id == "party-2":
            calls["n"] += 1
            if calls["n"] == 2:
                raise ProtocolError("evaluation broke")
        return evaluate(self, k, a, b)

    events = []

    def logged(self, k, a, b):
        events.append(("evaluate", self.party_id))
        return failing(self, k, a, b)

    class Logged(Coordinator):
        def receive(self, sender, env):
            events.append(("receive", sender, env.WhichOneof("body")))
            return super().receive(sender, env)

    monkeypatch.setattr(Party, "_evaluate", logged)
    seen = Transcript()
    with pytest.raises(PeerError) as info:
        run_memory_session(data, params, record=True, observe=seen, coordinator_class=Logged)
    # the failed pull's report is delivered before anything else is pulled (one message
    # in flight at a time): the failing evaluation is followed by its report
    failed_at = [i for i, e in enumerate(events) if e == ("evaluate", "party-2")][1]
    assert events[failed_at + 1:] == [("receive", "party-2", "error")]
    assert (info.value.party, info.value.phase) == ("party-2", "evaluation")
    assert "evaluation broke" in str(info.value)
    reports = seen.of_kind("error")
    assert [m.sender for m in reports] == ["party-2"]
    report = reports[0].envelope().error
    assert (report.reporter, report.kind, report.message) == ("party-2", "protocol",
                                                              "evaluation broke")
    # one tile of party-2 was sent before its second block failed; nothing after
    tiles_2 = [m for m in seen.of_kind("tile") if m.sender == "party-2"]
    assert len(tiles_2) == 1
    last = max(i for i, m in enumerate(seen.messages) if m.sender == "party-2")
    assert seen.messages[last].kind == "error"


def test_tiles_alternate_between_parties_one_at_a_time():
    data = random_data([40, 40, 40], 4, seed=2)
    params = SessionParameters(dim=4, bound=1.0, scale_bits=8, chunk_bytes=4096)
    outcome, transcript = run_memory_session(data, params, record=True)
    senders = [m.sender for m in transcript.of_kind("tile")]
    per_party = len(senders) // 3
    assert per_party > 2 and len(senders) == 3 * per_party
    # strict round-robin in roster order: a, b, c, a, b, c, ...
    assert senders == ["party-0", "party-1", "party-2"] * per_party
    assert np.array_equal(outcome.integer, plaintext_sq_distances(_rows(data), 1.0, 8))


def test_a_rerun_round_discards_the_unsent_tiles_of_the_first(spy_party):
    # party-2 corrupts its upload; integrity excludes it and reruns: afterwards only
    # tiles of the second round reach the coordinator from the others
    data = random_data([6, 5, 7, 4, 6], 3, seed=9)
    params = SessionParameters(dim=3, bound=1.0, scale_bits=8, chunk_bytes=4096,
                               adversaries=1)
    outcome, transcript = run_memory_session(data, params, record=True,
                                             faults={"party-2": "corrupt-upload"})
    assert outcome.round == 2 and "party-2" not in outcome.responders
    assert np.array_equal(outcome.integer, plaintext_sq_distances(_rows(data), 1.0, 8))
    rounds = [m.envelope().tile.round for m in transcript.of_kind("tile")]
    assert rounds == sorted(rounds) and set(rounds) == {1, 2}
    assert all(p.phase == "done" for n, p in transcript.parties.items() if n != "party-2")


def test_a_party_computes_at_most_one_block_ahead_of_the_tiles_delivered(monkeypatch):
    # Streaming: the transport pulls one tile at a time and delivers it before pulling
    # another, and a party computes the next block while it masks and sends this one
    # (protocols._plans._BlockValues), never more: when a party starts its e-th block it
    # has delivered at least e - 2 tiles (each block holds at least one), so what is
    # computed and not yet delivered stays O(m blocks), not m whole uploads.
    data = random_data([40, 40, 40], 4, seed=2)
    params = SessionParameters(dim=4, bound=1.0, scale_bits=8, chunk_bytes=4096)
    events = []
    evaluate = Party._evaluate

    def logged(self, k, a, b):
        events.append(("evaluate", self.party_id))
        return evaluate(self, k, a, b)

    class Logged(Coordinator):
        def receive(self, sender, env):
            events.append(("receive", sender, env.WhichOneof("body")))
            return super().receive(sender, env)

    monkeypatch.setattr(Party, "_evaluate", logged)
    outcome, _ = run_memory_session(data, params, coordinator_class=Logged)
    assert np.array_equal(outcome.integer, plaintext_sq_distances(_rows(data), 1.0, 8))
    computed = dict.fromkeys(data, 0)
    delivered = dict.fromkeys(data, 0)
    for event in events:
        if event[0] == "evaluate":
            computed[event[1]] += 1
            assert computed[event[1]] <= delivered[event[1]] + 2, (event, computed, delivered)
        elif event[2] == "tile":
            delivered[event[1]] += 1
    assert min(computed.values()) > 5 and len(events) > 20


def test_a_silent_party_is_dropped_at_the_evaluation_deadline_and_the_rest_finish(
        monkeypatch):
    # party-3 takes the round but never uploads: nothing is left in flight, the
    # evaluation deadline passes, the coordinator retries without it, and the session
    # goes on with the messages of the retry (it neither stalls nor stops early)
    data = random_data([2, 3, 2, 3], 3, seed=12)  # m = 4: one may drop
    tiles = Party._tiles

    def silent(self, round_, responders):
        if self.party_id == "party-3":
            return iter(())
        return tiles(self, round_, responders)

    monkeypatch.setattr(Party, "_tiles", silent)
    outcome, transcript = run_memory_session(data, PARAMS, coordinator_class=SpyCoordinator)
    assert outcome is not None and outcome.lost == ["party-3"]
    assert outcome.round == 2 and outcome.responders == ["party-0", "party-1", "party-2"]
    assert np.array_equal(outcome.integer, plaintext_sq_distances(_rows(data), 1.0, 8))
    assert transcript.coordinator.calls.count(("expire",)) == 1


def test_a_forged_error_report_to_one_party_is_not_answered(spy_party):
    # a malicious relay replaces party-1's first RoundStart with an ErrorReport: party-1
    # stops; the transport does not answer an ErrorReport with another one, so the
    # coordinator only sees party-1 fall silent and retries without it at the deadline
    data = random_data([2, 3, 2, 3], 3, seed=13)
    forged = []

    def tamper(dest, env):
        if dest == "party-1" and env.HasField("round_start") and not forged:
            forged.append(env.round_start.session_id)
            return pb.Envelope(error=pb.ErrorReport(
                session_id=env.round_start.session_id, reporter="coordinator",
                phase="evaluation", kind="protocol", message="forged"))
        return env

    # integrity off: no group seeds, so the others do not wait for party-1 in round 1
    params = SessionParameters(dim=3, bound=1.0, scale_bits=8, integrity="off")
    outcome, transcript = run_memory_session(data, params, tamper=tamper, record=True)
    assert forged and outcome.lost == ["party-1"] and outcome.round == 2
    assert np.array_equal(outcome.integer, plaintext_sq_distances(_rows(data), 1.0, 8))
    assert transcript.of_kind("error") == []
    assert transcript.parties["party-1"].phase == "failed"
    assert "forged" in str(transcript.parties["party-1"].error)
