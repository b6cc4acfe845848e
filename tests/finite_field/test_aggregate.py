"""Masked-upload and accumulation kernels against Python integers."""

from __future__ import annotations

import numpy as np
import pytest

from finite_field import (ParameterError, add_reduced, add_upload, masked_upload,
                          masked_upload_streams, symmetrize_mod)


def _reference_upload(values, weight, adds, subs, p):
    flat = [int(v) for v in np.asarray(values).reshape(-1)]
    out = []
    for k, v in enumerate(flat):
        acc = v * weight + sum(int(a[k]) for a in adds) - sum(int(s[k]) for s in subs)
        out.append(acc % p)
    return np.array(out, dtype=np.int64).reshape(np.shape(values))


@pytest.mark.parametrize("n_adds, n_subs", [(0, 0), (1, 0), (0, 1), (2, 3), (5, 5)])
def test_masked_upload_equals_python_integers(prime, seeded_source, n_adds, n_subs):
    rng = np.random.Generator(np.random.PCG64(n_adds * 10 + n_subs))
    values = rng.integers(0, prime, size=(7, 9))
    values[0, :3] = [0, prime - 1, prime - 1]
    weight = int(rng.integers(0, prime))
    # any uint32 masks, including values >= p and the extremes
    adds = rng.integers(0, 2**32, size=(n_adds, values.size), dtype=np.uint32)
    subs = rng.integers(0, 2**32, size=(n_subs, values.size), dtype=np.uint32)
    if n_adds:
        adds[0, :2] = [2**32 - 1, 0]
    got = masked_upload(values, weight, adds, subs, prime)
    assert got.dtype == np.uint32
    assert np.array_equal(got.astype(np.int64), _reference_upload(values, weight, adds, subs, prime))


def test_masked_upload_on_strided_views_and_largest_weight():
    p = 2**31 - 1
    big = np.full((6, 8), p - 1, dtype=np.int64)
    view = big[1:5, 2:]                        # non-contiguous rows
    adds = np.full((3, view.size), 2**32 - 1, dtype=np.uint32)
    got = masked_upload(view, p - 1, adds, (), p)
    assert np.array_equal(got.astype(np.int64), _reference_upload(view, p - 1, adds, [], p))


def test_masks_cancel_in_the_sum():
    # +m for one party and -m for the other: the sum of uploads is the weighted sum alone.
    p = 65521
    rng = np.random.Generator(np.random.PCG64(3))
    a, b = rng.integers(0, p, size=(2, 50))
    mask = rng.integers(0, p, size=(1, 50), dtype=np.uint32)
    total = (masked_upload(a, 3, mask, (), p).astype(np.int64)
             + masked_upload(b, 5, (), mask, p).astype(np.int64)) % p
    assert np.array_equal(total, (3 * a + 5 * b) % p)


@pytest.mark.parametrize("bad", [-1, 13, 2**40])
def test_masked_upload_refuses_unreduced_values(bad):
    with pytest.raises(ParameterError, match=r"\[0, 13\)"):
        masked_upload(np.array([1, bad, 2]), 1, (), (), 13)


def test_add_upload_accumulates_readonly_views_and_checks_range():
    p = 2**31 - 1
    acc = np.zeros((3, 4), dtype=np.int64)
    data = np.array([[p - 1] * 4] * 3, dtype="<u4").tobytes()
    upload = np.frombuffer(data, dtype="<u4").reshape(3, 4)   # read-only, as received
    for _ in range(5):
        add_upload(acc[:, 1:], upload[:, 1:], p)               # strided target
    assert np.array_equal(acc[:, 0], [0, 0, 0])
    assert np.array_equal(acc[:, 1:], np.full((3, 3), 5 * (p - 1)))
    bad = np.frombuffer(np.array([1, p], dtype="<u4").tobytes(), dtype="<u4")
    target = np.zeros(2, dtype=np.int64)
    with pytest.raises(ParameterError, match=">= p"):
        add_upload(target, bad, p)


def test_symmetrize_mod_mirrors_the_reduced_upper_triangle(prime):
    rng = np.random.Generator(np.random.PCG64(prime))
    m = rng.integers(0, 2**40, size=(6, 6))
    expected = np.triu(m % prime, 1)
    expected = expected + expected.T
    assert np.array_equal(symmetrize_mod(m.copy(), prime), expected)
    with pytest.raises(ParameterError, match="square"):
        symmetrize_mod(np.zeros((2, 3), dtype=np.int64), prime)


def test_kernels_are_right_uncompiled():
    # The same Python source, run by the interpreter (NUMBA_DISABLE_JIT=1).
    import os
    import subprocess
    import sys

    code = ("import doctest, numba, finite_field._aggregate as m\n"
            "assert not hasattr(m._masked_upload_kernel, 'signatures')\n"
            "r = doctest.testmod(m)\n"
            "assert r.attempted > 0 and r.failed == 0, r\n")
    env = dict(os.environ, NUMBA_DISABLE_JIT="1")
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=120)


class _Words:
    """A mask stream over fixed words (``next(count)``, as masked_upload_streams expects)."""

    def __init__(self, words):
        self.words, self.at = np.asarray(words, dtype=np.uint32), 0

    def next(self, count):
        self.at += count
        return self.words[self.at - count:self.at]


@pytest.mark.parametrize("shape", [(1, 5), (3, 40000), (70, 700), (0, 9), (4, 0)])
@pytest.mark.parametrize("signs", [(), (False,), (True,), (False, True, True, False)])
def test_masked_upload_streams_with_pairwise_signs_equals_python_integers(shape, signs):
    # +1/-1 streams take the one-pass path (stacked words, one kernel call per chunk); the
    # same result as Python integers for every chunking (40000 columns: a row per chunk).
    p = 2**31 - 1
    rng = np.random.default_rng(sum(shape) + len(signs))
    values = rng.integers(0, p, (shape[0], shape[1] + 2))[:, 2:]  # a strided view
    words = [rng.integers(0, p, values.size, dtype=np.uint32) for _ in signs]
    got = masked_upload_streams(values, 99, [(_Words(w), s) for w, s in zip(words, signs)], p)
    expected = [99 * int(v) for v in values.reshape(-1)]
    for w, negate in zip(words, signs):
        expected = [e - int(m) if negate else e + int(m) for e, m in zip(expected, w)]
    assert got.dtype == np.uint32 and got.shape == values.shape
    assert got.reshape(-1).tolist() == [e % p for e in expected]


@pytest.mark.parametrize("stream", [_Words, "fill"])
def test_pairwise_upload_for_every_sign_pattern_up_to_four_streams(stream):
    # The kernel folds the first two streams (adds first, then subs) into its multiply
    # pass and adds the rest in further passes: every pattern of up to four +1/-1 streams
    # (no stream, adds only, subs only, mixed, in any order), against Python integers.
    import itertools

    p = 2**31 - 1
    kind = _FillWords if stream == "fill" else _Words
    rng = np.random.default_rng(4)
    values = rng.integers(0, p, (5, 40))[:, 3:]  # a strided view
    values[0, :4] = [0, p - 1, p - 1, 1]
    for count in range(5):
        for signs in itertools.product((False, True), repeat=count):
            words = [rng.integers(0, p, values.size, dtype=np.uint32) for _ in signs]
            for w in words:
                w[:2] = [p - 1, 0]
            weight = int(rng.integers(0, p))
            got = masked_upload_streams(values, weight,
                                        [(kind(w), s) for w, s in zip(words, signs)], p)
            expected = [weight * int(v) for v in values.reshape(-1)]
            for w, negate in zip(words, signs):
                expected = [e - int(m) if negate else e + int(m) for e, m in zip(expected, w)]
            assert got.reshape(-1).tolist() == [e % p for e in expected], signs


class _FillWords(_Words):
    """A stream that also writes in place (``fill(out)``, as ElementStream does)."""

    def fill(self, out):
        out[:] = self.next(out.size)
        return out


@pytest.mark.parametrize("p", [2, 3, 65521, 2**31 - 1])
@pytest.mark.parametrize("stream", [_Words, _FillWords])
def test_pairwise_upload_at_the_extremes_of_the_field_equals_python_integers(p, stream):
    # Shoup's multiplication by the weight is exact for every weight and value in
    # [0, p): the largest ones (p - 1), zero, and words at 0 and p - 1, on a view cut
    # from inside a larger matrix (rows and columns) and on a copy of it.
    rng = np.random.default_rng(p)
    big = rng.integers(0, p, (9, 40))
    big[2, 3:8] = [0, p - 1, p - 1, 1, p - 1]
    view = big[2:8, 3:]
    words = [rng.integers(0, p, view.size).astype(np.uint32) for _ in range(3)]
    words[0][:3], words[2][:3] = [p - 1, 0, p - 1], [p - 1, p - 1, 0]
    signs = (False, True, True)
    for weight in (0, 1, p - 1, int(rng.integers(0, p))):
        for values in (view, view.copy()):
            got = masked_upload_streams(values, weight,
                                        [(stream(w), s) for w, s in zip(words, signs)], p)
            expected = [weight * int(v) + int(words[0][i]) - int(words[1][i])
                        - int(words[2][i]) for i, v in enumerate(values.reshape(-1))]
            assert got.reshape(-1).tolist() == [e % p for e in expected]


@pytest.mark.parametrize("stream", [_Words, _FillWords])
def test_pairwise_upload_refuses_a_stream_word_of_p_or_more(stream):
    # The +1/-1 path relies on stream elements being reduced; a word >= p is refused,
    # not folded in silently.
    p = 13
    for bad in (13, 2**32 - 1):
        words = np.array([1, 2, bad, 4], dtype=np.uint32)
        with pytest.raises(ParameterError, match=r"mask stream returned words outside "
                                                 r"\[0, 13\)"):
            masked_upload_streams(np.ones((2, 2), dtype=np.int64), 1,
                                  [(stream(words), True)], p)


def test_add_reduced_on_views_of_every_shape_equals_python_integers():
    # A block of an int32 matrix's uint32 view (the accumulator's result), a read-only
    # upload as received, and views that are no row/column block of a contiguous matrix
    # (a transposed one, every other column): each is updated in place, nothing else.
    p = 2147483647
    rng = np.random.default_rng(4)
    result = rng.integers(0, p, (7, 9)).astype(np.int32)
    for view_of in (lambda m: m[2:6, 3:], lambda m: m.T[1:4], lambda m: m[:, ::2]):
        matrix = result.copy()
        view = view_of(matrix.view(np.uint32))
        data = rng.integers(0, p, view.shape).astype("<u4")
        data[0, :2] = [p - 1, 0]
        upload = np.frombuffer(data.tobytes(), dtype="<u4").reshape(view.shape)
        expected = result.astype(np.int64)
        view_of(expected)[...] = (view_of(expected) + data) % p
        add_reduced(view, upload, p)
        assert matrix.astype(np.int64).tolist() == expected.tolist()


@pytest.mark.parametrize("signs", [(False, True), (1, 5)])
def test_masked_upload_streams_refuses_unreduced_values_on_both_paths(signs):
    p = 13
    values = np.array([[1, 2], [3, 13]])
    streams = [(_Words([0] * 4), s) for s in signs]
    with pytest.raises(ParameterError, match=r"reduced field elements in \[0, 13\)"):
        masked_upload_streams(values, 1, streams, p)


def test_masked_upload_streams_refuses_a_short_stream_on_both_paths():
    for signs in ((True,), (3,)):
        with pytest.raises(ParameterError, match=r"a mask stream returned \(3,\) uint32, "
                                                 r"expected \(4,\) uint32"):
            masked_upload_streams(np.zeros((2, 2), dtype=np.int64), 1,
                                  [(_Words([1, 2, 3]), s) for s in signs], 13)
