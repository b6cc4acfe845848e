"""Per-paper reproduction: each paper's headline claim, our plaintext and our secure result.

:func:`reproduce_paper` runs one paper's experiment on offline data (synthetic or
scikit-learn's digits through :mod:`omnifc.fl`) and writes ``<paper>.md`` (a table: the
claim, the paper's figure, our plaintext result, our secure result, whether the secure run is
bit-identical to the plaintext run) and ``<paper>.png`` into the folder it is given. The
OmniFC paper's own evaluation is :func:`._omnifc.run_reproduction`.

Every secure run here goes through the protocol (in-memory transport); every plaintext run
computes the same distances from the same quantized vectors in the clear, so where a
method is lossless the two agree bit for bit and the table says so.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from finite_field import ParameterError

from . import PAPERS, _client2vec, _clove, _flux, _fmcl
from ._omnifc import run_reproduction
from ._report import require_plots, write_paper_report

__all__ = ["PAPERS", "reproduce_paper"]

logger = logging.getLogger(__name__)

_RUNNERS = {"fmcl": _fmcl, "client2vec": _client2vec, "clove": _clove, "flux": _flux}


def reproduce_paper(paper: str, out_dir, *, quick: bool = False) -> dict:
    """Run one paper's reproduction and write ``<out_dir>/<paper>.md`` and ``.png``.

    Parameters
    ----------
    paper : {"clove", "client2vec", "flux", "fmcl", "omnifc"}
    out_dir : str or Path
        Folder to write to (created if needed).
    quick : bool
        Fewer seeds, settings and rounds (seconds to a minute).

    Returns
    -------
    dict with ``markdown`` and ``plot`` (paths), ``rows`` and ``seconds``.
    """
    if paper not in PAPERS:
        raise ParameterError(f"paper must be one of {PAPERS}, got {paper!r}")
    require_plots()                      # before any work: a missing extra writes nothing
    out = Path(out_dir)
    if paper == "omnifc":
        return run_reproduction(out, quick=quick, stem="omnifc")
    from threadpoolctl import threadpool_limits

    start = time.perf_counter()
    with threadpool_limits(limits=1):
        page = _RUNNERS[paper].run(quick)
    seconds = time.perf_counter() - start
    logger.info("%s reproduced in %.1f s", paper, seconds)
    return write_paper_report(out, paper, page["title"], page["rows"], page["notes"],
                              page["figure"], seconds, quick, seeds=page["seeds"],
                              not_reproduced=page["not_reproduced"], noise=page["noise"],
                              headline=page.get("headline", ()))
