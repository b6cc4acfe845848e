"""The in-place finish of a one-prime result: diagonal zeroed, upper triangle mirrored,
largest distance reported, for any block height (numpy's triu as the oracle)."""

from __future__ import annotations

import numpy as np
import pytest

from protocols._accumulator import _finish_rows_one_prime


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
