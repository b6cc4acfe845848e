"""Reproductions: the OmniFC evaluation and each clustered-FL paper's headline claim.

One module per paper, experiment only (``_omnifc``, ``_clove``, ``_client2vec``, ``_flux``,
``_fmcl``); :mod:`._report` writes every Markdown report and figure (the per-paper pages
itself; the OmniFC evaluation's page in :mod:`._omnifc_report`, with the verdicts of
:mod:`._verdicts` and the figure helpers of :mod:`._figures`). ``omnifc reproduce``
calls :func:`reproduce_paper`.
"""

from finite_field import lazy_exports

#: The papers ``omnifc reproduce --paper`` knows (here, so the CLI lists them without
#: importing the experiments).
PAPERS = ("clove", "client2vec", "flux", "fmcl", "omnifc")

__getattr__, __dir__ = lazy_exports(__name__, {
    "._omnifc": ["LEVELS", "METHOD_OPTIONS", "REPRO_DATASETS", "run_reproduction"],
    "._papers": ["reproduce_paper"],
})

__all__ = ["PAPERS", "reproduce_paper", "run_reproduction", "LEVELS", "REPRO_DATASETS",
           "METHOD_OPTIONS"]
