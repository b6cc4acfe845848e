"""Single-threaded OpenBLAS while the pairwise kernels run (``_single_threaded_blas``).

The pairwise kernels run several single-threaded BLAS products at once from plain Python
threads (one per core, each followed by its numba reduction). A multi-threaded BLAS would
fork and join its own threads for every tile, its idle workers spin between calls and
steal the cores from the reductions, and on a loaded machine every join waits for the
slowest thread. _single_threaded_blas() finds the OpenBLAS libraries loaded in this
process (Linux: /proc/self/maps), sets their thread count to 1 and restores it after,
without depending on threadpoolctl: finite_field may import only numpy, numba and galois,
so threadpoolctl is not available at this layer. Where no OpenBLAS is found it changes
nothing and reports False; the pairwise kernels then keep BLAS's own threads. Speed only,
never results.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading

_blas_lock = threading.Lock()
_blas_depth = 0
_blas_saved: list[tuple[object, int]] = []
_blas_controls: list[tuple[object, object]] | None = None

_BLAS_NAMES = [(f"{prefix}openblas_get_num_threads{suffix}",
                f"{prefix}openblas_set_num_threads{suffix}")
               for prefix in ("", "scipy_") for suffix in ("", "64_")]


def _find_blas_controls() -> list[tuple[object, object]]:
    paths = []
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.rstrip("\n").split(" ")[-1]
                if "openblas" in path.lower() and path.startswith("/") and path not in paths:
                    paths.append(path)
    except OSError:
        return []
    controls = []
    for path in paths:
        try:
            # RTLD_NOLOAD: only a handle to the copy already loaded, never a second one.
            lib = ctypes.CDLL(path, mode=getattr(os, "RTLD_NOLOAD", 0) | os.RTLD_LAZY)
        except OSError:
            continue
        for get_name, set_name in _BLAS_NAMES:
            getter = getattr(lib, get_name, None)
            setter = getattr(lib, set_name, None)
            if getter is not None and setter is not None:
                getter.restype = ctypes.c_int
                setter.argtypes = [ctypes.c_int]
                controls.append((getter, setter))
                break
    return controls


@contextlib.contextmanager
def _single_threaded_blas():
    """Context manager: OpenBLAS uses one thread inside; yields whether it could be set.

    Re-entrant and safe to enter from several threads at once (the first entry saves and
    sets the thread counts, the last exit restores them).
    """
    global _blas_depth, _blas_controls, _blas_saved
    with _blas_lock:
        if _blas_controls is None:
            _blas_controls = _find_blas_controls()
        if _blas_depth == 0:
            _blas_saved = []
            for getter, setter in _blas_controls:
                _blas_saved.append((setter, int(getter())))
                setter(1)
        _blas_depth += 1
        active = bool(_blas_controls)
    try:
        yield active
    finally:
        with _blas_lock:
            _blas_depth -= 1
            if _blas_depth == 0:
                for setter, count in _blas_saved:
                    setter(count)
                _blas_saved = []
