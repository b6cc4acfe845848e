"""The mask graph (``mask_degree``): its connectivity, the collusion bound it gives (tight),
and fused mask streams equal to the one-shot construction bit for bit."""

from __future__ import annotations

import hashlib
import hmac
import itertools
import re
import struct

import numpy as np
import pytest

from finite_field import ParameterError, masked_upload_streams
from oracles import graph_connected, mask_stream_elements
from protocol_helpers import plaintext_sq_distances, quantize, random_data
from protocols import SessionParameters
from protocols._crypto import PROTOCOL_VERSION, ElementStream, MaskView
from protocols._mask_graph import (
    check_mask_degree,
    collusion_threshold,
    mask_edges,
    mask_neighbours,
)
from protocols._memory import run_memory_session

pytestmark = pytest.mark.timeout(300)


def all_rows(data):
    return np.concatenate(list(data.values()))


# --- the graph: brute-force connectivity (tests/oracles.graph_connected) -------------------------

@pytest.mark.parametrize("n", range(2, 10))
def test_harary_graph_is_k_connected_and_no_more(n):
    for k in range(1, n):
        edges = mask_edges(n, k)
        degrees = [sum(v in e for e in edges) for v in range(n)]
        assert min(degrees) == k, (n, k, degrees)
        if k == 1:  # the path: n - 1 edges, the fewest of any connected graph
            assert len(edges) == n - 1
        elif (k * n) % 2 == 0 or k == n - 1:  # k-regular
            assert sorted(degrees) == [k] * n, (n, k, degrees)
        else:  # odd k on odd n (no k-regular graph exists): one vertex of degree k + 1
            assert sorted(degrees) == [k] * (n - 1) + [k + 1], (n, k, degrees)
        for removed in itertools.combinations(range(n), k - 1):
            assert graph_connected(n, edges, set(removed)), (n, k, removed)
        if k < n - 1:  # the bound is tight: some k vertices separate the graph
            assert any(not graph_connected(n, edges, set(c))
                       for c in itertools.combinations(range(n), k)), (n, k)
        assert collusion_threshold(n, k) == k - 1
        for v in range(n):
            assert mask_neighbours(n, v, k) == sorted(
                {b for a, b in edges if a == v} | {a for a, b in edges if b == v})
    complete = {(i, j) for i in range(n) for j in range(i + 1, n)}
    assert mask_edges(n, 0) == complete == mask_edges(n, n - 1) == mask_edges(n, n + 3)
    assert collusion_threshold(n, 0) == n - 2


@pytest.mark.parametrize("bad", [-1, 1.5, True, "2", None])
def test_bad_mask_degrees_are_refused(bad):
    with pytest.raises(ParameterError, match="mask_degree"):
        SessionParameters(dim=2, bound=1.0, mask_degree=bad)


def test_mask_degree_above_m_minus_1_is_refused_by_name():
    params = SessionParameters(dim=2, bound=1.0, mask_degree=3)
    params.plan(4)  # m - 1 = 3: fine
    with pytest.raises(ParameterError, match=r"mask_degree must be at most m - 1 = 2.*got 3"):
        params.plan(3)


# --- the attack: a coordinator colluding with k parties that separate the graph --------------
def _sum_session(m, degree, seed=0):
    rng = np.random.default_rng(seed)
    data = {f"party-{i}": rng.uniform(-1, 1, (2, 5)) for i in range(m)}
    params = SessionParameters(kind="sum", dim=5, rows=2, bound=1.0, scale_bits=10,
                               mask_degree=degree)
    outcome, transcript = run_memory_session(data, params, record=True)
    assert np.array_equal(outcome.integer.reshape(2, 5),
                          sum(quantize(x, 1.0, 10) for x in data.values()))
    p = outcome.parameters["primes"][0]
    uploads = {}
    for message in transcript.of_kind("tile"):
        tile = message.envelope().tile
        assert tile.prime_index == 0 and tile.tile_index == 0  # one tile of 10 elements
        uploads[message.sender] = np.frombuffer(tile.values, "<u4").astype(np.int64)
    return data, transcript, p, uploads


def _attack(transcript, p, uploads, colluders, target, edges):
    """What a coordinator holding the colluders' pair keys computes for the honest set
    ``target``: the sum of its uploads minus every mask it can recompute (those on the
    public graph's ``edges`` between ``target`` and a colluder)."""
    names = list(transcript.parties)
    view = MaskView(transcript.session_id, 1, transcript.parties[names[0]].roster_digest,
                    names)
    total = sum(uploads[s] for s in target) % p
    for s in target:
        for c in colluders:
            i, j = sorted((names.index(s), names.index(c)))
            if (i, j) not in edges:
                continue
            keys = transcript.parties[c].keys[s]  # the colluder's key with s
            mask = keys.mask(p, 10, view=view, prime_index=0, tile_index=0)
            sign = 1 if names.index(c) > names.index(s) else -1  # s's sign for c
            total = (total - sign * mask) % p
    return total


def test_k_separating_colluders_recover_a_partial_sum_and_k_minus_1_cannot():
    # H_{2,6} is the cycle 0-1-2-3-4-5-0: {0, 3} separates {1, 2} from {4, 5}.
    m, k = 6, 2
    cycle = {(i, i + 1) for i in range(5)} | {(0, 5)}
    assert mask_edges(m, k) == cycle
    data, transcript, p, uploads = _sum_session(m, k)
    names = list(data)
    truth = {s: quantize(data[s], 1.0, 10).reshape(-1) % p for s in names}
    colluders = [names[0], names[3]]
    for part in ([names[1], names[2]], [names[4], names[5]]):
        assert np.array_equal(_attack(transcript, p, uploads, colluders, part, cycle),
                              sum(truth[s] for s in part) % p)
    # k - 1 = 1 colluder: G - C is connected, no proper honest subset unmasks
    for c in names:
        honest = [s for s in names if s != c]
        for size in range(1, len(honest)):
            for part in itertools.combinations(honest, size):
                got = _attack(transcript, p, uploads, [c], part, cycle)
                assert not np.array_equal(got, sum(truth[s] for s in part) % p), (c, part)
        # all honest parties together: only the total, which D (here the sum) reveals anyway
        assert np.array_equal(_attack(transcript, p, uploads, [c], honest, cycle),
                              sum(truth[s] for s in honest) % p)


def test_the_same_colluders_learn_nothing_with_every_pair_masking():
    data, transcript, p, uploads = _sum_session(6, 0, seed=1)
    names = list(data)
    truth = {s: quantize(data[s], 1.0, 10).reshape(-1) % p for s in names}
    part = [names[1], names[2]]
    complete = set(itertools.combinations(range(6), 2))
    got = _attack(transcript, p, uploads, [names[0], names[3]], part, complete)
    assert not np.array_equal(got, sum(truth[s] for s in part) % p)


@pytest.mark.parametrize("degree", [2, 3, 4])  # t = 1: 0 or at least t + 1
def test_distance_sessions_are_exact_with_any_mask_degree(degree):
    data = random_data([3, 2, 4, 2, 3], 3, seed=degree)
    params = SessionParameters(dim=3, bound=1.0, scale_bits=8, mask_degree=degree,
                               integrity="off", chunk_bytes=4096)
    outcome, _ = run_memory_session(data, params)
    assert np.array_equal(outcome.integer, plaintext_sq_distances(all_rows(data), 1.0, 8))


def test_a_party_refuses_a_roster_with_another_mask_degree():
    # The degree is in the parameters every party checks: a coordinator cannot hand
    # parties different graphs.
    from dataclasses import replace

    from protocols import Coordinator

    data = random_data([2, 2, 2, 2], 2, seed=3)
    params = SessionParameters(dim=2, bound=1.0, scale_bits=8, mask_degree=2)

    def coordinator(session_id, parameters, names, pinned, **kw):  # announces degree 3
        return Coordinator(session_id, replace(parameters, mask_degree=3), names, pinned, **kw)

    with pytest.raises(Exception, match=r"roster parameters differ .*\['mask_degree'\]"):
        run_memory_session(data, params, coordinator_class=coordinator)


# --- fused streams == the one-shot construction, recomputed independently ---------------------
def _field(value):
    value = value.encode() if isinstance(value, str) else \
        str(value).encode() if isinstance(value, int) else bytes(value)
    return struct.pack(">I", len(value)) + value


def _reference_mask(mask_key, view_digest, p, tile_index, size):
    """HKDF-Expand by hand, then the documented stream word by word (tests/oracles.py)."""
    info = b"omnifc" + b"".join(map(_field, (PROTOCOL_VERSION, "mask-stream", view_digest,
                                             p, tile_index)))
    key = hmac.new(mask_key, info + b"\x01", hashlib.sha256).digest()
    return mask_stream_elements(key, p, size)


@pytest.mark.slow
@pytest.mark.parametrize("p, shape", [(257, (7, 300)), (2**31 - 1, (3, 40000)),
                                      (1073741827, (90, 700)), (13, (1, 5)), (65537, (2, 3))])
def test_fused_masked_upload_equals_the_one_shot_construction(p, shape):
    from protocols._crypto import PairKeys

    rng = np.random.default_rng(p % 1000)
    values = rng.integers(0, p, (shape[0], shape[1] + 3))[:, 3:]  # a strided view
    keys = [PairKeys("s", "me", f"peer-{i}", bytes(32), bytes(rng.integers(0, 256, 32)
                                                                 .astype(np.uint8)))
            for i in range(4)]
    view = MaskView("s", 1, bytes(32), ("a", "me", "b"))
    weight, negate = 12345, [False, True, True, False]
    streams = [(k.mask_stream(p, view=view, tile_index=7), n) for k, n in zip(keys, negate)]
    got = masked_upload_streams(values, weight, streams, p)
    size = values.size
    expected = [weight * int(v) for v in values.reshape(-1)]
    for k, n in zip(keys, negate):
        mask = _reference_mask(k.mask_key, view.digest, p, 7, size)
        expected = [e - m if n else e + m for e, m in zip(expected, mask)]
    assert got.dtype == np.uint32 and got.shape == values.shape
    assert got.reshape(-1).tolist() == [e % p for e in expected]
    # and the one-shot mask of the pair keys is the same stream
    assert keys[0].mask(p, size, view=view, prime_index=0, tile_index=7).tolist() == \
        _reference_mask(keys[0].mask_key, view.digest, p, 7, size)


def test_element_stream_chunks_concatenate_to_the_whole_stream():
    key, p = bytes(range(32)), 1073741827  # about half of the words are rejected
    whole = mask_stream_elements(key, p, 80000)
    stream = ElementStream(key, p)
    parts, sizes = [], [1, 32767, 32768, 5000, 64]
    for size in sizes:
        parts += stream.next(size).tolist()
    assert parts == whole[:sum(sizes)]


# --- the config key ----------------------------------------------------------------------------
def test_config_key_loads_validates_round_trips_and_reaches_the_parameters(tmp_path):
    from test_config import BASE, _write

    BASE = BASE.replace("enabled = true", "enabled = false")  # no certificate files here
    from protocols import dump_session_config, load_session_config
    from protocols._grpc_coordinator import parameters_from_config

    plain = load_session_config(_write(tmp_path, BASE))
    assert plain.parameters.mask_degree == 0
    explicit0 = load_session_config(_write(tmp_path, BASE.replace(
        "primes = []", "primes = []\nmask_degree = 0"), "zero.toml"))
    assert explicit0.fingerprint == plain.fingerprint  # older configs keep their fingerprint
    two = load_session_config(_write(tmp_path, BASE.replace(
        "primes = []", "primes = []\nmask_degree = 2"), "two.toml"))
    assert two.parameters.mask_degree == 2 and two.fingerprint != plain.fingerprint
    assert parameters_from_config(two).mask_degree == 2
    again = load_session_config(dump_session_config(two, tmp_path / "dumped.toml"))
    assert again.parameters == two.parameters and again.fingerprint == two.fingerprint
    for value, match in (("3", r"mask_degree must be at most m - 1 = 2 .*got 3"),
                         ("-1", r"mask_degree .*must be >= 0, got -1"),
                         ('"2"', r"mask_degree .*must be an integer")):
        with pytest.raises(ParameterError, match=match):
            load_session_config(_write(tmp_path, BASE.replace(
                "primes = []", f"primes = []\nmask_degree = {value}"), "bad.toml"))


def test_the_audit_reports_the_collusion_threshold_of_the_mask_graph(tmp_path):
    from omnifc.audit import AuditParameters
    from omnifc.audit._transport import check_transport
    from test_config import BASE, _write

    def row(degree, t, m_extra=0):
        text = BASE.replace("primes = []", f"primes = []\nmask_degree = {degree}") \
            .replace("noise_segments = 1", f"noise_segments = {t}")
        for i in range(m_extra):  # more parties, so that 2l + 2t - 1 <= m
            text += f'\n[[parties]]\nname = "x{i}"\nidentity_public_key = "{i + 1:02x}{"d" * 62}"\n'
        check = check_transport(AuditParameters.from_config(_write(tmp_path, text)))
        [found] = [r for r in check.evidence["items"] if r[0] == "mask graph"]
        return found, check

    found, check = row(0, 1)
    assert "every pair masks" in found[1] and "up to 1 parties" in found[1]  # m = 3: m - 2
    assert found[3] == "ok" and check.evidence["mask_collusion_threshold"] == 1
    found, check = row(2, 2, m_extra=3)  # m = 6, t = 2: degree 2 withstands 1 < t
    assert found[3] == "FAIL" and "withstands only 1 colluding parties, fewer than t = 2" \
        in " ".join(check.reasons)
    found, _ = row(3, 2, m_extra=3)
    assert found[3] == "ok" and "up to 2 parties" in found[1]


@pytest.mark.slow
@pytest.mark.parametrize("p", [257, 2**31 - 1, 1073741827])
def test_streams_with_any_coefficient_equal_python_integers(p):
    # The integrity group masks add rho_G * z_G[j]: coefficients other than +-1.
    rng = np.random.default_rng(p % 97)
    values = rng.integers(0, p, (40, 1500))
    coefficients = [0, 1, p - 1, int(rng.integers(2, p - 1)), int(rng.integers(2, p - 1)),
                    -3, p + 5]
    keys = [bytes(rng.integers(0, 256, 32, dtype=np.uint8)) for _ in coefficients]
    streams = [(ElementStream(key, p), c) for key, c in zip(keys, coefficients)]
    got = masked_upload_streams(values, 7, streams, p)
    expected = [7 * int(v) for v in values.reshape(-1)]
    for key, c in zip(keys, coefficients):
        mask = mask_stream_elements(key, p, values.size)
        expected = [e + c * m for e, m in zip(expected, mask)]
    assert got.reshape(-1).tolist() == [e % p for e in expected]


def test_a_partys_streamed_integrity_upload_equals_integrity_upload():
    # One general mechanism: the party's tile equals finite_field.integrity_upload of the
    # whole rho_G arrays (the construction before the streams).
    from finite_field import integrity_upload
    from protocols._integrity import group_coefficients

    data = random_data([30, 25, 20, 30, 25], 3, seed=11)
    params = SessionParameters(dim=3, bound=1.0, scale_bits=8, chunk_bytes=4096)
    outcome, transcript = run_memory_session(data, params, record=True)
    assert np.array_equal(outcome.integer, plaintext_sq_distances(all_rows(data), 1.0, 8))
    name = "party-1"
    party = transcript.parties[name]
    checks = party._checks
    assert checks is not None  # m = 5 > 2l + 2t - 1 = 3: integrity checks ran
    view = party._view(party._round, party._responders)
    tiles = [m.envelope().tile for m in transcript.of_kind("tile") if m.sender == name]
    assert len(tiles) > 2
    for tile in tiles:
        p = party.plan.primes[tile.prime_index]
        values = party._evaluate(tile.prime_index, tile.row_start, tile.row_stop)
        rho = group_coefficients(checks, tile.prime_index, name, party._seeds, view,
                                 tile.tile_index, values.size)
        expected = integrity_upload(values, checks.groups[tile.prime_index],
                                    checks.index(name), rho, p)
        got = np.frombuffer(tile.values, "<u4").reshape(values.shape)
        assert np.array_equal(got, expected)


# -- folded in from test_mask_graph_bites.py ----------------------------------------------
# protocols/_mask_graph.py pinned down (issue 14, mutation testing).
#
# The expected graphs are built here from the module docstring's definition of the Harary
# graph H_{k,n} with frozensets (position i joined to i +- 1..floor(k/2) mod n; odd k: even n
# adds {i, i + n/2}, odd n adds {i, i + (n+1)/2 mod n} for i = 0..(n-1)/2; H_{1,n} the path;
# k = 0 or k >= n - 1 the complete graph), and small cases are written out by hand.

def exactly(message: str) -> str:
    return f"^{re.escape(message)}$"


def _harary(n: int, k: int) -> set:
    if k == 0 or k >= n - 1:
        return {frozenset(e) for e in itertools.combinations(range(n), 2)}
    if k == 1:
        return {frozenset((i, i + 1)) for i in range(n - 1)}
    edges = set()
    for i in range(n):
        for step in range(1, k // 2 + 1):
            edges.add(frozenset((i, (i + step) % n)))
            edges.add(frozenset((i, (i - step) % n)))
    if k % 2 == 1:
        if n % 2 == 0:
            edges |= {frozenset((i, i + n // 2)) for i in range(n // 2)}
        else:
            edges |= {frozenset((i, (i + (n + 1) // 2) % n)) for i in range((n - 1) // 2 + 1)}
    return edges


@pytest.mark.parametrize("n", range(2, 12))
def test_mask_edges_are_the_harary_graph_of_the_docstring(n):
    for k in range(0, n + 2):
        got = mask_edges(n, k)
        assert all(type(e) is tuple and len(e) == 2 and e[0] < e[1] for e in got), (n, k)
        assert {frozenset(e) for e in got} == _harary(n, k), (n, k)
        assert len(got) == len(_harary(n, k))


def test_small_graphs_written_out():
    assert mask_edges(2, 0) == {(0, 1)}
    assert mask_edges(2, 1) == {(0, 1)}
    assert mask_edges(4, 1) == {(0, 1), (1, 2), (2, 3)}                 # a path, no cycle
    assert mask_edges(5, 2) == {(0, 1), (1, 2), (2, 3), (3, 4), (0, 4)}  # the cycle
    assert mask_edges(6, 3) == {(0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (0, 5),
                                (0, 3), (1, 4), (2, 5)}
    # odd n, odd k: the cycle plus {0,3}, {1,4}, {2,0}: vertex 0 has degree k + 1 = 4
    assert mask_edges(5, 3) == {(0, 1), (1, 2), (2, 3), (3, 4), (0, 4), (0, 3), (1, 4),
                                (0, 2)}
    assert mask_edges(7, 4) == {(i, j) for i in range(7) for j in range(i + 1, 7)
                                if (j - i) % 7 in (1, 2, 5, 6)}


def test_neighbours_and_degrees():
    assert mask_neighbours(5, 0, 3) == [1, 2, 3, 4]
    assert mask_neighbours(5, 2, 3) == [0, 1, 3]
    assert mask_neighbours(5, 4, 3) == [0, 1, 3]
    assert mask_neighbours(4, 0, 1) == [1] and mask_neighbours(4, 3, 1) == [2]
    assert mask_neighbours(4, 1, 1) == [0, 2]
    assert mask_neighbours(3, 2, 0) == [0, 1]
    for n in range(2, 10):
        for k in range(0, n + 1):
            edges = _harary(n, k)
            for position in range(n):
                expected = sorted(j for e in edges if position in e for j in e
                                  if j != position)
                assert mask_neighbours(n, position, k) == expected, (n, k, position)


@pytest.mark.parametrize("position", [-1, 5, 6, 100])
def test_a_position_outside_the_responders_is_refused(position):
    with pytest.raises(ParameterError, match=exactly(f"position must be in [0, 5), got "
                                                     f"{position}")):
        mask_neighbours(5, position, 2)


def test_collusion_threshold_is_the_effective_degree_minus_one():
    assert collusion_threshold(6, 3) == 2
    assert collusion_threshold(6, 0) == 4 and collusion_threshold(6, 5) == 4
    assert collusion_threshold(6, 9) == 4 and collusion_threshold(6, 4) == 3
    assert collusion_threshold(2, 0) == 0 and collusion_threshold(2, 1) == 0
    assert collusion_threshold(3, 1) == 0 and collusion_threshold(3, 2) == 1
    # a degree of exactly n (or more) is the complete graph too
    assert collusion_threshold(6, 6) == 4 and collusion_threshold(2, 2) == 0
    for n in range(2, 9):
        for k in range(0, n + 3):
            assert collusion_threshold(n, k) == (n - 2 if k == 0 or k >= n - 1 else k - 1)


@pytest.mark.parametrize("n", [1, 0, -3])
def test_a_graph_needs_two_responders(n):
    for degree in (0, 1, 3):
        with pytest.raises(ParameterError, match=exactly(
                f"a mask graph needs at least 2 responders, got {n}")):
            mask_edges(n, degree)
        with pytest.raises(ParameterError, match=exactly(
                f"a mask graph needs at least 2 responders, got {n}")):
            collusion_threshold(n, degree)


class _Index:
    def __init__(self, value):
        self.value = value

    def __index__(self):
        return self.value

    def __int__(self):
        return self.value

    def __repr__(self):
        return f"_Index({self.value})"


def test_check_mask_degree_accepts_integers_and_returns_an_int():
    for good, value in [(0, 0), (1, 1), ((1 << 20) - 1, (1 << 20) - 1), (np.int64(3), 3),
                        (np.uint8(2), 2), (_Index(4), 4)]:
        got = check_mask_degree(good)
        assert got == value and type(got) is int
    assert mask_edges(4, np.int64(1)) == {(0, 1), (1, 2), (2, 3)}


@pytest.mark.parametrize("bad", [True, False, np.True_, 1.0, 2.5, "2", None, [1]])
def test_check_mask_degree_refuses_what_is_not_an_integer(bad):
    with pytest.raises(ParameterError, match=exactly(
            f"mask_degree must be an integer (0 = every pair), got {bad!r}")):
        check_mask_degree(bad)


@pytest.mark.parametrize("bad", [-1, -7, 1 << 20, (1 << 20) + 1, np.int64(-2)])
def test_check_mask_degree_refuses_negative_or_huge_degrees(bad):
    with pytest.raises(ParameterError, match=exactly(
            f"mask_degree must be 0 (every pair masks) or k >= 1, got {int(bad)}")):
        check_mask_degree(bad)
    with pytest.raises(ParameterError):
        mask_edges(6, bad)
