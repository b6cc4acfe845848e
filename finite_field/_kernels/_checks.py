"""Argument checks shared by the public kernels: modulus, integer arrays, field elements."""

from __future__ import annotations

import numpy as np

from .._errors import ParameterError


def _check_modulus(p) -> int:
    if isinstance(p, (bool, np.bool_)) or not isinstance(p, (int, np.integer)):
        raise ParameterError(f"the modulus must be an integer, got {type(p).__name__}")
    p = int(p)
    if not 2 <= p < 2**31:
        raise ParameterError(f"the modulus must be in [2, 2^31), got {p}")
    return p


def _as_int64(x, name: str) -> np.ndarray:
    x = np.asarray(x)
    if x.dtype.kind not in "iu" and not (x.dtype == object and x.size == 0) and x.size:
        raise ParameterError(f"{name} must hold integers, got dtype {x.dtype}")
    if x.dtype.kind == "u" and x.size and x.max() > np.iinfo(np.int64).max:
        raise ParameterError(f"{name} holds values above 2^63")
    return np.ascontiguousarray(x, dtype=np.int64)


def _check_field_array(x, p: int, name: str) -> np.ndarray:
    x = _as_int64(x, name)
    if x.size and (x.min() < 0 or x.max() >= p):
        raise ParameterError(
            f"{name} must hold reduced field elements in [0, {p}), "
            f"got values in [{int(x.min())}, {int(x.max())}]")
    return x


def _check_matrix(x, p: int, name: str) -> np.ndarray:
    x = _as_int64(x, name)
    if x.ndim != 2:
        raise ParameterError(f"{name} must be a 2-d array (n, k), got shape {x.shape}")
    return x
