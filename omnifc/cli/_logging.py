"""The command line's log handlers.

Library modules log under their own module name (``logging.getLogger(__name__)``), so
every record of omnifc comes from a logger under one of the three package roots below.
The CLI puts one stderr handler on each root (and none on the root logger, so other
libraries' records stay out of the user's way) and sets the level chosen by ``-v``.
"""

from __future__ import annotations

import logging
import sys

__all__ = ["PACKAGE_ROOTS", "configure_logging"]

PACKAGE_ROOTS = ("omnifc", "protocols", "finite_field")
FORMAT = "%(asctime)s %(name)s %(levelname)s %(message)s"


class _CLIHandler(logging.StreamHandler):
    """The handler this module installs (recognised, so a second call replaces it). It
    writes to the current ``sys.stderr``, not to the one of the call that made it."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass


def configure_logging(level: int = logging.WARNING, fmt: str = FORMAT) -> None:
    """Show the records of omnifc's three packages at ``level`` and above on stderr."""
    for name in PACKAGE_ROOTS:
        logger = logging.getLogger(name)
        for handler in [h for h in logger.handlers if isinstance(h, _CLIHandler)]:
            logger.removeHandler(handler)
        handler = _CLIHandler()
        handler.setFormatter(logging.Formatter(fmt))
        logger.addHandler(handler)
        logger.setLevel(level)
