"""Where a distance result is kept: RAM or a ``.npy`` memory map, within a memory budget.

The storage helpers of :mod:`protocols._accumulator` (issue 20 moved them here unchanged):
the budget and tile-size checks and defaults, the storage dtype, the ``.npy`` file's JSON
sidecar and format name, allocating, reopening and removing the arrays and files, and
:class:`IncompleteResultError` for a result that is not finished.
:mod:`protocols._accumulator` re-exports every name.

>>> _rows_per_tile(10, 80, 200)
2
>>> storage_dtype(2**31 - 1, 1).name, storage_dtype(2**31, 1).name
('int32', 'int64')
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from pathlib import Path

import numpy as np

from finite_field import InputError, ParameterError

__all__ = ["DEFAULT_MEMORY_BUDGET", "DEFAULT_TILE_BYTES", "IncompleteResultError",
           "storage_dtype", "rows_per_tile"]

logger = logging.getLogger(__name__)

#: Bytes of n x n data kept in RAM before the result moves to a memory-mapped file (2 GiB).
DEFAULT_MEMORY_BUDGET = 2 * 2**30
#: Bytes of one working tile (row block) in streamed passes (64 MiB).
DEFAULT_TILE_BYTES = 64 * 2**20
_FORMAT = "omnifc-distances/1"


class IncompleteResultError(InputError):
    """A result file or store that is not a finished omnifc result (no metadata, or its
    metadata says ``"complete": false``): a session that failed or is still writing."""


# -- storage helpers ------------------------------------------------------------------
def _check_budget(memory_budget) -> int:
    if memory_budget is None:
        return DEFAULT_MEMORY_BUDGET
    if isinstance(memory_budget, bool) or not isinstance(memory_budget, (int, np.integer)) \
            or memory_budget < 0:
        raise ParameterError(f"memory_budget must be a non-negative number of bytes, got "
                             f"{memory_budget!r}")
    return int(memory_budget)


def _check_tile_bytes(tile_bytes) -> int:
    if tile_bytes is None:
        return DEFAULT_TILE_BYTES
    if isinstance(tile_bytes, bool) or not isinstance(tile_bytes, (int, np.integer)) \
            or tile_bytes < 1:
        raise ParameterError(f"tile_bytes must be a positive number of bytes, got "
                             f"{tile_bytes!r}")
    return int(tile_bytes)


def _rows_per_tile(n: int, bytes_per_row: int, tile_bytes: int) -> int:
    return max(1, min(n, tile_bytes // max(1, bytes_per_row)))


rows_per_tile = _rows_per_tile  # public for omnifc (protocols.rows_per_tile)


def storage_dtype(distance_bound: int | None, n_primes: int) -> np.dtype:
    """int32 when one prime is used and every distance fits below 2^31, else int64."""
    if n_primes == 1 and distance_bound is not None and distance_bound < 2**31:
        return np.dtype(np.int32)
    return np.dtype(np.int64)


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".json")


def _allocate(shape, dtype, *, path: Path | None, budget: int, name: str, directory=None):
    """An array in RAM if it fits ``budget`` and no path is given, else a .npy memmap
    (at ``path``, or in a new temporary directory inside ``directory``, by default the
    system's).

    Returns (array, path or None, temporary directory or None).
    """
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    if path is None and nbytes <= budget:
        return np.zeros(shape, dtype=dtype), None, None
    tmpdir = None
    if path is None:
        tmpdir = tempfile.mkdtemp(prefix="omnifc-distances-",
                                  dir=None if directory is None else str(directory))
        path = Path(tmpdir) / f"{name}.npy"
    array = np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=shape)
    logger.info("%s: %.2f GB memory-mapped at %s", name, nbytes / 1e9, path)
    return array, path, tmpdir


def _reopen(shape, dtype, *, path: Path, budget: int, name: str, directory=None):
    """The existing .npy memmap at ``path`` (of ``shape`` and ``dtype``), for writing."""
    try:
        array = np.lib.format.open_memmap(path, mode="r+")
    except (OSError, ValueError) as error:
        raise ParameterError(f"cannot reopen the result {name} at {str(path)!r}: "
                             f"{error}") from None
    if array.shape != tuple(shape) or array.dtype != np.dtype(dtype):
        raise ParameterError(f"the result {name} at {str(path)!r} is {array.shape} "
                             f"{array.dtype}, expected {tuple(shape)} {np.dtype(dtype)}")
    return array, Path(path), None


def _remove(*paths) -> None:
    for p in paths:
        if p is None:
            continue
        p = Path(p)
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        else:
            try:
                p.unlink()
            except FileNotFoundError:
                pass
