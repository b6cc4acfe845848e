"""protocols/_party.py's evaluation pinned down (mutation testing, docs/testing.md, issue 14):
``_tiles``, ``_send_seeds``, ``_evaluate`` and ``_mask_partners``.

Every uploaded tile is recomputed independently of the library: g(beta_j) from the shares
the party holds with Python integers, the decoding weight c_j from exact Lagrange
fractions (``lagrange_weights``), the pairwise masks with HKDF and AES-256-CTR by hand
(``_reference_mask`` of test_mask_graph.py), the mask graph as the Harary graph written
out here, the tile schedule from the docstring of ``row_tiles``. Integrity-checked rounds
are checked through what the checks guarantee: the weighted sum of the uploads is D of the
plaintext rows and every parity check (the dual of the evaluation code, written out as
beta_j^e / prod_{i != j} (beta_j - beta_i)) vanishes on them.
"""

from __future__ import annotations

import numpy as np
import pytest

from protocols import SessionParameters
from protocols._crypto import MaskView
from protocols._generated import omnifc_pb2 as pb
from protocol_helpers import (Session, lagrange_weights, plaintext_sq_distances, quantize,
                              random_data)
from test_mask_graph import _reference_mask
from oracles import parity_rows

pytestmark = pytest.mark.timeout(300)

SID = "test-session"


def _ready(sizes, params, seed=0, dim=3):
    """Every party of a session in phase 'ready' (shares exchanged)."""
    data = random_data(list(sizes), dim, seed=seed)
    session = Session(data, params)
    session.run_until("evaluation")
    assert all(p.phase == "ready" for p in session.parties.values())
    return session, data


def _round_start(round_, responders):
    return pb.Envelope(round_start=pb.RoundStart(session_id=SID, round=round_,
                                                 responders=responders))


def _expected_tiles(n, chunk_bytes):
    """row_tiles from its docstring: rows [a, b) with at most chunk_bytes // 4 elements of
    the (b - a) x (n - a) block, at least one row."""
    out, a = [], 0
    while a < n:
        b = a + 1
        while b < n and (b + 1 - a) * (n - a) <= chunk_bytes // 4:
            b += 1
        out.append((a, b))
        a = b
    return out


def _harary(n, degree):
    """Neighbour positions in the Harary graph H_{k,n} for even k (0: complete graph)."""
    if degree == 0 or degree >= n - 1:
        return {i: sorted(set(range(n)) - {i}) for i in range(n)}
    assert degree % 2 == 0
    return {i: sorted({(i + s) % n for s in range(1, degree // 2 + 1)}
                      | {(i - s) % n for s in range(1, degree // 2 + 1)}) for i in range(n)}


def _g(held, a, b, p):
    """g(beta_j) for rows [a, b) against columns a..n-1: Python integers, mod p."""
    rows = [[int(v) for v in r] for r in held]
    return [[sum((x - y) ** 2 for x, y in zip(rows[u], rows[v])) % p
             for v in range(a, len(rows))] for u in range(a, b)]


def _weight(party, order, k, name):
    """c_j = sum over the l data points alpha_o of L_j^B(alpha_o), exact fractions."""
    code = party.plan.codes[k]
    p = code.prime
    betas = [code.betas[party.names.index(r)] for r in order]
    j = order.index(name)
    return sum(lagrange_weights(betas, alpha, p)[j]
               for alpha in code.alphas[:code.segments]) % p


def _values(tile, shape):
    got = np.frombuffer(tile.values, dtype="<u4")
    assert got.size == shape[0] * shape[1]
    return got.reshape(shape).tolist()


def _check_metadata(tiles, name, round_, n, chunk_bytes, primes):
    schedule = _expected_tiles(n, chunk_bytes)
    assert [(t.prime_index, t.tile_index, t.row_start, t.row_stop) for t in tiles] == \
        [(k, i, a, b) for k in range(primes) for i, (a, b) in enumerate(schedule)]
    for t in tiles:
        assert (t.session_id, t.round, t.sender) == (SID, round_, name)
    return schedule


# -- pairwise masked uploads (no integrity checks): every tile recomputed ----------------------

@pytest.mark.slow
@pytest.mark.parametrize("sizes, degree, chunk_bytes, scale_bits, responders", [
    ((5, 4, 6, 3, 4), 0, 4096, 16, None),          # 2 primes, every pair masks
    ((5, 4, 6, 3, 4), 2, 4096, 8, None),           # the cycle H_{2,5}
    ((30, 20, 25, 22), 0, 4096, 8, (3, 0, 2)),     # several tiles; B a strict subset
    ((60, 50, 40, 50, 40), 2, 4096, 8, None),      # n = 240: blocks of several tiles
])
def test_every_pairwise_masked_tile_equals_the_documented_construction(
        sizes, degree, chunk_bytes, scale_bits, responders):
    params = SessionParameters(dim=3, bound=1.0, scale_bits=scale_bits, integrity="off",
                               mask_degree=degree, chunk_bytes=chunk_bytes)
    session, data = _ready(sizes, params, seed=sum(sizes))
    names = session.names
    order = names if responders is None else [names[i] for i in sorted(responders)]
    shown = order if responders is None else [names[i] for i in responders]
    n = sum(sizes)
    graph = _harary(len(order), degree)
    uploads = {}
    for name in order:
        party = session.parties[name]
        tiles = [e.tile for e in party.receive(_round_start(1, shown))]
        primes = party.plan.primes
        schedule = _check_metadata(tiles, name, 1, n, chunk_bytes, len(primes))
        digest = MaskView(SID, 1, party.roster_digest, tuple(order)).digest
        me = order.index(name)
        peers = [order[i] for i in graph[me]]
        for tile in tiles:
            k, t, a, b = tile.prime_index, tile.tile_index, tile.row_start, tile.row_stop
            p = primes[k]
            c = _weight(party, order, k, name)
            want = [[c * v for v in row] for row in _g(party.held[k], a, b, p)]
            size = (b - a) * (n - a)
            for peer in peers:
                mask = _reference_mask(party.keys[peer].mask_key, digest, p, t, size)
                sign = 1 if names.index(peer) > names.index(name) else -1
                want = [[w + sign * mask[r * (n - a) + col] for col, w in enumerate(row)]
                        for r, row in enumerate(want)]
            assert _values(tile, (b - a, n - a)) == [[w % p for w in row] for row in want]
            uploads[name, k, t] = want
        assert party.timings["bytes_uploaded"] == sum(len(t.values) for t in tiles)
    # and the uploads of B add up to D of the plaintext rows (the masks cancel)
    for name in set(names) - set(order):  # not in B: nothing to upload
        assert list(session.parties[name].receive(_round_start(1, shown))) == []
        assert session.parties[name].phase == "evaluation"
    d = plaintext_sq_distances(np.concatenate([data[x] for x in names]), 1.0, scale_bits)
    for k, p in enumerate(session.parties[order[0]].plan.primes):
        for t, (a, b) in enumerate(schedule):
            total = [[sum(uploads[x, k, t][r][col] for x in order) % p
                      for col in range(n - a)] for r in range(b - a)]
            assert total == (d[a:b, a:] % p).tolist()


# -- transparent mode: the raw, unweighted g(beta_j) -----------------------------------------

@pytest.mark.parametrize("integrity", ["detect", "off"])
def test_transparent_tiles_are_the_raw_unweighted_evaluations(integrity):
    params = SessionParameters(dim=3, bound=1.0, scale_bits=16, mode="transparent",
                               integrity=integrity, chunk_bytes=4096)
    sizes = (12, 9, 11, 10, 8)
    session, _ = _ready(sizes, params, seed=21)
    n = sum(sizes)
    for name in session.names:
        party = session.parties[name]
        tiles = [e.tile for e in party.receive(_round_start(1, session.names))]
        _check_metadata(tiles, name, 1, n, 4096, len(party.plan.primes))
        for tile in tiles:
            a, b, p = tile.row_start, tile.row_stop, party.plan.primes[tile.prime_index]
            assert _values(tile, (b - a, n - a)) == _g(party.held[tile.prime_index], a, b, p)


# -- secure sums: the quantized vector plus the pairwise masks ----------------------------------

@pytest.mark.parametrize("degree", [0, 2])
def test_every_sum_tile_is_the_quantized_vector_plus_the_pairwise_masks(degree):
    rows, dim, m = 210, 5, 5                          # 1050 elements: two tiles of 1024
    params = SessionParameters(dim=dim, rows=rows, kind="sum", bound=2.0, scale_bits=12,
                               chunk_bytes=4096, mask_degree=degree)
    session, data = _ready([rows] * m, params, seed=9, dim=dim)
    names = session.names
    graph = _harary(m, degree)
    schedule = [(0, 1024), (1024, 1050)]
    totals = {}
    for j, name in enumerate(names):
        party = session.parties[name]
        tiles = [e.tile for e in party.receive(_round_start(1, names))]
        primes = party.plan.primes
        assert [(t.prime_index, t.tile_index, t.row_start, t.row_stop) for t in tiles] == \
            [(k, i, a, b) for k in range(len(primes)) for i, (a, b) in enumerate(schedule)]
        assert all((t.session_id, t.round, t.sender) == (SID, 1, name) for t in tiles)
        flat = [int(v) for v in quantize(data[name], 2.0, 12).reshape(-1)]
        digest = MaskView(SID, 1, party.roster_digest, tuple(names)).digest
        for tile in tiles:
            k, t, a, b = tile.prime_index, tile.tile_index, tile.row_start, tile.row_stop
            p = primes[k]
            want = flat[a:b]
            for i in graph[j]:
                mask = _reference_mask(party.keys[names[i]].mask_key, digest, p, t, b - a)
                want = [w + (1 if i > j else -1) * x for w, x in zip(want, mask)]
            assert np.frombuffer(tile.values, "<u4").tolist() == [w % p for w in want]
            totals[k, t] = [x + y for x, y in zip(totals.get((k, t), [0] * (b - a)), want)]
    exact = [int(v) for v in sum(quantize(data[x], 2.0, 12) for x in names).reshape(-1)]
    for (k, t), total in totals.items():
        a, b = schedule[t]
        assert total == exact[a:b]  # the masks cancel exactly, before any reduction


# -- integrity-checked masked rounds: seeds, then uploads the checks accept ---------------------

def _drive(session):
    """The whole session through a FIFO; every message a party sent, as (party, envelope)."""
    queue = [("coordinator", n, env) for n, env in session.hellos().items()]
    sent = []
    while queue:
        dest, sender, env = queue.pop(0)
        if dest == "coordinator":
            queue += [(d, "coordinator", e) for d, e in session.coordinator.receive(sender, env)]
        else:
            for e in session.parties[dest].receive(env):
                sent.append((dest, e))
                queue.append(("coordinator", dest, e))
    return sent


def test_checked_masked_uploads_pass_every_parity_check_and_sum_to_d():
    sizes = (14, 10, 12, 9, 11, 8)                     # m = 6, K = 3: s = 3 checks
    params = SessionParameters(dim=3, bound=1.0, scale_bits=16, chunk_bytes=4096)
    data = random_data(list(sizes), 3, seed=31)
    session = Session(data, params)
    sent = _drive(session)
    names, n = session.names, sum(sizes)
    d = plaintext_sq_distances(np.concatenate([data[x] for x in names]), 1.0, 16)
    assert np.array_equal(session.coordinator.outcome.integer, d)
    checks = session.parties[names[0]]._checks
    assert checks is not None and checks.checks == 3 and checks.member_sets
    # the seeds: every leader sends its group's seed to every other member, once
    seeds = [(s, e.group_seed) for s, e in sent if e.HasField("group_seed")]
    expected = sorted((members[0], r, members) for members in checks.member_sets
                      for r in members[1:])
    assert sorted((g.sender, g.receiver, tuple(g.members)) for _, g in seeds) == expected
    for sender, g in seeds:
        assert (sender, g.session_id, g.round) == (g.sender, SID, 1)
        leader, receiver = session.parties[g.sender], session.parties[g.receiver]
        members = tuple(g.members)
        seed = leader._seeds[members]
        assert len(seed) == 32 and receiver._seeds[members] == seed
        view = MaskView(SID, 1, leader.roster_digest, tuple(names))
        assert receiver.keys[g.sender].decrypt_seed(
            g.ciphertext, view=view, group_index=checks.member_sets.index(members),
            members=members) == seed
    assert len({s for p in session.parties.values() for s in p._seeds.values()}) == \
        len(checks.member_sets)                        # one fresh seed per member set
    # every party's seeds went out before its tiles; its tiles follow its last seed
    for name in names:
        kinds = [e.WhichOneof("body") for s, e in sent if s == name]
        evaluation = kinds[kinds.index("ready") + 1:]
        assert set(evaluation) <= {"group_seed", "tile"}
        assert "group_seed" not in evaluation[evaluation.index("tile"):]
    tiles = {(s, e.tile.prime_index, e.tile.tile_index): e.tile for s, e in sent
             if e.HasField("tile")}
    schedule = _expected_tiles(n, 4096)
    primes = session.parties[names[0]].plan.primes
    assert len(tiles) == len(names) * len(primes) * len(schedule)
    for k, p in enumerate(primes):
        code = session.parties[names[0]].plan.codes[k]
        mu = parity_rows([code.betas[i] for i in range(len(names))], 3, p)
        c = [_weight(session.parties[x], names, k, x) for x in names]
        for t, (a, b) in enumerate(schedule):
            u = [_values(tiles[x, k, t], (b - a, n - a)) for x in names]
            for j, x in enumerate(names):   # masked: not the raw evaluation
                assert (tiles[x, k, t].row_start, tiles[x, k, t].row_stop) == (a, b)
                assert u[j] != _g(session.parties[x].held[k], a, b, p)
            for r in range(b - a):
                for col in range(n - a):
                    column = [u[j][r][col] for j in range(len(names))]
                    assert sum(cj * v for cj, v in zip(c, column)) % p == \
                        d[a + r, a + col] % p
                    assert all(sum(w * v for w, v in zip(row, column)) % p == 0
                               for row in mu)


# -- Party.timings with a fake clock ------------------------------------------------------------

class _Clock:
    """perf_counter advances 10 per call, process_time 1 per call (no real time)."""

    def __init__(self):
        self.perf, self.cpu = 0.0, 0.0

    def perf_counter(self):
        self.perf += 10.0
        return self.perf

    def process_time(self):
        self.cpu += 1.0
        return self.cpu


@pytest.mark.parametrize("ahead", [False, True])
@pytest.mark.parametrize("mode", ["masked", "transparent"])
def test_timings_add_up_every_tile_and_every_kernel_call(monkeypatch, mode, ahead):
    # ahead: the next block computed in a background thread (protocols._plans.PREFETCH,
    # on by default): every row is still computed once per prime and every byte counted;
    # the clock's ticks then interleave between the threads, so the exact accounting of
    # seconds is checked with it off
    import protocols._party as party_module
    import protocols._plans as plans_module

    monkeypatch.setattr(plans_module, "PREFETCH", ahead)

    params = SessionParameters(dim=3, bound=1.0, scale_bits=16, integrity="off", mode=mode,
                               chunk_bytes=4096)
    sizes = (60, 50, 40, 50, 40)
    session, _ = _ready(sizes, params, seed=5)
    party = session.parties["party-1"]
    calls = []
    kernel = party_module.DistanceTiles.tile
    monkeypatch.setattr(party_module.DistanceTiles, "tile",
                        lambda self, a, b, **kw: calls.append((b - a, None)) or
                        kernel(self, a, b, **kw))
    monkeypatch.setattr(party_module, "time", _Clock())
    before = dict(party.timings)
    assert before == {"evaluation_seconds": 0.0, "kernel_seconds": 0.0,
                      "evaluation_cpu_seconds": 0.0, "kernel_cpu_seconds": 0.0,
                      "bytes_uploaded": 0, "tiles_uploaded": 0}
    tiles = [e.tile for e in party.receive(_round_start(1, session.names))]
    n, primes = sum(sizes), len(party.plan.primes)
    blocks = len(calls)
    assert primes == 2 and len(tiles) == primes * len(_expected_tiles(n, 4096))
    assert len(tiles) > blocks > primes          # several tiles per block, several blocks
    assert sum(rows for rows, _ in calls) == primes * n  # every row computed once per prime
    uploaded = sum(4 * (t.row_stop - t.row_start) * (n - t.row_start) for t in tiles)
    assert party.timings["bytes_uploaded"] == uploaded
    assert party.timings["tiles_uploaded"] == len(tiles)
    if ahead:
        return
    # a tile without a kernel call spans 1 tick of each clock, one with a kernel call 3
    # (the kernel's own 2 calls inside), of which the kernel takes 1
    assert party.timings == {"evaluation_seconds": 10.0 * (len(tiles) + 2 * blocks),
                             "kernel_seconds": 10.0 * blocks,
                             "evaluation_cpu_seconds": 1.0 * (len(tiles) + 2 * blocks),
                             "kernel_cpu_seconds": 1.0 * blocks,
                             "bytes_uploaded": sum(4 * (t.row_stop - t.row_start) *
                                                   (n - t.row_start) for t in tiles),
                             "tiles_uploaded": len(tiles)}


# -- group seeds come from the party's byte source ----------------------------------------------

class _Recorder:
    """A seeded byte source that records every draw with the phase its party was in."""

    def __init__(self, seed):
        self.rng, self.party, self.draws = np.random.default_rng(seed), None, []

    def bytes(self, n):
        out = self.rng.bytes(n)
        self.draws.append((self.party.phase if self.party else "init", n, out))
        return out


def test_a_leader_draws_each_group_seed_from_its_source_in_group_order():
    from protocols import Party

    sizes = (4, 3, 5, 3, 4, 2)
    params = SessionParameters(dim=3, bound=1.0, scale_bits=8)
    data = random_data(list(sizes), 3, seed=13)
    session = Session(data, params)
    sources = {}
    for i, name in enumerate(session.names):
        sources[name] = _Recorder(100 + i)
        session.parties[name] = Party(name, data[name], session_id=SID, parameters=params,
                                      identity_key=session.keys[name], pinned=session.pinned,
                                      source=sources[name])
        sources[name].party = session.parties[name]
    _drive(session)
    assert np.array_equal(session.coordinator.outcome.integer, plaintext_sq_distances(
        np.concatenate([data[x] for x in session.names]), 1.0, 8))
    checks = session.parties["party-0"]._checks
    leaders = {m[0] for m in checks.member_sets}
    assert leaders and leaders != set(session.names)   # some lead, some only receive
    for name in session.names:
        party = session.parties[name]
        led = [m for m in checks.member_sets if m[0] == name]
        drawn = [(n, out) for phase, n, out in sources[name].draws if phase == "evaluation"]
        assert drawn == [(32, party._seeds[m]) for m in led]
        for m in checks.member_sets:       # the others' seeds: what their leader drew
            if name in m and m[0] != name:
                assert party._seeds[m] == session.parties[m[0]]._seeds[m]
        assert set(party._seeds) == {m for m in checks.member_sets if name in m}


# -- evaluation blocks away from row 0 ----------------------------------------------------------

@pytest.mark.parametrize("n, start, expected", [
    (8192, 0, 512),          # 512 x 8192 = 2^22 exactly (and 8 x 512 <= 8192): included
    (8292, 100, 612),        # the same block from row 100: n - start columns, not n
    (70000, 10000, 10069),   # 69 x 60000 <= 2^22 < 70 x 60000
    (70000, 0, 59),          # 59 x 70000 <= 2^22 < 60 x 70000
    (4196, 100, 612),        # 1/8 of the 4096 columns from row 100 binds: 512 rows
])
def test_a_block_of_single_row_tiles_holds_at_most_2_22_elements_of_its_columns(n, start,
                                                                              expected):
    from protocols._party import _block_stop

    tiles = [(a, a + 1) for a in range(n)]
    # independent of the loop: the largest b with (b - start)(n - start) <= 2^22 and
    # 8 (b - start) <= n - start
    rows = min((1 << 22) // (n - start), (n - start) // 8)
    assert start + rows == expected
    assert _block_stop(tiles, start, n) == expected
