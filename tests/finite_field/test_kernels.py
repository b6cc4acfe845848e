"""Exactness of the modular kernels against Python integers and galois.

Every kernel computes in float64 with limbs (see finite_field/_kernels/); these tests
compare it bit for bit with exact Python-integer (or galois) results over the PRIMES
fixture, on random and adversarial inputs: all entries p - 1 (the largest products), rows
long enough to overflow int64 or exceed 2^53 without limbs and to need several exact
chunks, n = 1, tile boundaries (with tiny tiles patched in), non-contiguous inputs, and
bad inputs. The last test runs the kernel source uncompiled (NUMBA_DISABLE_JIT=1).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import finite_field._kernels as kernels
import finite_field._kernels._pairwise as pairwise
from finite_field import (DistanceTiles, ParameterError, cross_sq_distances, distances_from_gram,
                          encode_blocks, gram_matrix, sq_distances, sq_distances_tile,
                          weighted_sum)
from oracles import galois_field

PRIMES = [13, 251, 65521, 2147483629, 2147483647]  # as tests/conftest.py (the fixture `prime`)

P31 = 2**31 - 1


# --------------------------------------------------------------------------- oracles

def py_matrix(x) -> list[list[int]]:
    return [[int(v) for v in row] for row in np.asarray(x).tolist()]


def ref_cross(a, b, p) -> np.ndarray:
    """sum_c (a_ic - b_jc)^2 mod p with Python integers."""
    a, b = py_matrix(a), py_matrix(b)
    return np.array([[sum((u - v) ** 2 for u, v in zip(ra, rb)) % p for rb in b] for ra in a],
                    dtype=np.int64).reshape(len(a), len(b))


def ref_gram(x, p) -> np.ndarray:
    x = py_matrix(x)
    return np.array([[sum(u * v for u, v in zip(ra, rb)) % p for rb in x] for ra in x],
                    dtype=np.int64).reshape(len(x), len(x))


def ref_cross_int64(a, b, p) -> np.ndarray:
    """The same with int64 numpy, reducing after every column (no floats, no limbs)."""
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    out = np.zeros((a.shape[0], b.shape[0]), dtype=np.int64)
    for c in range(a.shape[1]):
        diff = a[:, c, None] - b[None, :, c]       # |diff| < 2^31
        out = (out + diff * diff % p) % p          # diff^2 < 2^62
    return out


def ref_encode(matrix, blocks, p) -> np.ndarray:
    matrix = np.asarray(matrix).astype(object)
    blocks = np.asarray(blocks).astype(object)
    return (np.einsum("aj,ias->jis", matrix, blocks) % p).astype(np.int64)


def ref_weighted_sum(weights, rows, p) -> np.ndarray:
    weights = np.asarray(weights).astype(object)
    rows = np.asarray(rows).astype(object)
    return (np.tensordot(weights, rows, axes=(0, 0)) % p).astype(np.int64)


def field_values(rng, p, shape, kind="random"):
    if kind == "max":
        return np.full(shape, p - 1, dtype=np.int64)
    if kind == "edges":  # only 0, 1, p-1, (p-1)/2 and (p+1)/2: largest balanced magnitudes
        choices = np.array(sorted({0, 1, p - 1, (p - 1) // 2, (p + 1) // 2 % p}), dtype=np.int64)
        return rng.choice(choices, size=shape)
    return rng.integers(0, p, size=shape, dtype=np.int64)


@pytest.fixture
def rng():
    return np.random.Generator(np.random.PCG64(20261130))


@pytest.fixture(scope="module")
def galois_fields():
    pytest.importorskip("galois")
    cache = {}

    def get(p):
        if p not in cache:
            cache[p] = galois_field(p)
        return cache[p]
    return get


# --------------------------------------------------------------------------- encode_blocks

@pytest.mark.parametrize("kind", ["random", "max", "edges"])
@pytest.mark.parametrize("n,lt,m,s", [(1, 1, 1, 1), (5, 3, 7, 4), (3, 6, 11, 33), (70, 2, 3, 1)])
def test_encode_blocks_matches_python_ints(prime, rng, kind, n, lt, m, s):
    matrix = field_values(rng, prime, (lt, m), kind)
    blocks = field_values(rng, prime, (n, lt, s), kind)
    out = encode_blocks(matrix, blocks, prime)
    assert out.dtype == np.int64 and out.shape == (m, n, s)
    np.testing.assert_array_equal(out, ref_encode(matrix, blocks, prime))


def test_encode_blocks_long_sums_need_several_chunks(prime, rng):
    # l + t = 300 products per output: above the exact chunk for 31-bit primes (~256),
    # so the accumulators are reduced in the middle of the sum.
    _, _, chunk = kernels._small_operand_plan(prime)
    lt = 300
    matrix = field_values(rng, prime, (lt, 3), "max")
    blocks = field_values(rng, prime, (2, lt, 3), "max")
    if prime > 2**30:
        assert chunk < lt
    np.testing.assert_array_equal(encode_blocks(matrix, blocks, prime),
                                  ref_encode(matrix, blocks, prime))


def test_encode_blocks_matches_galois(prime, rng, galois_fields):
    gf = galois_fields(prime)
    matrix = field_values(rng, prime, (5, 9))
    blocks = field_values(rng, prime, (4, 5, 6))
    out = encode_blocks(matrix, blocks, prime)
    for i in range(blocks.shape[0]):
        expected = np.asarray(gf(matrix).T @ gf(blocks[i]), dtype=np.int64)
        np.testing.assert_array_equal(out[:, i, :], expected)


def test_encode_blocks_into_a_reused_buffer(rng):
    p = P31
    matrix = field_values(rng, p, (4, 5))
    out = np.full((5, 3, 7), -1, dtype=np.int64)
    for _ in range(2):
        blocks = field_values(rng, p, (3, 4, 7))
        assert encode_blocks(matrix, blocks, p, out=out) is out
        np.testing.assert_array_equal(out, ref_encode(matrix, blocks, p))
    with pytest.raises(ParameterError, match=r"shape \(5, 3, 7\)"):
        encode_blocks(matrix, blocks, p, out=np.empty((5, 3, 6), dtype=np.int64))
    with pytest.raises(ParameterError, match="C-contiguous int64"):
        encode_blocks(matrix, blocks, p, out=np.empty((5, 3, 7)))
    shared = field_values(rng, p, (200,))
    with pytest.raises(ParameterError, match="overlap"):
        encode_blocks(matrix, shared[:84].reshape(3, 4, 7), p,
                      out=shared[50:155].reshape(5, 3, 7))


def test_encode_blocks_noncontiguous_and_other_dtypes(rng):
    p = 65521
    matrix = field_values(rng, p, (4, 6)).astype(np.int32)
    big = field_values(rng, p, (10, 4, 12))
    blocks = big[::2, :, ::3]  # non-contiguous view
    np.testing.assert_array_equal(encode_blocks(matrix, blocks, p),
                                  ref_encode(matrix, blocks, p))
    fortran = np.asfortranarray(matrix)
    np.testing.assert_array_equal(encode_blocks(fortran, blocks, p), ref_encode(matrix, blocks, p))


# --------------------------------------------------------------------------- weighted_sum

@pytest.mark.parametrize("kind", ["random", "max", "edges"])
@pytest.mark.parametrize("shape", [(1,), (9, 1), (3, 3, 5), (2100,)])
def test_weighted_sum_matches_python_ints(prime, rng, kind, shape):
    r = 7
    weights = field_values(rng, prime, (r,), kind)
    rows = field_values(rng, prime, (r, *shape), kind)
    out = weighted_sum(weights, rows, prime)
    assert out.dtype == np.int64 and out.shape == shape
    np.testing.assert_array_equal(out, ref_weighted_sum(weights, rows, prime))


def test_weighted_sum_many_rows_need_several_chunks(prime, rng):
    r = 600  # > the exact chunk for 31-bit primes
    weights = field_values(rng, prime, (r,), "max")
    rows = field_values(rng, prime, (r, 5), "max")
    np.testing.assert_array_equal(weighted_sum(weights, rows, prime),
                                  ref_weighted_sum(weights, rows, prime))
    rows = field_values(rng, prime, (r, 5))
    np.testing.assert_array_equal(weighted_sum(weights, rows, prime),
                                  ref_weighted_sum(weights, rows, prime))


def test_weighted_sum_matches_galois(prime, rng, galois_fields):
    gf = galois_fields(prime)
    weights = field_values(rng, prime, (6,))
    rows = field_values(rng, prime, (6, 40))
    expected = np.asarray(gf(weights) @ gf(rows), dtype=np.int64)
    np.testing.assert_array_equal(weighted_sum(weights, rows, prime), expected)


def test_weighted_sum_lists_scalars_and_views(rng):
    p = 251
    assert weighted_sum([2, 3], [[1, 1], [1, 2]], 5).tolist() == [0, 3]
    assert weighted_sum([4], [7], 11).shape == ()
    assert int(weighted_sum([4], [7], 11)) == 28 % 11
    big = field_values(rng, p, (4, 30, 30))
    view = big[:, ::3, 1::2]
    np.testing.assert_array_equal(weighted_sum([1, 2, 3, 4], view, p),
                                  ref_weighted_sum([1, 2, 3, 4], view, p))
    assert weighted_sum([], np.zeros((0, 3), dtype=np.int64), p).tolist() == [0, 0, 0]


# --------------------------------------------------------------------------- Gram and distances

# k = 171 and 257 straddle the exact chunk of the largest primes (170 columns for
# 2^31 - 1), 1000 needs six chunks; with all entries p - 1, k = 100 already exceeds both
# int64 (100 (p-1)^2 > 2^63) and float64 without limbs (> 2^53).
@pytest.mark.parametrize("kind", ["random", "max", "edges"])
@pytest.mark.parametrize("n,k", [(1, 1), (2, 3), (9, 100), (7, 171), (6, 257), (5, 1000)])
def test_sq_distances_and_gram_match_python_ints(prime, rng, kind, n, k):
    x = field_values(rng, prime, (n, k), kind)
    if kind == "max" and n > 1:
        x[0] = 0  # distances between 0 and p - 1 rows are the largest
    d = sq_distances(x, prime)
    assert d.dtype == np.int64 and d.shape == (n, n)
    np.testing.assert_array_equal(d, ref_cross(x, x, prime))
    g = gram_matrix(x, prime)
    np.testing.assert_array_equal(g, ref_gram(x, prime))
    np.testing.assert_array_equal(distances_from_gram(g, prime), d)


@pytest.mark.parametrize("na,nb,k", [(1, 1, 1), (3, 8, 100), (8, 3, 300), (1, 5, 2)])
def test_cross_sq_distances_matches_python_ints(prime, rng, na, nb, k):
    a = field_values(rng, prime, (na, k))
    b = field_values(rng, prime, (nb, k), "edges")
    np.testing.assert_array_equal(cross_sq_distances(a, b, prime), ref_cross(a, b, prime))


def test_gram_matches_galois(prime, rng, galois_fields):
    gf = galois_fields(prime)
    x = field_values(rng, prime, (12, 100))
    expected = np.asarray(gf(x) @ gf(x).T, dtype=np.int64)
    np.testing.assert_array_equal(gram_matrix(x, prime), expected)
    y = gf(x)
    norms = np.asarray((y * y).sum(axis=1), dtype=np.int64)
    two = gf(2)
    expected_d = np.asarray(gf(norms)[:, None] + gf(norms)[None, :] - two * (y @ y.T),
                            dtype=np.int64)
    np.testing.assert_array_equal(sq_distances(x, prime), expected_d)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("panel_rows,tile_columns", [(1, 1), (2, 3), (3, 16), (5, 4), (4, 9)])
@pytest.mark.parametrize("n", [1, 6, 13, 20])
def test_tile_boundaries_with_tiny_tiles(monkeypatch, rng, panel_rows, tile_columns, n,
                                         threads):
    # Tiny tiles exercise every boundary: partial tiles, diagonal blocks wider or taller
    # than a tile, mirrored and non-mirrored columns, with one worker and with two
    # (tiles shared between threads).
    monkeypatch.setattr(pairwise, "_panel_rows", lambda rows, cols: panel_rows)
    monkeypatch.setattr(pairwise, "_TILE_COLUMNS", tile_columns)
    numba = pytest.importorskip("numba")
    before = numba.get_num_threads()
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    try:
        for p, k in ((P31, 180), (13, 5)):
            x = field_values(rng, p, (n, k))
            expected = ref_cross_int64(x, x, p)
            np.testing.assert_array_equal(sq_distances(x, p), expected)
            np.testing.assert_array_equal(gram_matrix(x, p), ref_gram(x, p))
            np.testing.assert_array_equal(cross_sq_distances(x[: n // 2 + 1], x, p),
                                          expected[: n // 2 + 1])
            np.testing.assert_array_equal(sq_distances_tile(x, n // 3, n, p, upper=True),
                                          expected[n // 3:, n // 3:])
    finally:
        numba.set_num_threads(before)


def test_default_tiles_on_a_larger_matrix(rng):
    # n = 2100: several default row panels and column tiles, each split between threads.
    p = P31
    x = field_values(rng, p, (2100, 3))
    x[::7] = p - 1
    assert pairwise._TILE_COLUMNS < 2100
    expected = ref_cross_int64(x, x, p)
    np.testing.assert_array_equal(sq_distances(x, p), expected)
    np.testing.assert_array_equal(sq_distances_tile(x, 2040, 2100, p), expected[2040:])


def test_even_modulus_uses_the_norms_path(rng):
    # 1/2 does not exist mod 2: the kernel combines the row norms instead.
    for p in (2, 4):
        x = field_values(rng, p, (7, 30))
        np.testing.assert_array_equal(sq_distances(x, p), ref_cross(x, x, p))
        np.testing.assert_array_equal(cross_sq_distances(x[:3], x, p), ref_cross(x[:3], x, p))


def test_sq_distances_tile_and_distance_tiles(prime, rng):
    n, k = 11, 40
    x = field_values(rng, prime, (n, k))
    full = ref_cross(x, x, prime)
    for start, stop in ((0, 0), (0, 1), (3, 7), (10, 11), (0, 11)):
        np.testing.assert_array_equal(sq_distances_tile(x, start, stop, prime), full[start:stop])
        np.testing.assert_array_equal(sq_distances_tile(x, start, stop, prime, upper=True),
                                      full[start:stop, start:])
    tiles = DistanceTiles(x, prime)
    seen = np.full((n, n), -1, dtype=np.int64)
    for start, stop, tile in tiles.blocks(4, upper=True):
        assert tile.shape == (stop - start, n - start)
        seen[start:stop, start:] = tile
    upper = np.triu_indices(n)
    np.testing.assert_array_equal(seen[upper], full[upper])
    assert [(a, b) for a, b, _ in tiles.blocks(5, upper=False)] == [(0, 5), (5, 10), (10, 11)]


def test_noncontiguous_and_other_dtype_inputs(rng):
    p = 2147483629
    big = field_values(rng, p, (12, 60))
    x = big[::2, ::3]                       # strided view
    expected = ref_cross(x, x, p)
    np.testing.assert_array_equal(sq_distances(x, p), expected)
    np.testing.assert_array_equal(sq_distances(np.asfortranarray(x), p), expected)
    np.testing.assert_array_equal(sq_distances(x.astype(np.uint32), p), expected)
    np.testing.assert_array_equal(sq_distances(x.tolist(), p), expected)
    np.testing.assert_array_equal(cross_sq_distances(x[1:], x[::-1], p), expected[1:, ::-1])
    np.testing.assert_array_equal(gram_matrix(x, p), ref_gram(x, p))


def test_empty_shapes():
    p = 13
    assert sq_distances(np.zeros((0, 4), dtype=np.int64), p).shape == (0, 0)
    assert sq_distances(np.zeros((3, 0), dtype=np.int64), p).tolist() == [[0] * 3] * 3
    assert gram_matrix(np.zeros((2, 0), dtype=np.int64), p).tolist() == [[0, 0], [0, 0]]
    assert cross_sq_distances(np.zeros((0, 2), dtype=np.int64),
                              np.ones((3, 2), dtype=np.int64), p).shape == (0, 3)
    assert encode_blocks(np.ones((2, 3), dtype=np.int64), np.zeros((0, 2, 4), dtype=np.int64),
                         p).shape == (3, 0, 4)
    assert distances_from_gram(np.zeros((0, 0), dtype=np.int64), p).shape == (0, 0)


def test_distances_from_gram_in_place(prime, rng):
    x = field_values(rng, prime, (9, 20))
    g = gram_matrix(x, prime)
    expected = ref_cross(x, x, prime)
    out = distances_from_gram(g, prime, out=g)
    assert out is g
    np.testing.assert_array_equal(g, expected)


def test_operand_plan_respects_the_float64_budget():
    # The reasoning behind exactness, checked for every prime and row length used above:
    # each chunk's dot products stay within 2^53 - 4p.
    for p in [2, 3, *PRIMES, 2**30 + 3, 2**31 - 19]:
        half = (p - 1) // 2
        budget = 2**53 - 2 * p   # what _mod_float accepts
        for k in (1, 100, 171, 257, 1000, 10**6):
            bits, chunk = kernels._column_plan(p, k)
            if bits == 0:
                assert half * half * k <= budget
            else:
                low = 1 << (bits - 1)
                high = (half + low) >> bits
                assert (high << bits) + low >= half  # the digits cover [-half, half]
                # a chunk's dot products, plus a reduced accumulator
                assert chunk * (low + high) * half + p <= budget
                assert (p << bits) + p <= budget   # recombination stays exact
        bits, shift, chunk = kernels._small_operand_plan(p)
        low = 1 << (bits - 1)
        largest = max(low, (half + low) >> bits)
        assert chunk * largest * half + p <= budget
        assert p * shift + p <= budget


def test_mod_float_reduces_exactly_at_the_extremes():
    for p in PRIMES:
        limit = 2**53 - 2 * p
        values = [0, 1, p - 1, p, p + 1, 2 * p - 1, -1, -p, -p - 1, limit, -limit,
                  limit - 1, -(limit - 1), (limit // p) * p, -(limit // p) * p - 1]
        for v in values:
            assert kernels._mod_float(float(v), float(p), 1.0 / p) == v % p, (p, v)


# --------------------------------------------------------------------------- bad inputs

@pytest.mark.parametrize("bad", [-1, "p"])
def test_values_outside_the_field_are_rejected(bad):
    p = 251
    value = -1 if bad == -1 else p
    x = np.ones((3, 4), dtype=np.int64)
    x[1, 2] = value
    for call in (lambda: sq_distances(x, p), lambda: gram_matrix(x, p),
                 lambda: cross_sq_distances(np.ones((1, 4), dtype=np.int64), x, p),
                 lambda: cross_sq_distances(x, np.ones((1, 4), dtype=np.int64), p),
                 lambda: sq_distances_tile(x, 0, 1, p),
                 lambda: DistanceTiles(x, p),
                 lambda: distances_from_gram(np.where(np.eye(4, dtype=bool), value, 1), p),
                 lambda: weighted_sum([1, 2, 3], x[:, :3], p),
                 lambda: weighted_sum([1, value], x[:2], p),
                 lambda: encode_blocks(np.ones((3, 2), dtype=np.int64), x[None, :, :], p),
                 lambda: encode_blocks(np.full((4, 2), value), np.ones((1, 4, 2), np.int64), p)):
        with pytest.raises(ParameterError, match=r"\[0, 251\)"):
            call()


def test_bad_shapes_types_and_moduli():
    ones = np.ones((3, 4), dtype=np.int64)
    with pytest.raises(ParameterError, match="integers"):
        sq_distances(ones.astype(float), 13)
    with pytest.raises(ParameterError, match="2-d"):
        sq_distances(np.ones(4, dtype=np.int64), 13)
    with pytest.raises(ParameterError, match="same number of columns"):
        cross_sq_distances(ones, np.ones((2, 5), dtype=np.int64), 13)
    for p in (1, 0, -7, 2**31, 2**40):
        with pytest.raises(ParameterError, match=r"\[2, 2\^31\)"):
            sq_distances(ones, p)
    with pytest.raises(ParameterError, match="integer"):
        sq_distances(ones, 13.0)
    with pytest.raises(ParameterError, match=r"\(n, 3, s\)"):
        encode_blocks(np.ones((3, 2), dtype=np.int64), np.ones((2, 4, 5), dtype=np.int64), 13)
    with pytest.raises(ParameterError, match="one array per weight"):
        weighted_sum([1, 2], np.ones((3, 4), dtype=np.int64), 13)
    with pytest.raises(ParameterError, match="square"):
        distances_from_gram(ones, 13)
    with pytest.raises(ParameterError, match="out must be"):
        distances_from_gram(np.eye(3, dtype=np.int64), 13, out=np.empty((3, 3)))
    shared = np.zeros(20, dtype=np.int64)
    with pytest.raises(ParameterError, match="not overlap"):
        distances_from_gram(shared[:16].reshape(4, 4), 13, out=shared[4:].reshape(4, 4))
    with pytest.raises(ParameterError, match="row_start <= row_stop"):
        sq_distances_tile(ones, 2, 1, 13)
    with pytest.raises(ParameterError, match="row_stop <= 3"):
        DistanceTiles(ones, 13).tile(0, 4)
    with pytest.raises(ParameterError, match="rows_per_tile"):
        list(DistanceTiles(ones, 13).blocks(0))
    with pytest.raises(ParameterError, match="above 2\\^63"):
        weighted_sum([1], np.array([[2**63]], dtype=np.uint64), 13)


# --------------------------------------------------------------------------- uncompiled source

NOJIT_SCRIPT = r"""
import json, sys
import numba
import numpy as np
import finite_field._kernels as K

p = int(sys.argv[1])
rng = np.random.Generator(np.random.PCG64(5))
x = rng.integers(0, p, size=(4, 180))      # two exact chunks for 31-bit primes
x[0] = p - 1
matrix = rng.integers(0, p, size=(3, 5))
blocks = rng.integers(0, p, size=(2, 3, 4))
rows = rng.integers(0, p, size=(4, 6))
print(json.dumps({
    "disable_jit": bool(numba.config.DISABLE_JIT),
    "plain": [not hasattr(K._encode_kernel, "py_func"), not hasattr(K._panel_kernel, "py_func")],
    "x": x.tolist(), "matrix": matrix.tolist(), "blocks": blocks.tolist(), "rows": rows.tolist(),
    "sq": K.sq_distances(x, p).tolist(),
    "gram": K.gram_matrix(x, p).tolist(),
    "dfg": K.distances_from_gram(K.gram_matrix(x, p), p).tolist(),
    "tile": K.sq_distances_tile(x, 1, 3, p, upper=True).tolist(),
    "encode": K.encode_blocks(matrix, blocks, p).tolist(),
    "wsum": K.weighted_sum([1, 2, p - 1, 5], rows, p).tolist(),
}))
"""


@pytest.mark.parametrize("p", [13, P31])
def test_kernel_source_runs_uncompiled(p):
    env = dict(os.environ, NUMBA_DISABLE_JIT="1")
    done = subprocess.run([sys.executable, "-c", NOJIT_SCRIPT, str(p)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout)
    assert got["disable_jit"] and all(got["plain"])
    x = np.array(got["x"])
    full = ref_cross(x, x, p)
    assert got["sq"] == full.tolist()
    assert got["gram"] == ref_gram(x, p).tolist()
    assert got["dfg"] == full.tolist()
    assert got["tile"] == full[1:3, 1:].tolist()
    assert got["encode"] == ref_encode(got["matrix"], got["blocks"], p).tolist()
    assert got["wsum"] == ref_weighted_sum([1, 2, p - 1, 5], got["rows"], p).tolist()


# --------------------------------------------------------------------------- BLAS threads

def test_blas_threads_are_set_to_one_inside_and_restored_after():
    threadpoolctl = pytest.importorskip("threadpoolctl")

    def openblas_threads():
        return [pool["num_threads"] for pool in threadpoolctl.threadpool_info()
                if pool["internal_api"] == "openblas"]

    before = openblas_threads()
    if not before:
        pytest.skip("numpy does not use OpenBLAS here: the switch is a documented no-op")
    with kernels._single_threaded_blas() as active:
        assert active
        assert openblas_threads() == [1] * len(before)
        with kernels._single_threaded_blas():  # re-entrant
            assert openblas_threads() == [1] * len(before)
        assert openblas_threads() == [1] * len(before)
    assert openblas_threads() == before
    x = np.arange(60, dtype=np.int64).reshape(12, 5) % 13
    sq_distances(x, 13)
    assert openblas_threads() == before


def test_blas_threads_guard_is_threadpoolctl_not_a_hand_rolled_c_api():
    import ast
    import configparser
    import pathlib
    from finite_field._kernels import _blas_threads

    tree = ast.parse(pathlib.Path(_blas_threads.__file__).read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree)
                if isinstance(node, (ast.Import, ast.ImportFrom))
                for alias in (node.names if isinstance(node, ast.Import)
                              else [ast.alias(node.module or "")])}
    assert "threadpoolctl" in imported and "ctypes" not in imported
    setup = configparser.ConfigParser()
    setup.read(pathlib.Path(__file__).resolve().parents[2] / "setup.cfg")
    requires = setup["options"]["install_requires"].split()
    assert any(r.startswith("threadpoolctl") for r in requires)


def test_blas_threads_guard_restores_only_when_the_last_thread_leaves():
    threadpoolctl = pytest.importorskip("threadpoolctl")
    import threading

    def counts():
        return [pool["num_threads"] for pool in threadpoolctl.threadpool_info()
                if pool["user_api"] == "blas"]

    before = counts()
    if not before or max(before) == 1:
        pytest.skip("BLAS runs one thread already: nothing to restore")
    inside, first_left, second_may_leave = threading.Event(), threading.Event(), \
        threading.Event()
    seen = {}

    def second():
        with kernels._single_threaded_blas():
            inside.set()
            first_left.wait(30)
            seen["after the first left"] = counts()
            second_may_leave.wait(30)

    worker = threading.Thread(target=second)
    with kernels._single_threaded_blas():
        worker.start()
        assert inside.wait(30)
    first_left.set()
    second_may_leave.set()
    worker.join(30)
    assert seen["after the first left"] == [1] * len(before)
    assert counts() == before
