r"""A party's rows, read from a ``.npy`` or ``.csv`` file (``omnifc join --data``).

Every way a file can be unusable (missing, empty, not an array, not numeric) ends in one
:class:`InputError` naming the file; where a CSV file goes wrong is said by
:mod:`protocols._csv`.

Examples
--------
>>> import os, tempfile
>>> path = os.path.join(tempfile.mkdtemp(), "rows.csv")
>>> _ = open(path, "w").write("1,2\n3,4.5\n")
>>> load_party_data(path).tolist()
[[1.0, 2.0], [3.0, 4.5]]
"""

from __future__ import annotations

import os
import pathlib

import numpy as np

from finite_field import InputError

__all__ = ["load_party_data"]


def load_party_data(path) -> np.ndarray:
    """Rows of a party from ``.npy`` or ``.csv`` (comma-separated numbers, no header).

    A ``.npy`` file of float64 rows is returned memory-mapped, read-only (no copy in
    memory: :class:`protocols.Party` quantizes it a block of rows at a time and keeps
    only the small integers); any other file is read into a float64 array. Every way a file can be unusable (missing, empty, not an array, not numeric) ends in
    one :class:`InputError` naming the file.
    """
    path = pathlib.Path(path)
    if path.suffix not in (".npy", ".csv"):
        raise InputError(f"data must be a .npy or .csv file, got {str(path)!r}")
    if not path.is_file():
        raise InputError(f"data file {str(path)!r} not found (working directory "
                         f"{os.getcwd()})")
    if path.stat().st_size == 0:
        raise InputError(f"data file {str(path)!r} is empty (0 bytes)")
    if path.suffix == ".npy":
        try:
            # float64 rows stay in the file: memory-mapped read-only (file pages, which
            # the kernel can drop, not anonymous memory); the party quantizes them a
            # block of rows at a time (protocols._party). Anything else loads as before.
            data = np.load(path, mmap_mode="r", allow_pickle=False)
            if data.dtype == np.float64 and data.ndim >= 1 and data.dtype.isnative:
                return data
        except (ValueError, OSError, EOFError):
            pass  # not mappable (or not an array): read below, which names the problem
        try:
            data = np.load(path, allow_pickle=False)
        except (ValueError, OSError, EOFError) as error:
            raise InputError(f"could not read {str(path)!r} as a NumPy .npy array: "
                             f"{error}") from None
        if not isinstance(data, np.ndarray) or not (
                np.issubdtype(data.dtype, np.number) or data.dtype == np.bool_) \
                or np.issubdtype(data.dtype, np.complexfloating):
            raise InputError(f"{str(path)!r} holds a {getattr(data, 'dtype', type(data))} "
                             "array; the rows must be real numbers (save them with "
                             "np.save(path, rows.astype(float)))")
    else:
        from ._csv import csv_problem

        try:
            data = np.loadtxt(path, delimiter=",", dtype=np.float64, ndmin=2)
        except ValueError as error:
            where = csv_problem(path) or str(error).split("; use `usecols`")[0]
            raise InputError(f"could not read {str(path)!r} as numeric CSV (one row per "
                             f"line, comma-separated numbers, no header): {where}") from None
        if not np.isfinite(data).all():
            where = csv_problem(path) or "not every entry is finite"
            raise InputError(f"{str(path)!r}: {where}")
    return np.asarray(data, dtype=np.float64)
