"""The decode: residues -> exact integers by CRT, the no-wrap check, the symmetric matrix.

Oracles: Python integers (the unique value in range congruent to every residue, found by
search over the range) and numpy's triu. The in-place finish of a one-prime result:
diagonal zeroed, upper triangle mirrored, largest distance reported, for any block height.
"""

from __future__ import annotations

import numpy as np
import pytest

from finite_field import (ParameterError, WrapAroundError, add_reduced, decode_residues,
                          decode_upper)
from finite_field._decode import _finish_rows_one_prime


def _python_crt(residues, primes, low, high):
    """The x in [low, high] with x = r_i mod p_i for every i (by search: an oracle)."""
    return next(x for x in range(low, high + 1)
                if all((x - r) % p == 0 for r, p in zip(residues, primes)))


@pytest.mark.parametrize("primes", [(65521,), (251, 241), (13, 11, 7)])
def test_signed_values_are_decoded_exactly_and_the_bound_is_inclusive(primes):
    bound = (np.prod(primes, dtype=np.int64) - 1) // 2
    rng = np.random.default_rng(len(primes))
    values = rng.integers(-bound, bound + 1, size=(3, 5))
    values[0, :2] = (-bound, bound)
    # unreduced sums of uploads (what a coordinator adds up) are accepted as residues
    residues = [values % p + p * rng.integers(0, 50, size=values.shape) for p in primes]
    decoded = decode_residues(residues, primes, bound, signed=True)
    expected = [[_python_crt([int(r[i, j]) for r in residues], primes, -bound, bound)
                 for j in range(5)] for i in range(3)]
    assert decoded.dtype == np.int64 and decoded.tolist() == expected == values.tolist()


def test_a_signed_value_outside_the_bound_names_the_largest_magnitude():
    primes = (251, 241)
    residues = [np.array([5, 40, (-39) % p]) for p in primes]
    with pytest.raises(WrapAroundError, match=r"decoded values exceed the largest possible "
                                              r"value \(40 > 39\)") as info:
        decode_residues(residues, primes, 39, signed=True)
    assert (info.value.largest, info.value.bound) == (40, 39)
    assert isinstance(info.value, ParameterError)
    assert decode_residues(residues, primes, 40, signed=True).tolist() == [5, 40, -39]


def test_unsigned_values_are_checked_against_the_bound_named_in_the_message():
    primes = (13, 11)
    residues = [np.array([[100 % 13, 3]]), np.array([[100 % 11, 3]])]
    assert decode_residues(residues, primes, 100).tolist() == [[100, 3]]
    with pytest.raises(WrapAroundError, match=r"^sums exceed the largest possible value "
                                              r"\(100 > 99\): a contribution was corrupted$"):
        decode_residues(residues, primes, 99, what="sums")


@pytest.mark.parametrize("primes", [(2147483647,), (65521, 65519), (251, 241, 239)])
@pytest.mark.parametrize("tile_bytes", [1, 10**9])
def test_decode_upper_gives_the_symmetric_matrix_from_the_upper_residues(primes, tile_bytes,
                                                                        tmp_path):
    n = 9
    rng = np.random.default_rng(n + len(primes))
    top = min(2**40, int(np.prod(primes, dtype=object)) - 1)
    upper = np.triu(rng.integers(0, top + 1, size=(n, n)), 1)
    garbage = rng.integers(0, 1000, size=(n, n))  # left of and on the diagonal: ignored
    dtype = np.int32 if len(primes) == 1 else np.int64
    result = np.lib.format.open_memmap(tmp_path / "d.npy", mode="w+", dtype=dtype,
                                       shape=(n, n))
    result[...] = np.where(np.triu(np.ones((n, n), bool), 1), upper % primes[0],
                           garbage % primes[0])
    others = [np.where(upper > 0, upper % p, garbage % p).astype(np.uint32)
              for p in primes[1:]]
    decode_upper(result, others, primes, bound=int(upper.max()), tile_bytes=tile_bytes)
    expected = [[int(upper[min(i, j), max(i, j)]) for j in range(n)] for i in range(n)]
    assert np.asarray(result).tolist() == expected


@pytest.mark.parametrize("primes", [(2147483647,), (65521, 65519)])
def test_decode_upper_refuses_a_distance_above_the_bound(primes):
    n = 5
    upper = np.triu(np.full((n, n), 50, dtype=np.int64), 1)
    upper[3, 4] = 51
    result = upper % primes[0]
    others = [(upper % p).astype(np.uint32) for p in primes[1:]]
    with pytest.raises(WrapAroundError, match=r"^combined distances exceed the largest "
                                              r"possible value \(51 > 50\)") as info:
        decode_upper(result, others, primes, bound=50, what="combined distances")
    assert (info.value.largest, info.value.bound) == (51, 50)


def test_decode_upper_needs_one_residue_matrix_per_further_prime():
    with pytest.raises(ParameterError, match="1 residue matrices for the 2 primes after"):
        decode_upper(np.zeros((2, 2), np.int64), [np.zeros((2, 2), np.uint32)], (7, 11, 13))


@pytest.mark.parametrize("dtype", [np.uint32, np.int64])
def test_add_reduced_adds_modulo_p_in_place_and_refuses_values_of_p_or_more(dtype):
    p = 2147483647
    rng = np.random.default_rng(3)
    target = rng.integers(0, p, size=(4, 6)).astype(dtype)
    upload = rng.integers(0, p, size=(4, 6)).astype(np.uint32)
    expected = [[(int(t) + int(u)) % p for t, u in zip(tr, ur)]
                for tr, ur in zip(target.tolist(), upload.tolist())]
    view = target[1:, 2:]  # a strided view is updated in place
    add_reduced(view, upload[1:, 2:], p)
    assert target[1:, 2:].tolist() == [row[2:] for row in expected[1:]]
    upload[0, 0] = p
    with pytest.raises(ParameterError, match=r"upload holds a value >= p = 2147483647"):
        add_reduced(target, upload, p)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("height", [1, 7, 64, 65, 130, 300])
def test_blocks_of_any_height_give_the_symmetric_matrix(dtype, height):
    rng = np.random.default_rng(height)
    n = 211
    uploads = rng.integers(0, 2**30, (n, n)).astype(dtype)  # both triangles hold values
    upper = np.triu(uploads.astype(np.int64), 1)
    expected = upper + upper.T
    matrix = uploads.copy()
    tops = [int(_finish_rows_one_prime(matrix, a, min(n, a + height)))
            for a in range(0, n, height)]
    assert np.array_equal(matrix, expected)
    assert max(tops) == int(upper.max())
    for a, top in zip(range(0, n, height), tops):  # each block: the max of its own rows
        assert top == int(upper[a:a + height].max())


def test_a_memory_mapped_result_is_finished_in_place(tmp_path):
    n = 70
    matrix = np.lib.format.open_memmap(tmp_path / "d.npy", mode="w+", dtype=np.int32,
                                       shape=(n, n))
    rng = np.random.default_rng(0)
    matrix[...] = rng.integers(0, 1000, (n, n))
    upper = np.triu(np.asarray(matrix, dtype=np.int64), 1)
    for a in range(0, n, 16):
        _finish_rows_one_prime(np.asarray(matrix), a, min(n, a + 16))
    matrix.flush()
    assert np.array_equal(np.load(tmp_path / "d.npy"), upper + upper.T)


@pytest.mark.parametrize("dtype", [np.uint32, np.int64])
def test_add_reduced_wraps_a_sum_of_exactly_p_to_zero(dtype):
    p = 2147483647
    target = np.array([[p - 1, 0, p - 1, 5]], dtype=dtype)
    add_reduced(target, np.array([[1, 0, p - 1, p - 5]], dtype=np.uint32), p)
    assert target.tolist() == [[0, 0, p - 2, 0]]


def test_signed_uint32_residues_with_a_bound_past_their_range_are_decoded_exactly():
    # residues as the wire carries them (uint32) under a bound that only several primes
    # allow: the shift by the bound is done in int64, not in the residues' dtype
    primes = (2147483647, 2147483629)
    bound = 2**60
    values = [-bound, bound, -1, 0, 12345678901234567]
    residues = [np.array([v % p for v in values], dtype=np.uint32) for p in primes]
    assert decode_residues(residues, primes, bound, signed=True).tolist() == values


def test_decode_upper_names_decoded_distances_unless_told_otherwise():
    primes = (65521, 65519)
    upper = np.triu(np.full((3, 3), 7, dtype=np.int64), 1)
    with pytest.raises(WrapAroundError, match=r"^decoded distances exceed the largest "
                                              r"possible value \(7 > 6\)"):
        decode_upper(upper % primes[0], [(upper % primes[1]).astype(np.uint32)], primes,
                     bound=6)
