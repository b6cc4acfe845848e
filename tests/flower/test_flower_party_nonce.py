"""Party.run_nonce: the public, read-only run nonce the gRPC data plane's binding proof signs
(omnifc.flower._client reads it instead of the party's private hello)."""

from __future__ import annotations

import numpy as np
import pytest

from protocols import Party, SessionParameters, generate_identity, public_key_bytes

pytestmark = [pytest.mark.protobuf_matrix, pytest.mark.timeout(60)]


def _party(name, keys):
    pinned = {n: public_key_bytes(k) for n, k in keys.items()}
    return Party(name, np.zeros((2, 3)), session_id="s", identity_key=keys[name],
                 parameters=SessionParameters(dim=3, bound=1.0, scale_bits=8), pinned=pinned)


def test_run_nonce_is_the_one_of_the_signed_hello_and_read_only():
    keys = {"org-a": generate_identity(), "org-b": generate_identity()}
    party = _party("org-a", keys)
    before = party.run_nonce
    (hello,) = [env for env in party.start() if env.WhichOneof("body") == "hello"]
    assert party.run_nonce == before == bytes(hello.hello.run_nonce)
    assert isinstance(party.run_nonce, bytes) and len(party.run_nonce) == 32
    with pytest.raises(AttributeError):
        party.run_nonce = b"\0" * 32
    assert party.run_nonce == bytes(hello.hello.run_nonce)
    assert _party("org-b", keys).run_nonce != party.run_nonce  # fresh per run
