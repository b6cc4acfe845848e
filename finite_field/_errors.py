"""The omnifc exception tree.

Every error omnifc raises derives from :class:`OmniFCError`. Subclasses also inherit the
builtin that describes the failure, so ``except ValueError`` keeps working for callers
that do not know omnifc. The tree lives in the lowest layer so that all three packages
(``finite_field``, ``protocols``, ``omnifc``) raise the same classes.

Messages say what was expected and what was seen. They never contain secrets, shares,
masks or keys.
"""

from __future__ import annotations

__all__ = [
    "OmniFCError",
    "ParameterError",
    "InputError",
    "ProtocolError",
    "PeerError",
    "DeadlineError",
    "IntegrityError",
]


class OmniFCError(Exception):
    """Root of every error raised by omnifc."""


class ParameterError(OmniFCError, ValueError):
    """Public parameters that cannot work (too few parties, non-prime modulus, ...)."""


class InputError(OmniFCError, ValueError):
    """A party's data is unusable (NaN, wrong dimension, empty, out of range).

    Parameters
    ----------
    message : str
        What was expected and what was seen.
    party : str or int, optional
        The party whose data was refused.
    """

    def __init__(self, message: str, *, party: object = None) -> None:
        if party is not None:
            message = f"party {party!r}: {message}"
        super().__init__(message)
        self.party = party


class ProtocolError(OmniFCError, RuntimeError):
    """A message or session violated the share-exchange protocol."""


class PeerError(ProtocolError):
    """A named party failed or misbehaved in a named phase.

    Attributes
    ----------
    party : str
        The party at fault.
    phase : str
        The protocol phase ("join", "shares", "evaluation", ...).
    """

    def __init__(self, message: str, *, party: object, phase: str) -> None:
        super().__init__(f"party {party!r} in phase {phase!r}: {message}")
        self.party = party
        self.phase = phase


class DeadlineError(PeerError, TimeoutError):
    """A party did not answer before the phase deadline."""


class IntegrityError(ProtocolError):
    """A ciphertext or signature failed verification.

    Deliberately opaque (as in pyca/cryptography's ``InvalidTag``): the message never
    says which byte or which check failed, only which party and phase when known.
    """

    def __init__(self, party: object = None, phase: str | None = None) -> None:
        where = ""
        if party is not None:
            where = f" from party {party!r}"
        if phase is not None:
            where += f" in phase {phase!r}"
        super().__init__(f"message failed authentication{where}")
        self.party = party
        self.phase = phase
