"""The share-exchange protocol: sans-IO state machines, cryptography and transports."""

from finite_field import (DeadlineError, InputError, IntegrityError, OmniFCError,
                          ParameterError, PeerError, ProtocolError)

__all__ = ["OmniFCError", "ParameterError", "InputError", "ProtocolError", "PeerError",
           "DeadlineError", "IntegrityError"]
