"""The plaintext reference a secure result must equal, for tests, demos and audits.

>>> import numpy as np
>>> from omnifc import plaintext_sq_distances
>>> plaintext_sq_distances(np.array([[0.0, 0.0], [3.0, 4.0]]), bound=8.0, scale_bits=1)
array([[  0, 100],
       [100,   0]])
"""

from __future__ import annotations

import numpy as np

from finite_field import Quantizer

__all__ = ["plaintext_sq_distances"]


def plaintext_sq_distances(features, *, bound: float, scale_bits: int,
                           nonnegative: bool = False) -> np.ndarray:
    """Exact integer squared distances of the quantized rows, computed in the clear.

    This is what ``secure_distance_matrix(...).integer_distances`` must equal bit for bit
    (same public ``bound``, ``scale_bits`` and ``nonnegative``): the rows are quantized
    with the same :class:`finite_field.Quantizer` and the distances are computed with
    int64 arithmetic, exact while ``4 d M^2 < 2^63`` (which every valid session meets).
    """
    q = Quantizer(scale_bits=scale_bits, bound=bound, nonnegative=nonnegative)
    values = q.quantize(features).values
    norms = (values * values).sum(axis=1)
    return norms[:, None] + norms[None, :] - 2 * (values @ values.T)
