"""protocols/_party.py pinned down, the parts before and around the protocol (mutation
testing, docs/testing.md): construction and input checks, the signed hello as the
documented transcript, the ErrorReport a party sends, the Ready message.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import (Ed25519PrivateKey,
                                                               Ed25519PublicKey)

from finite_field import AuthenticationError, InputError, IntegrityError, PeerError, ProtocolError
from protocols import Party, SessionParameters, public_key_bytes
from protocols._crypto import PROTOCOL_VERSION
from protocol_helpers import Session, quantize, random_data
from .test_refusals import PARAMS, _in_phase, _refusal, _result


def _party(data, params=PARAMS, name="party-0", **kwargs):
    key = Ed25519PrivateKey.generate()
    pinned = {name: public_key_bytes(key), "other": public_key_bytes(
        Ed25519PrivateKey.generate())}
    return Party(name, data, session_id="s", parameters=params, identity_key=key,
                 pinned=pinned, **kwargs)


# -- construction ----------------------------------------------------------------------------

def test_a_party_not_pinned_is_refused_naming_the_pinned_parties():
    key = Ed25519PrivateKey.generate()
    with pytest.raises(ProtocolError) as info:
        Party("eve", np.zeros((2, 3)), session_id="s", parameters=PARAMS, identity_key=key,
              pinned={"b": public_key_bytes(key), "a": public_key_bytes(key)})
    assert str(info.value) == ("party 'eve' is not pinned in the session config; parties "
                               "are ['a', 'b']")


def test_an_identity_key_that_is_not_the_pinned_one_is_an_authentication_error_of_the_join():
    key = Ed25519PrivateKey.generate()
    with pytest.raises(AuthenticationError) as info:
        Party("a", np.zeros((2, 3)), session_id="s", parameters=PARAMS, identity_key=key,
              pinned={"a": public_key_bytes(Ed25519PrivateKey.generate())})
    assert (info.value.party, info.value.phase) == ("a", "join")


@pytest.mark.parametrize("d", [1, 4])
def test_dimension_zero_takes_d_from_the_data(d):
    party = _party(np.zeros((3, d)), SessionParameters(dim=0, bound=1.0, scale_bits=8))
    assert party.parameters.dim == d and party.start()[0].hello.dim == d


@pytest.mark.parametrize("data, shape", [(5.0, "()"), ([0.5, 0.25, 1.0], "(3,)")])
def test_dimension_zero_and_data_that_is_not_2d_is_an_input_error_of_this_party(data, shape):
    # d is taken from the last axis (none for a scalar): the usual input error, no crash
    with pytest.raises(InputError) as info:
        _party(data, SessionParameters(dim=0, bound=1.0, scale_bits=8))
    assert info.value.party == "party-0"
    assert str(info.value) == ("party 'party-0': data must be a 2-D array (rows x features), "
                               f"got shape {shape}")


def test_a_fresh_party_holds_no_error_result_or_labels():
    party = _party(np.zeros((2, 3)))
    assert (party.phase, party.error, party.result, party.labels) == ("init", None, None,
                                                                       None)


def test_more_rows_than_the_cap_is_an_input_error_of_this_party():
    params = SessionParameters(dim=3, bound=1.0, scale_bits=8, max_rows_per_party=4)
    with pytest.raises(InputError) as info:
        _party(np.zeros((5, 3)), params)
    assert info.value.party == "party-0"
    assert str(info.value) == "party 'party-0': holds 5 rows, more than the session's max_rows_per_party = 4"
    _party(np.zeros((4, 3)), params)  # at the cap: accepted


def test_transparent_mode_is_warned_about(caplog):
    params = SessionParameters(dim=3, bound=1.0, scale_bits=8, mode="transparent")
    with caplog.at_level("WARNING", logger="protocols"):
        _party(np.zeros((2, 3)), params)
    assert [r.getMessage() for r in caplog.records] == [
        "party 'party-0': TRANSPARENT mode: the coordinator will learn every per-segment "
        "distance matrix, not only D"]


def test_starting_twice_is_refused():
    party = _party(np.zeros((2, 3)))
    party.start()
    with pytest.raises(ProtocolError) as info:
        party.start()
    assert str(info.value) == "party 'party-0' already started (phase 'join')"


# -- input checks ------------------------------------------------------------------------------

@pytest.mark.parametrize("data, says", [
    (np.zeros(3), "data must be a 2-D array (rows x features), got shape (3,)"),
    (np.zeros((2, 3, 1)), "data must be a 2-D array (rows x features), got shape (2, 3, 1)"),
    (np.zeros((0, 3)), "holds no rows (empty party)"),
    (np.zeros((2, 4)), "d must be equal for all parties; has d=4, the session expects 3"),
])
def test_bad_distance_data_is_an_input_error_of_this_party(data, says):
    with pytest.raises(InputError) as info:
        _party(data)
    assert info.value.party == "party-0" and str(info.value) == f"party 'party-0': {says}"


def test_a_sum_contribution_of_the_wrong_shape_is_an_input_error_of_this_party():
    params = SessionParameters(dim=3, bound=1.0, scale_bits=8, kind="sum", rows=2)
    with pytest.raises(InputError) as info:
        _party(np.zeros((3, 3)), params)
    assert info.value.party == "party-0"
    assert str(info.value) == "party 'party-0': contribution must have shape (2, 3), got (3, 3)"


def test_a_one_row_sum_contribution_may_be_a_vector():
    params = SessionParameters(dim=3, bound=1.0, scale_bits=8, kind="sum", rows=1)
    vector = [0.5, -0.25, 1.0]
    party = _party(vector, params)
    assert party.quantized.shape == (1, 3)
    assert party.quantized.tolist() == quantize([vector], 1.0, 8).tolist()


def test_nonnegative_data_is_quantized_with_the_nonnegative_bound(caplog):
    params = SessionParameters(dim=2, bound=1.0, scale_bits=4, nonnegative=True)
    x = np.array([[-0.5, 0.25], [0.75, 2.0]])
    with caplog.at_level("WARNING", logger="protocols"):
        party = _party(x, params)
    assert party.quantized.tolist() == quantize(x, 1.0, 4, nonnegative=True).tolist()
    assert party.clipped == 2  # -0.5 (below 0) and 2.0 (above the bound)
    assert [r.getMessage() for r in caplog.records] == [
        "party 'party-0': 2 entries clipped to the public bound"]


# -- the hello is signed over the documented transcript -------------------------------------

def _field(value) -> bytes:
    data = value if isinstance(value, bytes) else str(value).encode()
    return struct.pack(">I", len(data)) + data


def test_the_hello_signature_covers_the_documented_fields_in_order():
    # docs/protocol.md: session id, protocol version, party id, n_i, d, the X25519 key and
    # the run nonce, length-prefixed after the "hello" label (independent of the library's
    # transcript helper).
    key = Ed25519PrivateKey.generate()
    party = Party("a", np.zeros((2, 3)), session_id="s", parameters=PARAMS,
                  identity_key=key, pinned={"a": public_key_bytes(key)})
    hello = party.start()[0].hello
    fields = ["s", PROTOCOL_VERSION, "a", 2, 3, hello.ephemeral_public_key, hello.run_nonce]
    assert (hello.session_id, hello.protocol_version, hello.party_id, hello.n_rows,
            hello.dim) == ("s", PROTOCOL_VERSION, "a", 2, 3)
    message = (b"omnifc" + _field(PROTOCOL_VERSION) + _field("hello")
               + b"".join(map(_field, fields)))
    Ed25519PublicKey.from_public_bytes(public_key_bytes(key)).verify(hello.signature,
                                                                     message)


# -- the ErrorReport ----------------------------------------------------------------------------

@pytest.mark.parametrize("error, kind, culprit, phase", [
    (AuthenticationError("party-2", "shares"), "authentication", "party-2", "shares"),
    (IntegrityError("bad decode", party="party-2"), "integrity", "party-2", "decode"),
    (InputError("bad rows", party="party-0"), "input", "party-0", "init"),
    (PeerError("late", party="party-3", phase="evaluation"), "peer", "party-3", "evaluation"),
    (ProtocolError("broken"), "protocol", "", "init"),
])
def test_the_error_report_names_kind_culprit_and_phase(error, kind, culprit, phase):
    party = _party(np.zeros((2, 3)))
    report = party.error_report(error).error
    assert (report.session_id, report.reporter, report.kind, report.party, report.phase,
            report.message) == ("s", "party-0", kind, culprit, phase, str(error))


def test_the_error_report_of_a_foreign_exception_says_only_its_type():
    party = _party(np.zeros((2, 3)))
    report = party.error_report(KeyError("secret share 12345")).error
    assert (report.kind, report.party, report.phase, report.message) == (
        "protocol", "", "init", "KeyError")


def test_the_error_report_after_a_failure_names_the_phase_it_failed_in():
    session, _ = _in_phase("evaluation")
    party = session.parties["party-0"]
    error = _refusal(party, _result(party_id="party-3"))
    assert party.failed_in == "ready"
    report = party.error_report(ProtocolError("later")).error
    assert (report.phase, report.kind, report.party) == ("ready", "protocol", "")
    report = party.error_report(error).error
    assert (report.phase, report.kind, report.party) == ("result", "peer", "coordinator")


# -- the Ready message ---------------------------------------------------------------------------

def test_a_party_that_holds_every_share_says_ready_for_the_shares_phase():
    session = Session(random_data([2, 3, 2], 3, seed=8), PARAMS)
    queue = session.run_until("shares")
    readies = []
    while queue:
        dest, _, env = queue.pop(0)
        if dest == "coordinator":
            continue
        for out in session.parties[dest].receive(env):
            if out.HasField("share"):
                queue.append((out.share.receiver, out.share.sender, out))
            else:
                readies.append(out.ready)
    assert sorted((r.session_id, r.party_id, r.phase) for r in readies) == [
        ("test-session", name, "shares") for name in ("party-0", "party-1", "party-2")]
