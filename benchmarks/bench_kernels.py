"""Benchmark of the finite-field hot paths against baselines measured in the same run.

Run ``python benchmarks/bench_kernels.py`` (about a minute and a half on 2 cores) or
``python benchmarks/bench_kernels.py --quick`` (small shapes, seconds: a smoke run, its
figures say little). Progress goes to stderr, one line per phase. Prints three tables,
each at most 100 columns wide: speed (kernel and baseline medians, ratio = kernel /
baseline, lower is better, target and verdict), what was measured (shape, baseline, rate:
higher is better) and the galois reference (how many times slower the oracle is). Exit status 0, or with ``--check`` 1 when a target is missed (speed
is never asserted in tests). Results depend on the machine's load: the load average is
printed before and after.

Rows (p = 2^31 - 1, the hardest prime):

* ``gram_matrix`` / ``sq_distances``: exact mod-p Gram matrix / pairwise squared
  distances of an n x k encoded matrix, against a float64 numpy matmul of the same shape
  (``a @ a.T``, (n x k) @ (k x n)). Target: at most 2x.
* ``distances_from_gram``: the one-pass combine G_ii + G_jj - 2 G_ij mod p, against a copy
  of the same n x n int64 array (``g.copy()``). Target: at most 1.5x.
* ``encode_blocks``: rate in output field elements (shares) per second; target 0.5 G/s.
  Baseline for context: a copy of an array of the output's size.
* ``weighted_sum``: rate in input field elements (r arrays x size) per second; target
  0.5 G/s. Baseline for context: a copy of the stacked input.
* ``galois``: the same Gram and encoding with galois field arrays on a small size, then
  extrapolated per multiply-add to the size above (stated in the shape column), against
  our ``gram_matrix`` / ``encode_blocks``: "x slower" is galois / ours.

Numba-parallel phases (``encode_blocks``, ``weighted_sum``, ``distances_from_gram``) run
with BLAS limited to one thread (threadpoolctl) unless ``--no-guard``: idle OpenBLAS
threads would otherwise compete for the cores. The Gram/distance kernels use BLAS for
their products and plain Python threads for the reductions, never an OpenMP region.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import (Row, blas_threads, environment, median, print_environment,  # noqa: E402
                     print_ratio_tables, time_round_robin)

from finite_field import (cross_sq_distances, distances_from_gram, encode_blocks,  # noqa: E402
                          gram_matrix, sq_distances, weighted_sum)

PRIME = 2**31 - 1


def _rng():
    return np.random.default_rng(20261130)  # benchmark inputs only, never protocol noise


def bench_gram(n: int, k: int, repeats: int) -> list[Row]:
    rng = _rng()
    x = rng.integers(0, PRIME, size=(n, k), dtype=np.int64)
    a = rng.random((n, k))
    times = time_round_robin({
        "matmul": lambda: a @ a.T,
        "gram": lambda: gram_matrix(x, PRIME),
        "sqd": lambda: sq_distances(x, PRIME),
    }, repeats)
    base = median(times["matmul"])
    shape = f"n={n}, k={k}"
    rows = []
    for key, name in (("gram", "gram_matrix"), ("sqd", "sq_distances")):
        t = median(times[key])
        rows.append(Row(name, shape, t, "float64 a @ a.T", base, "<= 2x",
                        t / base <= 2.0, rate=f"{n * n / t / 1e9:.2f} G entries/s"))
    return rows


def bench_gram_to_distances(n: int, k: int, repeats: int, guard: bool) -> list[Row]:
    rng = _rng()
    x = rng.integers(0, PRIME, size=(n, k), dtype=np.int64)
    g = gram_matrix(x, PRIME)
    work = g.copy()
    with blas_threads(1 if guard else None):
        times = time_round_robin({
            "copy": lambda: g.copy(),
            "combine": lambda: distances_from_gram(g, PRIME),
            # In place: the input changes every run but stays a valid field matrix, and the
            # work per element does not depend on the values.
            "in_place": lambda: distances_from_gram(work, PRIME, out=work),
        }, repeats)
    base = median(times["copy"])
    rows = []
    for key, label in (("combine", "new array"), ("in_place", "in place")):
        t = median(times[key])
        rows.append(Row(f"distances_from_gram, {label}", f"{n} x {n} int64", t, "g.copy()",
                        base, "<= 1.5x", t / base <= 1.5,
                        rate=f"{n * n / t / 1e9:.2f} G entries/s"))
    del g, work
    gc.collect()
    return rows


def bench_encode(n: int, lt: int, m: int, s: int, repeats: int, guard: bool) -> list[Row]:
    rng = _rng()
    matrix = rng.integers(0, PRIME, size=(lt, m), dtype=np.int64)
    blocks = rng.integers(0, PRIME, size=(n, lt, s), dtype=np.int64)
    template = np.empty((m, n, s), dtype=np.int64)
    template.fill(1)
    reused = np.empty_like(template)
    with blas_threads(1 if guard else None):
        times = time_round_robin({
            "copy": lambda: template.copy(),
            "encode": lambda: encode_blocks(matrix, blocks, PRIME),
            "encode_out": lambda: encode_blocks(matrix, blocks, PRIME, out=reused),
        }, repeats)
    rows = []
    for key, label in (("encode", "new array"), ("encode_out", "out= reused")):
        t = median(times[key])
        rate = m * n * s / t / 1e9
        rows.append(Row(f"encode_blocks, {label}", f"n={n}, l+t={lt}, m={m}, s={s}", t,
                        "copy of output", median(times["copy"]), ">= 0.5 G el/s out",
                        rate >= 0.5, rate=f"{rate:.2f} G out el/s",
                        note=f"{n * lt * s / t / 1e9:.2f} G input elements/s"))
    return rows


def bench_weighted_sum(r: int, size: int, repeats: int, guard: bool) -> Row:
    rng = _rng()
    weights = rng.integers(0, PRIME, size=r, dtype=np.int64)
    rows = rng.integers(0, PRIME, size=(r, size), dtype=np.int64)
    with blas_threads(1 if guard else None):
        times = time_round_robin({
            "copy": lambda: rows.copy(),
            "wsum": lambda: weighted_sum(weights, rows, PRIME),
        }, repeats)
    t = median(times["wsum"])
    rate = r * size / t / 1e9
    return Row("weighted_sum", f"r={r} x {size}", t, "copy of input", median(times["copy"]),
               ">= 0.5 G el/s in", rate >= 0.5, rate=f"{rate:.2f} G in el/s",
               note=f"{size / t / 1e9:.2f} G output elements/s")


def bench_galois(gram_rows: list[Row], encode_row: Row, n_target: int, k: int,
                 encode_shape: tuple[int, int, int, int], repeats: int) -> list[Row]:
    """galois on a small size, extrapolated per multiply-add to the sizes above."""
    import galois
    field_cls = galois.GF(PRIME)
    rng = _rng()
    n_small = 200
    x = field_cls(rng.integers(0, PRIME, size=(n_small, k), dtype=np.int64))
    n_enc, lt, m, s = encode_shape
    samples_small = max(1, 4000 // s)
    matrix = field_cls(rng.integers(0, PRIME, size=(lt, m), dtype=np.int64))
    blocks = field_cls(rng.integers(0, PRIME, size=(lt, samples_small * s), dtype=np.int64))
    times = time_round_robin({
        "gram": lambda: x @ x.T,
        "encode": lambda: matrix.T @ blocks,
    }, max(3, repeats // 2))
    gram_small = median(times["gram"])
    encode_small = median(times["encode"])
    # Verify that galois computed the same thing as our kernels (on the small size).
    ours = gram_matrix(np.asarray(x, dtype=np.int64), PRIME)
    assert np.array_equal(ours, np.asarray(x @ x.T, dtype=np.int64))
    out = []
    scale = (n_target / n_small) ** 2
    # Compared with our kernel doing the same work: the ratio says how many times slower
    # galois is (not a slowdown of ours).
    ours = next(r for r in gram_rows if r.kernel == "gram_matrix")
    out.append(Row("galois Gram (x @ x.T)", f"n={n_small} -> x{scale:.0f} to n={n_target}",
                   gram_small * scale, "gram_matrix", ours.seconds, "(reference)", None,
                   note=f"measured {gram_small:.3f} s at n={n_small}, k={k}, extrapolated per "
                        "multiply-add (n^2 k)"))
    enc_scale = n_enc / samples_small
    out.append(Row("galois encode (M.T @ B)", f"{samples_small} samples -> x{enc_scale:.0f} "
                   f"to n={n_enc}", encode_small * enc_scale, "encode_blocks",
                   encode_row.seconds, "(reference)", None,
                   note=f"measured {encode_small * 1e3:.1f} ms for {samples_small} samples, "
                        "extrapolated per sample"))
    return out


def bench_cross(n: int, k: int, repeats: int) -> Row:
    """cross_sq_distances (a row block against all rows, the streaming/tile path)."""
    rng = _rng()
    x = rng.integers(0, PRIME, size=(n, k), dtype=np.int64)
    block = x[: n // 4]
    a = rng.random((n, k))
    ab = a[: n // 4]
    times = time_round_robin({
        "matmul": lambda: ab @ a.T,
        "cross": lambda: cross_sq_distances(block, x, PRIME),
    }, repeats)
    t = median(times["cross"])
    base = median(times["matmul"])
    return Row("cross_sq_distances", f"{n // 4} x {n}, k={k}", t, "float64 a_blk @ a.T", base,
               "-", None, note="full products, no symmetry to exploit: no target")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="small shapes, two runs: a smoke run in seconds")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when any kernel misses its target")
    parser.add_argument("--repeats", type=int, default=None, help="timed runs per kernel")
    parser.add_argument("--no-guard", action="store_true",
                        help="do not limit BLAS threads around numba-parallel phases")
    parser.add_argument("--no-galois", action="store_true",
                        help="skip the galois reference rows (the test oracle, slow)")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = parser.parse_args(argv)
    guard = not args.no_guard
    repeats = args.repeats or (2 if args.quick else 5)
    k = 100
    gram_sizes = [1000] if args.quick else [4000, 16000]
    encode_shape = (1000, 6, 12, 100) if args.quick else (16000, 6, 12, 100)
    wsum_shape = (11, 250 * 1000) if args.quick else (11, 4000 * 4000)
    steps = 2 * len(gram_sizes) + 3 + (0 if args.no_galois else 1)
    done = [0]
    clock = time.perf_counter()

    def progress(what: str) -> None:
        done[0] += 1
        print(f"[{done[0]}/{steps}] {what} ({time.perf_counter() - clock:.0f} s so far)",
              file=sys.stderr, flush=True)

    now = datetime.datetime.now(datetime.timezone.utc)
    print(f"# omnifc kernel benchmark, {now:%Y-%m-%d %H:%M} UTC"
          f"{' (--quick)' if args.quick else ''}, p = 2^31 - 1, {repeats} runs per kernel "
          "(median)")
    # Compile / load the numba kernels before reporting the threading layer.
    encode_blocks(np.ones((2, 3), dtype=np.int64), np.ones((4, 2, 5), dtype=np.int64), PRIME)
    weighted_sum([1, 2], np.ones((2, 10), dtype=np.int64), PRIME)
    distances_from_gram(gram_matrix(np.ones((3, 2), dtype=np.int64), PRIME), PRIME)
    info = environment()
    info["blas_guard"] = guard
    print_environment(info)
    print(f"BLAS guard around numba-parallel phases: {'on (1 BLAS thread)' if guard else 'off'}")
    print()
    started = time.perf_counter()
    rows: list[Row] = []
    reference: list[Row] = []
    gram_rows: list[Row] = []
    for n in gram_sizes:
        r = max(2, repeats - 2) if n >= 16000 else repeats
        progress(f"gram_matrix and sq_distances, n = {n}")
        gram_rows += bench_gram(n, k, r)
    rows += gram_rows
    for n in gram_sizes:
        r = max(2, repeats - 2) if n >= 16000 else repeats
        progress(f"distances_from_gram, n = {n}")
        rows += bench_gram_to_distances(n, k, r, guard)
    progress("cross_sq_distances")
    rows.append(bench_cross(gram_sizes[0], k, repeats))
    progress("encode_blocks")
    encode_rows = bench_encode(*encode_shape, repeats, guard)
    encode_row = encode_rows[0]
    rows += encode_rows
    progress("weighted_sum")
    rows.append(bench_weighted_sum(*wsum_shape, repeats, guard))
    if not args.no_galois:
        progress("galois baselines")
        first_gram = [r for r in gram_rows if r.shape.startswith(f"n={gram_sizes[0]},")]
        reference = bench_galois(first_gram, encode_row, gram_sizes[0], k, encode_shape,
                                 repeats)
    print_ratio_tables(rows, reference=reference)
    print()
    info_after = os.getloadavg() if hasattr(os, "getloadavg") else None
    print(f"load average after: {[round(x, 2) for x in info_after] if info_after else '?'}; "
          f"total {time.perf_counter() - started:.0f} s")
    if args.json:
        payload = {"environment": info, "rows": [
            {"kernel": r.kernel, "shape": r.shape, "seconds": r.seconds,
             "baseline": r.baseline_name, "baseline_seconds": r.baseline_seconds,
             "ratio": r.ratio, "rate": r.rate, "target": r.target, "passed": r.passed,
             "note": r.note} for r in [*rows, *reference]]}
        payload["environment"]["load_after"] = list(info_after) if info_after else None
        payload["quick"] = bool(args.quick)
        payload["date"] = f"{now:%Y-%m-%d %H:%M} UTC"
        with open(args.json, "w") as fh:
            json.dump(payload, fh, indent=2, default=str)
    missed = [r for r in rows if r.passed is False]
    if missed:
        print(f"{len(missed)} target(s) missed: "
              + ", ".join(f"{r.kernel} ({r.shape})" for r in missed), file=sys.stderr)
    return 1 if args.check and missed else 0


if __name__ == "__main__":
    sys.exit(main())
