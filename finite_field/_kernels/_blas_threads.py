"""Single-threaded BLAS while the pairwise kernels run (``_single_threaded_blas``).

The pairwise kernels run several single-threaded BLAS products at once from plain Python
threads (one per core, each followed by its numba reduction). A multi-threaded BLAS would
fork and join its own threads for every tile, its idle workers spin between calls and
steal the cores from the reductions, and on a loaded machine every join waits for the
slowest thread. _single_threaded_blas() sets every BLAS that threadpoolctl finds loaded in
this process (OpenBLAS, MKL, BLIS, FlexiBLAS; on any platform) to one thread and restores
it after. threadpoolctl's own ``threadpool_limits`` saves and restores per call, which is
wrong when several threads enter at once (the first to leave would restore the count
while the others still run); this guard counts its entries and the first sets, the last
restores. threadpoolctl (3.6 and later) also lets only one Python thread ever change
OpenBLAS's process-wide count and silently ignores the others; the guard may be left by
another thread than the one that entered it, so it takes that control (under its lock)
right before it sets or restores. Where no BLAS is found it changes nothing and reports
False; the pairwise kernels then keep BLAS's own threads. Speed only, never results.
"""

from __future__ import annotations

import contextlib
import threading

import threadpoolctl
from threadpoolctl import ThreadpoolController

_blas_lock = threading.Lock()
_blas_depth = 0
_controller: ThreadpoolController | None = None   # the loaded libraries, found once
_limiter = None                                    # restores the saved counts


def _take_control() -> None:
    """Let this thread change OpenBLAS's count (threadpoolctl >= 3.6 gives that right to
    one thread only; older versions have no such rule)."""
    clear = getattr(getattr(threadpoolctl, "OpenBLASController", None),
                    "clear_controlling_thread", None)
    if clear is not None:
        clear(force=True)


@contextlib.contextmanager
def _single_threaded_blas():
    """Context manager: BLAS uses one thread inside; yields whether any BLAS was found.

    Re-entrant and safe to enter from several threads at once (the first entry saves and
    sets the thread counts, the last exit restores them).
    """
    global _blas_depth, _controller, _limiter
    with _blas_lock:
        if _controller is None:
            _controller = ThreadpoolController()
        blas = _controller.select(user_api="blas")
        if _blas_depth == 0 and len(blas):
            _take_control()
            _limiter = blas.limit(limits=1)
        _blas_depth += 1
        active = bool(len(blas))
    try:
        yield active
    finally:
        with _blas_lock:
            _blas_depth -= 1
            if _blas_depth == 0 and _limiter is not None:
                _take_control()
                _limiter.restore_original_limits()
                _limiter = None
