"""Say a standing condition once per process, not once per party, round or session.

An in-memory session runs the coordinator and every party in one process, and an
experiment runs many sessions: a warning about the parameters ("NO INTEGRITY CHECK") would
be repeated for each. :func:`log_once` logs the first record of a key at its level and
every later one at DEBUG. Each result still records the condition (``Outcome.integrity``).
"""

from __future__ import annotations

import contextlib
import logging
import threading

__all__ = ["log_once", "log_once_scope", "said", "restore"]

_said: set = set()
_lock = threading.Lock()


def log_once(logger: logging.Logger, key, level: int, message: str, *args) -> bool:
    """Log at ``level`` the first time ``key`` is seen in this process, else at DEBUG;
    True when it was the first time."""
    with _lock:
        first = key not in _said
        _said.add(key)
    logger.log(level if first else logging.DEBUG, message, *args, stacklevel=2)
    return first


def said() -> frozenset:
    """The keys said so far (to restore after a block that should not count)."""
    with _lock:
        return frozenset(_said)


def restore(keys) -> None:
    """Forget every key not in ``keys`` (tests, and the audit's simulated sessions)."""
    with _lock:
        _said.intersection_update(keys)


@contextlib.contextmanager
def log_once_scope():
    """Within the block, what is said once counts only there: afterwards the process has
    said exactly what it had said before (the audit's simulated sessions)."""
    before = said()
    try:
        yield
    finally:
        restore(before)
