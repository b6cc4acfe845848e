"""How much of each party's data the public clip bound cuts off, and when that is too much.

Quantization clips every feature to the public bound ``[-R, R]`` (``[0, R]`` for
non-negative data). A few clipped outliers are harmless; a large share of clipped values
means R was agreed too small and the clustering runs on distorted data. Both
:func:`omnifc.secure_distance_matrix` and ``omnifc join`` therefore report the clipped
count and fraction per party and refuse (before any share is made) when a party's
fraction exceeds ``max_clipped`` (default :data:`MAX_CLIPPED`), unless the caller opts in.

>>> import numpy as np
>>> report = clip_report({"a": np.array([[0.5, 9.0]])}, bound=1.0, nonnegative=False)
>>> report["a"]
(1, 2, 0.5)
"""

from __future__ import annotations

import logging

import numpy as np

from finite_field import InputError, ParameterError

__all__ = ["MAX_CLIPPED", "clip_report", "check_clipping"]

logger = logging.getLogger(__name__)

#: Default largest fraction of a party's entries that may be clipped without an error.
MAX_CLIPPED = 0.01


def clip_report(parties: dict, *, bound: float, nonnegative: bool) -> dict:
    """``{party: (clipped entries, entries, fraction)}`` for the public bound."""
    lower = 0.0 if nonnegative else -float(bound)
    out = {}
    for name, x in parties.items():
        x = np.asarray(x, dtype=np.float64)
        clipped = int(np.count_nonzero((x < lower) | (x > bound)))
        out[name] = (clipped, int(x.size), clipped / x.size if x.size else 0.0)
    return out


def check_clipping(report: dict, *, bound: float, nonnegative: bool,
                   max_clipped: float = MAX_CLIPPED, clip: str = "clip") -> None:
    """Log every party's accepted clipping; raise :class:`InputError` above ``max_clipped``
    (before anything is clipped: the error, not a warning, says so).

    ``clip="error"`` refuses any clipped entry; ``max_clipped=1.0`` accepts any amount.
    """
    if not 0.0 <= float(max_clipped) <= 1.0:
        raise ParameterError(f"max_clipped must be a fraction in [0, 1], got {max_clipped!r}")
    limit = 0.0 if clip == "error" else float(max_clipped)
    interval = f"[{0 if nonnegative else -bound:g}, {bound:g}]"
    for name, (clipped, entries, fraction) in report.items():
        if clipped and fraction > limit:  # refused before anything is clipped
            allow = ("clip='error' refuses any clipped entry" if clip == "error" else
                     f"the limit is {limit:.1%}; accept it explicitly with max_clipped=1.0 "
                     "(omnifc join: --max-clipped 1)")
            raise InputError(
                f"{clipped} of {entries} entries ({fraction:.1%}) lie outside the public "
                f"bound {interval} and would be clipped; {allow}, or agree a larger bound R "
                "(or rescale the data)", party=name)
    for name, (clipped, entries, fraction) in report.items():
        if clipped:  # accepted: now they are clipped
            logger.warning("party %r: %d of %d entries (%.1f%%) lie outside the public bound "
                           "%s and are clipped to it", name, clipped, entries, 100 * fraction,
                           interval)
