"""FLUX: the secure path (the protected vectors and their distances through :func:`omnifc.adapters.protect`)."""

from __future__ import annotations

import numpy as np

from finite_field import ParameterError

from .._common import plaintext_distances, protect, quantize_rows
from ._paper import NORMALIZATIONS

__all__ = ["block_distances", "block_ranges", "block_slices", "combine_blocks",
           "neighbour_scales", "prefix_distances", "split_block_distances"]


def block_slices(n_components: int, n_classes: int) -> list[slice]:
    """The 2(U+1) blocks of ``l`` entries of the descriptor, in layout order."""
    return [slice(b * n_components, (b + 1) * n_components) for b in range(2 * (n_classes + 1))]

def block_ranges(descriptors, n_components: int, n_classes: int) -> np.ndarray:
    """Option "ranges": per-block max - min over all clients and coordinates (reveals them)."""
    x = np.asarray(descriptors, dtype=np.float64)
    out = []
    for s in block_slices(n_components, n_classes):
        r = x[:, s].max() - x[:, s].min()
        out.append(r if r > 0 else 1.0)   # MinMaxScaler maps a constant block to 0
    return np.array(out)

def combine_blocks(block_matrices, scales=None) -> np.ndarray:
    """``sum_b D_b / s_b^2`` (``s_b`` = block diameter by default; 1 for a constant block)."""
    total = None
    for b, d in enumerate(block_matrices):
        d = np.asarray(d, dtype=np.float64)
        scale2 = float(d.max()) if scales is None else float(scales[b]) ** 2
        scale2 = scale2 if scale2 > 0 else 1.0
        total = d / scale2 if total is None else total + d / scale2
    return total

def neighbour_scales(block_matrices) -> np.ndarray:
    """Per-block noise scale: sqrt of the median over clients of the squared distance to the
    nearest other client in that block (``"block_neighbour"``, omnifc's default).

    Falls back to the block diameter when that median is 0 (duplicate clients), and to 1
    for a constant block.

    Examples
    --------
    >>> import numpy as np
    >>> from omnifc.adapters import flux
    >>> x = np.array([[0.0], [1.0], [3.0], [5.0]])
    >>> (flux.neighbour_scales([(x - x.T) ** 2]) ** 2).round(6).tolist()   # median(1, 1, 4, 4)
    [2.5]
    """
    out = []
    for d in block_matrices:
        d = np.asarray(d, dtype=np.float64)
        n = d.shape[0]
        nearest = np.where(np.eye(n, dtype=bool), np.inf, d).min(axis=1) if n > 1 else d[0]
        scale2 = float(np.median(nearest))
        if not scale2 > 0:
            scale2 = float(d.max())
        out.append(np.sqrt(scale2) if scale2 > 0 else 1.0)
    return np.array(out)

def block_distances(descriptors, *, n_components: int, n_classes: int, bound: float,
                    normalization: str = "none", secure: bool = True,
                    scale_bits: int = 16, parties=None, blocks=None, whitening=None,
                    splits=None, **options):
    """The scaled squared-distance matrix the server clusters on (see module for leakage).

    Returns ``(D, block_matrices, scales)``; ``block_matrices`` is None unless the
    normalization needs them. ``secure=False`` computes the same from the same quantized
    descriptors in the clear (the plaintext reference). ``blocks`` restricts to a subset
    of block indices (test time uses the prefix blocks 0 and 1). ``normalization=
    "whitened"`` needs ``whitening`` (a :class:`~omnifc.adapters.flux.NoiseWhitening`):
    every client maps its descriptor through it, and D is the squared distance of the
    mapped rows, with the public bound :meth:`NoiseWhitening.bound` (all blocks), quantized
    to ``2^-q`` with ``q`` = :meth:`NoiseWhitening.scale_bits` (at most ``scale_bits``).
    ``normalization="split"`` needs ``splits`` (the ``k >= 2`` arrays ``(G_0, ...,
    G_{k-1})`` of :func:`~omnifc.adapters.flux._split_half.split_descriptors`; at ``k = 2``
    the halves ``(A, B)``): the secure D of the ``(k + 1) n`` rows ``[G_0; ...; G_{k-1};
    descriptors]`` (each row its client's party, the descriptors' bound), and D is
    :func:`~omnifc.adapters.flux._split_half.split_whitened_distances` of it, computed by
    the coordinator from that D alone.
    """
    if normalization not in NORMALIZATIONS:
        raise ParameterError(f"normalization must be one of {NORMALIZATIONS}, got "
                             f"{normalization!r}")
    if (normalization == "whitened") != (whitening is not None):
        raise ParameterError("normalization='whitened' needs whitening= (noise_whitening's "
                             "result), and whitening= needs normalization='whitened'")
    if (normalization == "split") != (splits is not None):
        raise ParameterError("normalization='split' needs splits= (split_descriptors' "
                             "(G_0, ..., G_{k-1})), and splits= needs normalization='split'")
    x = np.asarray(descriptors, dtype=np.float64)
    slices = block_slices(n_components, n_classes)
    chosen = range(len(slices)) if blocks is None else list(blocks)

    def run(rows, row_bound, bits=scale_bits):
        return _row_distances(rows, bound=row_bound, scale_bits=bits, parties=parties,
                              secure=secure, **options)

    if normalization == "ranges":
        ranges = block_ranges(x, n_components, n_classes)
        scaled = np.concatenate([x[:, slices[b]] / ranges[b] for b in chosen], axis=1)
        return run(scaled, bound / ranges.min()), None, ranges
    if normalization == "whitened":
        if blocks is not None:
            raise ParameterError("the whitened metric mixes every block; blocks= cannot "
                                 "restrict it")
        return run(whitening.apply(x), whitening.bound(bound),
                   whitening.scale_bits(bound, scale_bits)), None, None
    if normalization == "split":
        from ._split_half import split_whitened_distances

        left = [np.asarray(g, dtype=np.float64) for g in splits]
        if blocks is not None or len(left) < 2 or any(g.shape != x.shape for g in left):
            raise ParameterError(f"normalization='split' takes every block and k >= 2 split "
                                 f"descriptors of the descriptors' shape {x.shape}; got "
                                 f"{[g.shape for g in left]}"
                                 + (" and blocks=" if blocks is not None else ""))
        full = split_block_distances(x, left, bound=bound, secure=secure,
                                     scale_bits=scale_bits, parties=parties, **options)
        return split_whitened_distances(full, x.shape[0], groups=len(left)), None, None
    if normalization == "none":
        rows = np.concatenate([x[:, slices[b]] for b in chosen], axis=1)
        return run(rows, bound), None, None
    matrices = [run(x[:, slices[b]], bound) for b in chosen]
    if normalization == "block_neighbour":
        scales = neighbour_scales(matrices)
        return combine_blocks(matrices, scales=scales), matrices, scales
    return combine_blocks(matrices), matrices, np.sqrt([max(float(d.max()), 0.0) for d in matrices])

def split_block_distances(descriptors, splits, *, bound: float, secure: bool = True,
                          scale_bits: int = 16, parties=None, **options) -> np.ndarray:
    """The coordinator's split D: the squared distances of the ``(k + 1) n`` rows
    ``[G_0; ...; G_{k-1}; descriptors]`` (``splits`` = ``(G_0, ..., G_{k-1})``, each of the
    descriptors' shape), through the protocol (``secure=False``: the same quantized rows in
    the clear), each row its client's party (``parties``: one label per client; one party
    per client by default), with the descriptors' public ``bound``.
    :func:`block_distances` ``(normalization="split")`` whitens it
    (:func:`~omnifc.adapters.flux._split_half.split_whitened_distances`).
    """
    x = np.asarray(descriptors, dtype=np.float64)
    left = [np.asarray(g, dtype=np.float64) for g in splits]
    # a client's k + 1 rows belong to its party (one party per client by default)
    owners = np.tile(np.arange(x.shape[0]) if parties is None else np.asarray(parties),
                     len(left) + 1)
    return _row_distances(np.vstack(left + [x]), bound=bound, scale_bits=scale_bits,
                          parties=owners, secure=secure, **options)


def _row_distances(rows, *, bound: float, scale_bits: int, parties, secure: bool,
                   **options) -> np.ndarray:
    """The squared distances of ``rows`` through the protocol (``parties``, ``options``), or
    of the same quantized rows in the clear (``secure=False``): every FLUX D's last step."""
    if secure:
        return protect(rows, bound=bound, scale_bits=scale_bits, parties=parties,
                       **options).distances
    return plaintext_distances(quantize_rows(rows, bound=bound, scale_bits=scale_bits))

def prefix_distances(train_descriptors, new_descriptors, *, n_components: int, n_classes: int,
                     bound: float, scales=None, normalization: str = "none",
                     secure: bool = True, scale_bits: int = 16, parties=None,
                     **options) -> np.ndarray:
    """Squared distances on the ``[mu_x, sigma_x]`` prefix among training + new clients.

    Scaled with the training-time scales (``scales`` from :func:`block_distances`: the
    fitted scalers, as in the paper). Rows 0..n_train-1 are the training clients. Under
    ``"whitened"`` the prefix is not whitened (the whitening mixes the class blocks, which a
    new client cannot compute label-free): the prefix distances are ``"none"``'s.
    """
    rows = np.concatenate([np.asarray(train_descriptors, float),
                           np.asarray(new_descriptors, float)])
    slices = block_slices(n_components, n_classes)
    scales = np.ones(len(slices)) if scales is None or normalization == "none" else scales

    def run(block_rows, row_bound):
        return _row_distances(block_rows, bound=row_bound, scale_bits=scale_bits,
                              parties=parties, secure=secure, **options)

    if normalization in ("block_neighbour", "block_diameter"):
        return combine_blocks([run(rows[:, slices[b]], bound) for b in (0, 1)],
                              scales=[scales[0], scales[1]])
    scaled = np.concatenate([rows[:, slices[b]] / scales[b] for b in (0, 1)], axis=1)
    return run(scaled, bound / min(scales[0], scales[1]))
