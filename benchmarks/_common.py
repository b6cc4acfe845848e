"""Shared helpers for the benchmark scripts: timing, medians, tables, thread reporting.

Every benchmark reports a ratio against a baseline measured in the same run, with the
subject and its baseline timed in alternation (round robin) so that a change of machine
load during the run affects both alike. The medians of several runs are reported.

Also records what decides how fast BLAS and numba run here: the BLAS library and its
architecture (``threadpoolctl.threadpool_info()``), the thread-related environment
variables (``OPENBLAS_*``, ``OMP_*``, ``NUMBA_*``, ...), numba's threading layer and the
load average, since the machine may be shared.
"""

from __future__ import annotations

import contextlib
import gc
import os
import platform
import statistics
import textwrap
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

__all__ = ["Row", "time_round_robin", "SETTLE_SECONDS", "environment", "print_environment",
           "print_grid", "print_ratio_tables", "blas_threads", "format_seconds",
           "WIDTH", "wrapped", "int_list"]

#: Every line a benchmark prints fits this many columns.
WIDTH = 100

_ENV_PREFIXES = ("OPENBLAS_", "GOTO", "OMP_", "MKL_", "NUMBA_", "BLIS_", "VECLIB_",
                 "KMP_", "GOMP_")


@dataclass
class Row:
    """One line of a benchmark table."""

    kernel: str
    shape: str
    seconds: float
    baseline_name: str
    baseline_seconds: float | None
    target: str
    passed: bool | None
    rate: str = ""
    note: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def ratio(self) -> float | None:
        if self.baseline_seconds in (None, 0):
            return None
        return self.seconds / self.baseline_seconds


#: Pause before each timed call (seconds, untimed). OpenBLAS worker threads keep spinning
#: for about 0.1 s after a multi-threaded call (OPENBLAS_THREAD_TIMEOUT, default 2^28
#: cycles) and would slow down whatever is timed next; the pause lets every call start
#: with idle worker threads, so that no function is charged for its predecessor.
SETTLE_SECONDS = 0.2


def time_round_robin(functions: dict[str, Callable[[], object]], repeats: int,
                     warmup: int = 1, settle: float | None = None) -> dict[str, list[float]]:
    """Wall-clock seconds of each function over ``repeats`` alternating rounds.

    Each round calls every function once, in order; results are dropped right away
    (and garbage collected outside the timed region) so that large outputs do not pile up.
    Every timed call follows a pause of ``settle`` seconds (:data:`SETTLE_SECONDS`).
    """
    settle = SETTLE_SECONDS if settle is None else settle
    for _ in range(warmup):
        for fn in functions.values():
            fn()
            gc.collect()
    times: dict[str, list[float]] = {name: [] for name in functions}
    for _ in range(repeats):
        for name, fn in functions.items():
            if settle:
                time.sleep(settle)
            start = time.perf_counter()
            result = fn()
            times[name].append(time.perf_counter() - start)
            del result
            gc.collect()
    return times


def int_list(text) -> list[int]:
    """The integers of a command-line list such as ``--seeds 3317-3328`` or ``--rows
    20,50,500``: comma-separated values and inclusive ranges ``lo-hi``, in the order given.

    >>> int_list("3-5,9")
    [3, 4, 5, 9]
    >>> int_list(20)
    [20]
    >>> int_list("9-3")
    Traceback (most recent call last):
    ...
    ValueError: '9-3': a range is written lo-hi with lo <= hi
    """
    out = []
    for part in str(text).split(","):
        lo, dash, hi = part.partition("-")
        try:
            first, last = int(lo), int(hi if dash else lo)
        except ValueError:
            raise ValueError(f"{part!r}: expected an integer or a range lo-hi "
                             "(e.g. 3317-3328)") from None
        if last < first:
            raise ValueError(f"{part!r}: a range is written lo-hi with lo <= hi")
        out.extend(range(first, last + 1))
    return out


def median(values: list[float]) -> float:
    return float(statistics.median(values))


@contextlib.contextmanager
def blas_threads(limit: int | None):
    """Limit BLAS threads inside the block (``None``: leave them as they are)."""
    if limit is None:
        yield
        return
    from threadpoolctl import threadpool_limits
    with threadpool_limits(limits=limit, user_api="blas"):
        yield


def environment() -> dict:
    """What determines BLAS/numba speed on this machine, as a plain dict."""
    import numba
    info: dict = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "numpy": np.__version__,
        "numba": numba.__version__,
        "numba_threads": numba.get_num_threads(),
        "loadavg": [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None,
        "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith(_ENV_PREFIXES)},
    }
    try:
        info["numba_threading_layer"] = numba.threading_layer()
    except ValueError:  # no parallel kernel has run yet
        info["numba_threading_layer"] = "(not initialised yet)"
    try:
        from threadpoolctl import threadpool_info
        info["threadpools"] = [
            {k: pool.get(k) for k in ("user_api", "internal_api", "prefix", "version",
                                      "architecture", "threading_layer", "num_threads")}
            for pool in threadpool_info()]
    except ImportError:
        info["threadpools"] = "threadpoolctl not installed (pip install threadpoolctl)"
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return info


def wrapped(text: str) -> str:
    """``text`` folded to :data:`WIDTH` columns, continuation lines indented."""
    return textwrap.fill(text, WIDTH, subsequent_indent="    ", break_on_hyphens=False)


def print_environment(info: dict) -> None:
    print(wrapped(f"python {info['python']} on {info['machine']}, {info.get('cpu', '?')}, "
                  f"{info['cpu_count']} CPUs; numpy {info['numpy']}, numba {info['numba']} "
                  f"({info['numba_threads']} threads, layer {info['numba_threading_layer']})"))
    pools = info["threadpools"]
    if isinstance(pools, str):
        print(wrapped(f"thread pools: {pools}"))
    else:
        for pool in pools:
            print(wrapped("thread pool: " + ", ".join(f"{k}={v}" for k, v in pool.items())))
    env = info["env"]
    print(wrapped("thread environment: " + (", ".join(f"{k}={v}" for k, v in env.items())
                                            if env else "(no OPENBLAS_*/OMP_*/NUMBA_*/MKL_* set)")))
    print(f"load average: {info['loadavg']}")


def format_seconds(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds >= 1:
        return f"{seconds:.3f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} us"


def print_grid(header: list[str], lines: list[list[str]]) -> None:
    """Print ``lines`` (lists of strings) as left-aligned columns under ``header``."""
    widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(header)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    print(fmt.format(*header).rstrip())
    print(fmt.format(*("-" * w for w in widths)))
    for line in lines:
        print(fmt.format(*line).rstrip())


def print_ratio_tables(rows: list[Row], *, reference: list[Row] = ()) -> None:
    """The results as tables of at most :data:`WIDTH` columns, each saying what it shows.

    1. speed: each kernel's median, its baseline's median (measured in the same run) and
       ``ratio = kernel / baseline``: lower is better, 1.00x is as fast as the baseline;
       a rate target (``>= ... G el/s``) is judged on the rate, not on the ratio.
    2. what was measured: the shape, the baseline and the rate (higher is better).
    3. ``reference`` rows (an independent library doing the same work): how many times
       slower it is than ours (higher means ours is faster).
    """
    print("speed: ratio = kernel median / baseline median, same run; lower is better")
    print("(a target in G el/s is judged on the rate of the next table, not on the ratio)")
    lines = []
    for row in rows:
        ratio = row.ratio
        verdict = "-" if row.passed is None else ("pass" if row.passed else "FAIL")
        lines.append([row.kernel, format_seconds(row.seconds),
                      format_seconds(row.baseline_seconds),
                      "-" if ratio is None else f"{ratio:.2f}x",
                      row.target if row.passed is not None else "-", verdict])
    print_grid(["kernel", "median", "baseline", "ratio", "target", "verdict"], lines)
    print()
    print("what was measured (rate: higher is better)")
    print_grid(["kernel", "shape", "baseline", "rate"],
               [[row.kernel, row.shape, row.baseline_name, row.rate or "-"] for row in rows])
    if reference:
        print()
        print("reference: galois (the test oracle) doing the same work; "
              "x slower = galois / ours")
        print_grid(["work", "galois", "ours", "x slower", "shape"],
                   [[row.kernel, format_seconds(row.seconds),
                     format_seconds(row.baseline_seconds),
                     "-" if row.ratio is None else f"{row.ratio:.0f}x", row.shape]
                    for row in reference])
    for row in [*rows, *reference]:
        if row.note:
            print(wrapped(f"  note [{row.kernel}]: {row.note}"))
