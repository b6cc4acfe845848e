"""The audit's own sessions log under the audit's logger, quietly.

The checks run real sessions with attacks in them (a tampering coordinator, deviating
parties, transparent mode, r = 0): the protocol logs what it should log for a real session
(WARNING: "session failed", "TRANSPARENT mode", "NO INTEGRITY CHECK"). In an audit those
lines are the expected outcome of a simulated attack, not a failure of the user's session,
so while the checks run every record of ``omnifc``, ``protocols`` and ``finite_field``
(outside ``omnifc.audit``) is re-logged at DEBUG under this module's logger, prefixed with
the logger it came from: ``omnifc audit -vv`` shows them, the default shows none. The
audit's verdicts are in its report, not in the log. What the simulations said once
(:mod:`protocols._log_once`) is forgotten afterwards, so a real session still says it.
"""

from __future__ import annotations

import contextlib
import logging

from protocols import log_once_scope

__all__ = ["simulated_sessions"]

logger = logging.getLogger(__name__)

_ROOTS = ("omnifc", "protocols", "finite_field")
_AUDIT = __name__.rsplit(".", 1)[0]  # omnifc.audit


def _redirected(name: str) -> bool:
    inside = any(name == root or name.startswith(root + ".") for root in _ROOTS)
    return inside and not (name == _AUDIT or name.startswith(_AUDIT + "."))


class _ToSimulationLog(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if not _redirected(record.name):
            return True
        if not getattr(record, "omnifc_simulated", False):  # once, however many handlers
            record.omnifc_simulated = True
            logger.debug("simulated session: %s %s: %s", record.name, record.levelname,
                         record.getMessage())
        return False


def _handlers() -> list:
    """Every handler a record of the three packages can reach: those of the root logger,
    of the loggers of the three packages, and the last resort of an unconfigured process."""
    loggers = [logging.root] + [
        item for name, item in list(logging.Logger.manager.loggerDict.items())
        if isinstance(item, logging.Logger) and _redirected(name)]
    found = {id(h): h for item in loggers for h in item.handlers}
    if logging.lastResort is not None:
        found[id(logging.lastResort)] = logging.lastResort
    return list(found.values())


@contextlib.contextmanager
def simulated_sessions():
    """Within the block, omnifc's records (the audit's own excluded) go to this module's
    logger at DEBUG instead of their own."""
    redirect = _ToSimulationLog()
    # Every module logger of the three packages that exists when the checks start (each
    # package's own logger included: the package __init__ files create it), and every
    # handler their records reach: a module imported during the checks makes its logger
    # then, and only the handlers see its records.
    filtered = [item for name, item in list(logging.Logger.manager.loggerDict.items())
                if isinstance(item, logging.Logger) and _redirected(name)] + _handlers()
    for item in filtered:
        item.addFilter(redirect)
    try:
        with log_once_scope():  # what the simulations say once, real sessions still say
            yield
    finally:
        for item in filtered:
            item.removeFilter(redirect)
