"""Three protections of a party, each pinned by a test that fails when it is removed.

- The ephemeral X25519 key (and the run nonce) of a party without a test source comes from
  the OS CSPRNG: through ``cryptography``'s ``X25519PrivateKey.generate`` (OpenSSL's
  CSPRNG) and ``os.urandom``, never from numpy's or ``random``'s seeded generators.
- A party verifies the signature of **every** hello of the roster, not only its own: a
  flipped bit or a substituted ephemeral key in another party's hello is refused, naming
  that party, before the party sends anything (no confirmation, no share).
- A party refuses a roster whose row counts exceed the public caps *before it allocates
  anything*: run in a child process under an address-space limit, so that a missing check
  shows up as a clear assertion (the child's MemoryError), not as this test process
  being killed by the kernel.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

import protocols._crypto as crypto
from finite_field import AuthenticationError, PeerError
from protocols import Party, SessionParameters
from protocols._crypto import EphemeralKey
from protocols._generated import omnifc_pb2 as pb
from protocols._identity import public_key_bytes, sign
from protocols._party import confirmation_transcript, hello_transcript
from protocol_helpers import Session, random_data

PARAMS = SessionParameters(dim=3, bound=1.0, scale_bits=8)
ROOT = Path(__file__).resolve().parents[2]


# -- the ephemeral key comes from the OS CSPRNG --------------------------------------------------

class _CountingX25519:
    """Stands in for ``X25519PrivateKey`` in protocols._crypto: records every key that
    ``generate`` (the CSPRNG path) and ``from_private_bytes`` (the test-source path) made."""

    def __init__(self):
        self.generated, self.from_bytes = [], []

    def generate(self):
        key = X25519PrivateKey.generate()
        self.generated.append(key)
        return key

    def from_private_bytes(self, data):
        key = X25519PrivateKey.from_private_bytes(data)
        self.from_bytes.append(key)
        return key


def _raw(key) -> bytes:
    from cryptography.hazmat.primitives import serialization
    return key.public_key().public_bytes(serialization.Encoding.Raw,
                                         serialization.PublicFormat.Raw)


@pytest.mark.timeout(60)
def test_a_partys_ephemeral_key_is_made_by_x25519_generate(monkeypatch):
    counting = _CountingX25519()
    monkeypatch.setattr(crypto, "X25519PrivateKey", counting)
    session = Session(random_data([2, 3, 1], 3, seed=1), PARAMS)  # no source: production
    hellos = {name: env.hello for name, env in session.hellos().items()}
    assert len(counting.generated) == 3 and counting.from_bytes == []
    # the key in each hello is exactly the one generate() returned, in party order
    assert [h.ephemeral_public_key for h in hellos.values()] == \
        [_raw(k) for k in counting.generated]
    # a seeded test source takes the other path, and only then
    EphemeralKey.generate(np.random.default_rng(0))
    assert len(counting.generated) == 3 and len(counting.from_bytes) == 1


@pytest.mark.timeout(60)
def test_a_partys_run_nonce_is_os_urandom(monkeypatch):
    drawn = []
    real = os.urandom

    def counting(n):
        value = real(n)
        drawn.append(value)
        return value
    monkeypatch.setattr(os, "urandom", counting)
    [env] = Session(random_data([2, 3, 1], 3, seed=1), PARAMS).parties["party-0"].start()
    assert env.hello.run_nonce in drawn and len(env.hello.run_nonce) == 32


@pytest.mark.timeout(60)
def test_fixed_numpy_and_random_seeds_do_not_fix_the_ephemeral_key_or_nonce():
    data = random_data([2, 3], 3, seed=1)
    key = Ed25519PrivateKey.generate()
    pinned = {"party-0": public_key_bytes(key), "party-1": bytes(32)}
    hellos = []
    for _ in range(2):
        np.random.seed(1234)
        random.seed(1234)
        party = Party("party-0", data["party-0"], session_id="s", parameters=PARAMS,
                      identity_key=key, pinned=pinned)
        hellos.append(party.start()[0].hello)
    assert hellos[0].ephemeral_public_key != hellos[1].ephemeral_public_key
    assert hellos[0].run_nonce != hellos[1].run_nonce
    np.random.seed(1234)
    random.seed(1234)
    first = EphemeralKey.generate().public_bytes
    np.random.seed(1234)
    random.seed(1234)
    assert EphemeralKey.generate().public_bytes != first


# -- every hello of the roster is verified ---------------------------------------------------------

def _roster(session, name="party-0"):
    out = []
    for sender, hello in session.hellos().items():
        out = session.coordinator.receive(sender, hello) or out
    env = dict(out)[name]
    return pb.Envelope.FromString(env.SerializeToString())


def _hello_of(env, name):
    return next(e.hello for e in env.roster.parties if e.hello.party_id == name)


@pytest.mark.timeout(60)
def test_the_unchanged_roster_of_the_tests_below_is_accepted():
    session = Session(random_data([2, 3, 2], 3, seed=2), PARAMS)
    out = list(session.parties["party-0"].receive(_roster(session)))
    assert [e.WhichOneof("body") for e in out] == ["confirmation"]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("victim", ["party-1", "party-2"])
@pytest.mark.parametrize("change", ["signature bit flipped", "ephemeral key swapped",
                                    "ephemeral key swapped and signed by another key"])
def test_a_party_refuses_a_roster_with_another_partys_hello_altered(victim, change):
    session = Session(random_data([2, 3, 2], 3, seed=2), PARAMS)
    env = _roster(session)
    hello = _hello_of(env, victim)
    if change == "signature bit flipped":
        signature = bytearray(hello.signature)
        signature[17] ^= 0x04
        hello.signature = bytes(signature)
    else:
        hello.ephemeral_public_key = EphemeralKey.generate().public_bytes
        if change.endswith("another key"):
            hello.signature = sign(Ed25519PrivateKey.generate(), hello_transcript(hello))
    party = session.parties["party-0"]
    sent = []
    with pytest.raises(AuthenticationError) as info:
        sent.extend(party.receive(env))
    assert (info.value.party, info.value.phase) == (victim, "join")
    assert sent == [] and party.phase == "failed" and party.failed_in == "join"
    assert not hasattr(party, "keys") and not hasattr(party, "roster_digest")
    report = party.error_report(info.value).error
    assert (report.kind, report.party, report.phase) == ("authentication", victim, "join")


# -- the row caps are checked before anything is allocated -----------------------------------------

#: Extra address space the child may use above its baseline (after imports and setup).
HEADROOM = 1 << 30  # 1 GiB

CAP_CASES = {
    # party-2 (colluding with the coordinator) announces 2^39 rows in a validly signed hello
    "max_rows_per_party": dict(max_rows_per_party=1_000_000, max_rows_total=2_000_000),
    # within the per-party cap, over the total
    "max_rows_total": dict(max_rows_per_party=1 << 39, max_rows_total=1 << 39),
}


def _child(case: str) -> int:
    """Run in a child process: party-0 gets a roster over the caps under RLIMIT_AS."""
    import resource

    import protocols
    print("MODULE", protocols.__file__, flush=True)
    params = SessionParameters(dim=1, bound=1.0, scale_bits=4, chunk_bytes=4096,
                               **CAP_CASES[case])
    session = Session(random_data([2, 3, 1], 1, seed=3), params)
    env = _roster(session)
    hello = _hello_of(env, "party-2")  # the last party: earlier offsets stay right
    hello.n_rows = 1 << 39
    hello.signature = sign(session.keys["party-2"], hello_transcript(hello))
    with open("/proc/self/status") as status:
        baseline = next(int(line.split()[1]) * 1024 for line in status
                        if line.startswith("VmSize:"))
    resource.setrlimit(resource.RLIMIT_AS, (baseline + HEADROOM, baseline + HEADROOM))
    party = session.parties["party-0"]
    try:
        [confirmation] = list(party.receive(env))
    except PeerError as error:
        print("REFUSED", error, flush=True)
        return 0
    # accepted: the coordinator relays valid confirmations (party-2 colludes, party-1
    # honestly confirms the same roster), and party-0 starts on its shares
    digest = confirmation.confirmation.roster_digest
    relay = pb.Envelope(confirmations=pb.RosterConfirmations(
        session_id="test-session", confirmations=[pb.RosterConfirmation(
            session_id="test-session", party_id=name, roster_digest=digest,
            signature=sign(session.keys[name], confirmation_transcript(
                "test-session", name, digest))) for name in session.names]))
    try:
        for _ in party.receive(relay):
            pass
    except Exception as error:  # noqa: BLE001 - report what the missing check led to
        cause = error.__cause__ if error.__cause__ is not None else error
        print("ACCEPTED, then", type(cause).__name__, flush=True)
        return 3
    print("ACCEPTED, and the shares were sent", flush=True)
    return 4


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc")
@pytest.mark.parametrize("case", sorted(CAP_CASES))
def test_a_roster_over_the_row_caps_is_refused_before_any_allocation(case):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT), str(Path(__file__).parent), str(Path(__file__).parents[1]),
         os.environ.get("PYTHONPATH", "")]))
    child = subprocess.run([sys.executable, __file__, case], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=150)
    out = child.stdout
    assert f"MODULE {ROOT}" in out, out + child.stderr[-2000:]  # this worktree's code
    assert child.returncode == 0 and "REFUSED" in out, (
        f"party-0 did not refuse a roster over {case} at once (exit code "
        f"{child.returncode}): {out.strip()} {child.stderr.strip()[-1500:]}")
    assert f"more than the session's {case}" in out
    assert "party 'coordinator' in phase 'join'" in out


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1]))
