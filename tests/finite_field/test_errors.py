"""The exception tree: one root, builtins inherited, the opaque authentication failure
apart from the detailed result checks."""

from __future__ import annotations

import numpy as np
import pytest

import finite_field
from finite_field import (AuthenticationError, DeadlineError, DeviationError, InputError,
                          IntegrityError, OmniFCError, ParameterError, PeerError,
                          ProtocolError)


def test_every_error_is_an_omnifc_error_with_its_builtin():
    assert issubclass(ParameterError, ValueError) and issubclass(InputError, ValueError)
    assert issubclass(ProtocolError, RuntimeError)
    assert issubclass(DeadlineError, TimeoutError) and issubclass(DeadlineError, PeerError)
    for kind in (ParameterError, InputError, ProtocolError, PeerError, DeadlineError,
                 AuthenticationError, IntegrityError, DeviationError):
        assert issubclass(kind, OmniFCError), kind


def test_authentication_and_integrity_are_separate_branches():
    assert issubclass(AuthenticationError, ProtocolError)
    assert issubclass(IntegrityError, ProtocolError)
    assert not issubclass(AuthenticationError, IntegrityError)
    assert not issubclass(IntegrityError, AuthenticationError)
    assert issubclass(DeviationError, IntegrityError)
    assert not issubclass(DeviationError, AuthenticationError)


def test_the_authentication_failure_says_only_that_and_from_whom():
    error = AuthenticationError("hosp-b", "shares")
    assert str(error) == "message failed authentication from party 'hosp-b' in phase 'shares'"
    assert (error.party, error.phase) == ("hosp-b", "shares")
    assert str(AuthenticationError()) == "message failed authentication"
    with pytest.raises(TypeError):
        AuthenticationError("hosp-b", "shares", "the tag byte 7 differs")


def test_an_integrity_error_carries_its_message_without_rewriting_args():
    error = IntegrityError("every decoded squared distance must lie in [0, 5]; saw 9")
    assert error.args == ("every decoded squared distance must lie in [0, 5]; saw 9",)
    assert (error.party, error.phase) == (None, "decode")
    named = IntegrityError("bad sum", party="p1", phase="evaluation")
    assert (named.party, named.phase) == ("p1", "evaluation")


def test_a_deviation_error_is_a_detailed_integrity_error():
    error = DeviationError("party 'b' deviated", named=["b"], suspects=[["b", "c"]])
    assert isinstance(error, IntegrityError) and error.args == ("party 'b' deviated",)
    assert (error.party, error.phase, error.named, error.suspects) == (
        "b", "decode", ("b",), (("b", "c"),))


def test_the_three_packages_export_the_same_classes():
    import omnifc
    import protocols
    for name in ("AuthenticationError", "IntegrityError", "DeviationError"):
        assert name in finite_field.__all__ and name in protocols.__all__
        assert name in omnifc.__all__
        assert getattr(omnifc, name) is getattr(protocols, name) is getattr(finite_field, name)


def test_a_tampered_share_raises_the_opaque_authentication_error():
    from protocols._crypto import EphemeralKey, PairKeys, roster_digest
    roster = roster_digest("s1", [(b"h-a", b"s-a"), (b"h-b", b"s-b")])
    a, b = EphemeralKey.generate(), EphemeralKey.generate()
    ka = PairKeys.derive(a, b.public_bytes, session_id="s1", me="alice", peer="bob",
                         roster_digest=roster)
    kb = PairKeys.derive(b, a.public_bytes, session_id="s1", me="bob", peer="alice",
                         roster_digest=roster)
    box = bytearray(ka.encrypt(b"share", round_=0, prime_index=0, chunk_index=0))
    box[-1] ^= 1
    with pytest.raises(AuthenticationError) as info:
        kb.decrypt(bytes(box), sender="alice", round_=0, prime_index=0, chunk_index=0)
    assert not isinstance(info.value, IntegrityError)
    assert info.value.party == "alice" and "tag" not in str(info.value)


def test_a_failed_decode_check_is_an_integrity_error_saying_which_check():
    from protocols._plans import decode_failure
    error = decode_failure("every decoded squared distance must lie in [0, 8]")
    assert type(error) is IntegrityError and not isinstance(error, AuthenticationError)
    assert error.args == ("the decoded result failed its integrity check in phase 'decode': "
                          "every decoded squared distance must lie in [0, 8]",)
    assert (error.party, error.phase) == (None, "decode")
