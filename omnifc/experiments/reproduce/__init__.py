"""Reproductions: the OmniFC evaluation and each clustered-FL paper's headline claim.

One module per paper, experiment only (``_omnifc``, ``_clove``, ``_client2vec``, ``_flux``,
``_fmcl``); :mod:`._report` writes every Markdown report and figure. ``omnifc reproduce``
calls :func:`reproduce_paper`.
"""

from ._omnifc import LEVELS, METHOD_OPTIONS, REPRO_DATASETS, run_reproduction
from ._papers import PAPERS, reproduce_paper

__all__ = ["PAPERS", "reproduce_paper", "run_reproduction", "LEVELS", "REPRO_DATASETS",
           "METHOD_OPTIONS"]
