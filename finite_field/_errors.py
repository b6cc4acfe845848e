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
    "AuthenticationError",
    "IntegrityError",
    "DeviationError",
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
    reporter : str or None
        Who observed the failure and reports it, when that is not the party at fault (the
        coordinator relaying an abort to the other parties, a party that cannot reach the
        coordinator): the message then starts with "<reporter> reports: " and ``message``
        names the party and phase itself.
    detail : str
        ``message`` alone, without who and where.
    """

    def __init__(self, message: str, *, party: object, phase: str,
                 reporter: str | None = None) -> None:
        super().__init__(f"party {party!r} in phase {phase!r}: {message}" if reporter is None
                         else f"{reporter} reports: {message}")
        self.party = party
        self.phase = phase
        self.reporter = reporter
        self.detail = message


class DeadlineError(PeerError, TimeoutError):
    """A party did not answer before the phase deadline."""


class AuthenticationError(ProtocolError):
    """A ciphertext, signature, MAC, TLS identity or nonce failed verification.

    Deliberately opaque (as in pyca/cryptography's ``InvalidTag``): the message never
    says which byte or which check failed, only that authentication failed and from which
    party (and in which phase) when known.

    Attributes
    ----------
    party : str or None
        The party the message claimed to come from.
    phase : str or None
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


class IntegrityError(ProtocolError):
    """A result check failed: the decoded values are not what an honest session gives.

    Unlike :class:`AuthenticationError`, it says which check failed (the no-wrap bound of
    the decode, for instance): the check is on public values, so the detail is no secret.

    Parameters
    ----------
    message : str
        Which check failed, what was expected and what was seen.
    party : str, optional
        The party at fault, when the check places it.
    phase : str
        The phase of the check (``"decode"`` by default).
    """

    def __init__(self, message: str, *, party: object = None, phase: str = "decode") -> None:
        super().__init__(message)
        self.party = party
        self.phase = phase


class DeviationError(IntegrityError):
    """The Reed-Solomon checks detected parties that computed or shared wrongly.

    Raised when a detected deviation can be neither corrected nor excluded (too few
    parties left for a checked rerun, more deviating parties than the checks can place):
    the session returns nothing. Like every :class:`IntegrityError` (and unlike the opaque
    :class:`AuthenticationError`), it says what the checks found.

    Attributes
    ----------
    named : tuple of str
        Parties certainly at fault (in every explanation of the located errors).
    suspects : tuple of tuple of str
        The minimal sets of parties that explain the errors; one of them deviated (a
        suspect pair, for instance, when a sender's off-polynomial share and a wrong
        evaluation by its recipient cannot be told apart).
    phase : str
    """

    def __init__(self, message: str, *, named=(), suspects=(), phase: str = "decode") -> None:
        super().__init__(message, phase=phase)
        self.named = tuple(str(x) for x in named)
        self.suspects = tuple(tuple(str(x) for x in s) for s in suspects)
        self.party = self.named[0] if len(self.named) == 1 else None
