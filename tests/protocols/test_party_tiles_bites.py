"""protocols/_party.py's evaluation pinned down (mutation testing, docs/testing.md, issue 14):
``_tiles``, ``_send_seeds``, ``_evaluate`` and ``_mask_partners``.

Every uploaded tile is recomputed independently of the library: g(beta_j) from the shares
the party holds with Python integers, the decoding weight c_j from exact Lagrange
fractions (``lagrange_weights``), the pairwise masks with HKDF and ChaCha20 by hand
(``_reference_mask`` of test_mask_graph.py), the mask graph as the Harary graph written
out here, the tile schedule from the docstring of ``row_tiles``. Integrity-checked rounds
are checked through what the checks guarantee: the weighted sum of the uploads is D of the
plaintext rows and every parity check (the dual of the evaluation code, written out as
beta_j^e / prod_{i != j} (beta_j - beta_i)) vanishes on them.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from protocols import SessionParameters
from protocols._crypto import MaskView
from protocols._generated import omnifc_pb2 as pb
from protocol_helpers import (Session, lagrange_weights, plaintext_sq_distances, quantize,
                              random_data)
from test_mask_graph import _reference_mask

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
