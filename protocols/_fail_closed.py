"""Fail closed: any exception, expected or not, ends a session like a protocol violation.

:func:`as_protocol_error` turns an exception into the :class:`ProtocolError` that leaves a
party or the coordinator failed (a non-protocol exception is wrapped, with only its type
in the message: nothing secret leaks through an unexpected error's text);
:data:`COORDINATOR` is the name parties give the coordinator in their errors.

>>> as_protocol_error(KeyError("secret"), "party 'a'", "shares")
ProtocolError("party 'a' failed in phase 'shares': unexpected KeyError")
"""

from __future__ import annotations

from finite_field import OmniFCError, ProtocolError

__all__ = ["as_protocol_error", "COORDINATOR"]

#: The name parties use for the coordinator in errors.
COORDINATOR = "coordinator"


def as_protocol_error(error: Exception, who: str, phase: str) -> Exception:
    """``error`` if it is a ProtocolError, else a ProtocolError naming its type (fail closed:
    an unexpected exception ends the session like any protocol violation)."""
    if isinstance(error, ProtocolError):
        return error
    if isinstance(error, OmniFCError):
        wrapped = ProtocolError(f"{who} failed in phase {phase!r}: {error}")
    else:
        wrapped = ProtocolError(f"{who} failed in phase {phase!r}: unexpected "
                                f"{type(error).__name__}")
    wrapped.__cause__ = error
    wrapped.phase = phase
    return wrapped
