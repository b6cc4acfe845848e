"""The plain-Python-thread task runner of the kernels (no OpenMP region, see the package doc).

The numba kernels release the GIL; these helpers run them in ``numba.get_num_threads()``
plain threads (this one and kept helper threads), at most 8.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

from .._jit import num_threads


#: Elements per inner block of the vectorized loops (two float64 accumulators each).
_BLOCK = 2048
#: Elements of work per scheduling step of the memory-bound kernels (about 0.1-1 ms).
_GRAIN = 2**18


def _split_range(n: int, parts: int, multiple: int = 1) -> list[tuple[int, int]]:
    """[0, n) cut into at most ``parts`` consecutive ranges (lengths multiples of ``multiple``)."""
    parts = max(1, min(parts, 8))
    step = max(1, -(-n // (multiple * parts)) * multiple)
    return [(a, min(n, a + step)) for a in range(0, n, step)] or [(0, 0)]


class KeptThreads:
    """A thread pool started on first use and kept for the life of the process: idle
    threads block on a queue (they do not spin), and a forked child starts its own (the
    parent's threads do not exist there).

    >>> pool = KeptThreads(1, "omnifc-example")
    >>> pool.get().submit(sum, [1, 2]).result(), pool.get() is pool.get()
    (3, True)
    """

    def __init__(self, workers: int, name: str) -> None:
        self._workers, self._name = workers, name
        self._pool: ThreadPoolExecutor | None = None
        self._pid: int | None = None
        self._lock = threading.Lock()

    def get(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None or self._pid != os.getpid():
                self._pool = ThreadPoolExecutor(self._workers, thread_name_prefix=self._name)
                self._pid = os.getpid()
            return self._pool


#: The kernels' helper threads.
_helpers = KeptThreads(7, "omnifc-kernel")


def _run_threads(kernel, arguments: list[tuple]) -> list:
    """kernel(*a) for each a in ``arguments``: the first in this thread, the others in
    helper threads (the kernels release the GIL; at most 7 helpers, kept between calls:
    starting threads for every call cost about 0.2 ms, as much as a small row block's
    work). Kernels never call this from a helper, so helpers never wait for helpers.
    Returns the results."""
    if len(arguments) == 1:
        return [kernel(*arguments[0])]
    pool = _helpers.get()
    futures = [pool.submit(kernel, *a) for a in arguments[1:]]
    try:
        first = kernel(*arguments[0])
    finally:
        results = [f.result() for f in futures]  # every helper done, also on an error
    return [first] + results


def _run_tasks(kernel, args: tuple, n_tasks: int, grain: int) -> int:
    """sum of kernel(*args, lo, hi) over [0, n_tasks), shared dynamically between threads.

    ``numba.get_num_threads()`` workers (this thread and plain helper threads; the
    kernels release the GIL) take ``grain`` tasks at a time from a shared counter, so a
    worker that the OS pauses does not hold the others up. Plain threads rather than an
    OpenMP region: no spinning workers are left behind to compete with BLAS or with the
    next kernel.
    """
    grain = max(1, grain)
    threads = max(1, min(num_threads(), 8, -(-n_tasks // grain)))
    if threads == 1:
        return int(kernel(*args, 0, n_tasks))
    counter = iter(range(0, n_tasks, grain))
    lock = threading.Lock()

    def worker():
        total = 0
        while True:
            with lock:
                lo = next(counter, None)
            if lo is None:
                return total
            total += int(kernel(*args, lo, min(n_tasks, lo + grain)))

    return sum(_run_threads(worker, [()] * threads))
