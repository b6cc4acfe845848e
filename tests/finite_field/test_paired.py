"""paired_sq_distances (finite_field/_kernels/_paired.py): the kernel of the pairs layout,
exact against Python integers over the named primes (the int64 boundary prime included),
compiled and uncompiled."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from finite_field import ParameterError, paired_sq_distances


def _python(x, rows, cols, p):
    return [sum((int(a) - int(b)) ** 2 for a, b in zip(x[i], x[j])) % p
            for i, j in zip(rows, cols)]


def test_paired_distances_equal_python_integers(prime):
    rng = np.random.default_rng(prime % 1000)
    x = rng.integers(0, prime, size=(9, 37), dtype=np.int64)
    x[0] = prime - 1  # the largest differences
    x[1] = 0
    rows = np.array([0, 1, 3, 8, 2, 0, 5])
    cols = np.array([1, 0, 3, 2, 8, 6, 4])
    out = paired_sq_distances(x, rows, cols, prime)
    assert out.dtype == np.int64
    assert out.tolist() == _python(x, rows, cols, prime)


def test_bad_arguments_are_refused():
    x = np.zeros((3, 2), dtype=np.int64)
    with pytest.raises(ParameterError, match=r"rows must be row indices in \[0, 3\)"):
        paired_sq_distances(x, [0, 3], [1, 2], 13)
    with pytest.raises(ParameterError, match="same length"):
        paired_sq_distances(x, [0, 1], [1], 13)
    with pytest.raises(ParameterError, match="2-d array"):
        paired_sq_distances(np.zeros(3, dtype=np.int64), [0], [1], 13)


@pytest.mark.timeout(120)
def test_the_kernel_source_is_right_uncompiled():
    code = ("import numpy as np; from finite_field import paired_sq_distances as f; "
            "x = np.array([[2147483646, 0, 5], [0, 2147483646, 7]]); "
            "print(f(x, np.array([0]), np.array([1]), 2147483647).tolist())")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=dict(os.environ, NUMBA_DISABLE_JIT="1"), timeout=100)
    assert done.returncode == 0, done.stderr[-2000:]
    expected = (2 * 2147483646 ** 2 + 4) % 2147483647
    assert done.stdout.strip() == f"[{expected}]"
