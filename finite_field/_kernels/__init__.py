"""Exact modular kernels: encoding, weighted combination, Gram matrices and squared distances.

These are the hot paths. Each numba kernel is written once in plain Python over int64 and
float64 and compiled with an explicit signature (``cache=True``) on its first call, not at
import (:mod:`finite_field._jit`: a party process joins before numba loads); with
``NUMBA_DISABLE_JIT=1`` the same code runs uncompiled, which the tests use to check the
source itself.

Modules (private; the public names are re-exported here):

* ``_exact``: how the float64 arithmetic stays exact (balanced residues, limbs, chunk
  plans, reduction without division);
* ``_encode``: :func:`encode_blocks`, :func:`weighted_sums` and :func:`weighted_sum`;
* ``_operands``, ``_pairwise``: GEMM operands, then Gram matrices and squared distances
  tile by tile (:func:`gram_matrix`, :func:`distances_from_gram`,
  :func:`cross_sq_distances`, :func:`sq_distances`, :class:`DistanceTiles`,
  :func:`sq_distances_tile`);
* ``_tasks``, ``_blas_threads``: the thread runner and the BLAS thread guard (threadpoolctl);
* ``_checks``: argument checks.

Threads. No kernel opens an OpenMP (numba ``prange``) region: OpenMP workers spin for a
while after a region, as idle OpenBLAS workers do after a BLAS call, and on a 2-core
machine either steals the cores from whatever runs next. Instead each kernel is serial,
releases the GIL, and ``numba.get_num_threads()`` plain Python threads share the work
through a queue (a paused thread does not hold the others up). The pairwise kernels also
run their BLAS products single-threaded, one per worker, while the call lasts (the BLAS
thread count is set to 1 and restored with threadpoolctl; see ``_blas_threads``); without a
BLAS that threadpoolctl can control they keep BLAS's threads and overlap each tile's
reduction with the next product.
Set ``numba.set_num_threads(1)`` for fully serial kernels.
"""

from __future__ import annotations

# Private names below are re-exported for the tests (tests/finite_field/test_kernels.py).
from ._blas_threads import _single_threaded_blas
from ._encode import _encode_kernel, encode_blocks, weighted_sum, weighted_sums
from ._exact import _column_plan, _mod_float, _small_operand_plan
from ._pairwise import (DistanceTiles, _panel_kernel, cross_sq_distances, distances_from_gram,
                        gram_matrix, sq_distances, sq_distances_tile)
from ._paired import paired_sq_distances

__all__ = [
    "encode_blocks", "weighted_sum", "weighted_sums", "sq_distances", "cross_sq_distances",
    "sq_distances_tile", "DistanceTiles", "gram_matrix", "distances_from_gram",
    "paired_sq_distances",
]
