"""The streamed classical MDS on a Dask cluster: D read as a dask array from the store.

The out-of-core k-means (and fuzzy c-means) of the full layout embed the rows by a
randomized eigensolver on ``B = -1/2 J D J`` (:func:`~omnifc._clustering._streamed.streamed_mds`);
its cost is a handful of passes over D, each a product ``D @ W`` with a tall, thin W
(n x (n_components + 10)). With ``dask=`` those products run as dask array operations on
the result's row blocks instead of in this process:

- a Zarr store (``out="D.zarr"``) is read by ``dask.array.from_zarr(path,
  component="integer")``; a ``.npy`` result by row blocks of a memory map opened where
  the task runs; a result in RAM by ``dask.array.from_array`` (it travels with the graph);
- each block is scaled to float64 D / 4^q exactly as :class:`~omnifc.TiledDistances` does
  and multiplied by W (one task per row block; W is one key of the graph, sent once per
  product); the centring stays here (O(n x r));
- ``dask`` is a ``dask.distributed.Client`` (the cluster's workers read the store: on
  several machines it must be on storage they all see, e.g. a shared file system or an
  object store that zarr reaches), a scheduler name (``"threads"``, ``"synchronous"``,
  ``"processes"``) or True (dask's default: the active Client when there is one).

Only the products move to Dask: the k-means++ seeds (k rows of D per seeding) and the
canonical row order (one sort per row) still read the store from this process, and the
eigenproblem of the small projected matrix and Lloyd's iterations on the n x r embedding
run here. Needs the ``omnifc[dask]`` extra (zarr, dask[array], distributed).

>>> import numpy as np
>>> from omnifc import plaintext_distance_store
>>> from omnifc._clustering._streamed import streamed_mds
>>> x = np.array([[0, 0], [0, 3], [4, 0], [4, 3]])
>>> view = plaintext_distance_store(x, scale_bits=0).distances
>>> y, values, _ = streamed_mds(view, 2, np.random.default_rng(0), dask="synchronous")
>>> np.round(values, 6).tolist()
[16.0, 9.0]
"""

from __future__ import annotations

import logging

import numpy as np

from finite_field import ParameterError

__all__ = ["dask_gram_operator", "dask_trace", "check_dask", "require_dask"]

logger = logging.getLogger(__name__)

_EXTRA = "pip install 'omnifc[dask]'"


def require_dask():
    """``dask.array``, or a :class:`ParameterError` naming the extra to install."""
    try:
        import dask
        import dask.array as da
    except ImportError:
        raise ParameterError(f"dask= runs the MDS products on Dask, which is not installed: "
                             f"{_EXTRA}") from None
    return dask, da


def check_dask(value):
    """``dask=`` as given, checked: None/False (no Dask), True, a scheduler name or a
    distributed Client (anything with ``get`` and ``submit``)."""
    if value is None or value is False:
        return None
    require_dask()
    if value is True or isinstance(value, str) or (hasattr(value, "get") and
                                                    hasattr(value, "submit")):
        return value
    raise ParameterError(f"dask must be a dask.distributed Client, a scheduler name or True, "
                         f"got {value!r}")


def _scheduler(value) -> dict:
    return {} if value is True else {"scheduler": value}


def _scaled(block, factor):
    """An integer row block as float64 D / 4^q (as ``TiledDistances`` scales it)."""
    return np.multiply(block, factor, dtype=np.float64)


def _float_rows(view, rows_per_tile: int | None = None):
    """The store behind ``view`` as a lazy float64 dask array, chunked by row blocks."""
    require_dask()
    store = view.store
    integer = store.to_dask(rows_per_tile)
    return integer.map_blocks(_scaled, store.factor, dtype=np.float64,
                              meta=np.empty((0, 0), dtype=np.float64))


def dask_gram_operator(view, dask, rows_per_tile: int | None = None):
    """``B = -1/2 J D J`` as a :class:`scipy.sparse.linalg.LinearOperator` whose products
    ``D @ W`` run on Dask (``dask``: a Client, a scheduler name or True)."""
    from scipy.sparse.linalg import LinearOperator

    dask_module, da = require_dask()
    n = view.shape[0]
    rows = _float_rows(view, rows_per_tile)
    options = _scheduler(dask)

    def matmat(v):
        v = np.asarray(v, dtype=np.float64)
        squeeze = v.ndim == 1
        w = v.reshape(n, -1)
        w = w - w.mean(axis=0, keepdims=True)
        product = rows @ da.from_array(w, chunks=(rows.chunks[1], w.shape[1]))
        (out,) = dask_module.compute(product, **options)
        out = np.asarray(out, dtype=np.float64)
        out -= out.mean(axis=0, keepdims=True)
        out *= -0.5
        return out[:, 0] if squeeze else out

    return LinearOperator((n, n), matvec=matmat, matmat=matmat, rmatvec=matmat,
                          rmatmat=matmat, dtype=np.float64)


def dask_trace(view, dask) -> float:
    """trace(B) = sum(D) / (2n), summed on Dask."""
    dask_module, _ = require_dask()
    (total,) = dask_module.compute(_float_rows(view).sum(), **_scheduler(dask))
    return float(total) / (2.0 * view.shape[0])
