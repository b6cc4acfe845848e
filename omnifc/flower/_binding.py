"""Which Flower node runs which omnifc party, over the gRPC data plane: a signed proof.

Over :class:`~omnifc.flower.SecureDistanceWorkflow` a node is bound to a party by the signed
hello it carries in a Flower message. Over :class:`~omnifc.flower.GrpcDataPlaneWorkflow`
the session runs on omnifc's own gRPC, so the Flower server has no such message: each node
answers its one start message with the party it ran and a **binding proof**, an Ed25519
signature with that party's identity key (the one the session config pins) over

    transcript("flower-node-binding", session id, party id, the party's run nonce,
               the roster digest, the Flower node id, the start message's id)

(omnifc's canonical transcript encoding, ``b"omnifc"``, the protocol version, the label and
the fields, each length-prefixed, as every signed message of the protocol has: under its own
label, so no hello, roster confirmation or resume signature has the same bytes). The
ServerApp checks it against the pinned key, the run nonce of that party's hello in the
coordinator's roster, the roster digest of the session it just ran, the node id Flower gives
the reply's sender and the id of the message the reply answers, before it sends any cluster
model. So:

- a node claiming another party's name cannot sign for it (it lacks that party's key);
- a proof copied from another node (or from an earlier message or session) names another
  node id, message id, run nonce or roster, and does not verify;
- a node that sends no proof is bound to nothing (its party is a dropout for training).

Flower's node ids are assigned by the SuperLink (with ``--enable-supernode-auth``, to
authenticated SuperNodes only); the proof ties the party to whichever node Flower delivers
the reply from, so a node cannot ask for another node's id to be used.
"""

from __future__ import annotations

from finite_field import AuthenticationError, ProtocolError
from protocols import sign, transcript, verify

__all__ = ["NodeBindingError", "binding_transcript", "prove_binding", "check_binding"]

#: The transcript label of a binding proof (domain separation).
LABEL = "flower-node-binding"


class NodeBindingError(ProtocolError):
    """A Flower node's claim to run a party was refused.

    Attributes
    ----------
    node : int
        The Flower node id of the reply.
    party : str or None
        The party it claimed.
    reason : str
        Why (unknown party, no proof, proof does not verify, party bound already...).
    """

    def __init__(self, node: int, party, reason: str) -> None:
        super().__init__(f"Flower node {node} claiming party {party!r} was refused: {reason}")
        self.node = node
        self.party = party
        self.reason = reason


def binding_transcript(session_id: str, party_id: str, run_nonce: bytes, roster_digest: bytes,
                       node_id: int, message_id: str) -> bytes:
    """The bytes a node's party signs to bind itself to that node and message.

    >>> a = binding_transcript("s", "org-a", b"n" * 32, b"r" * 32, 7, "m1")
    >>> a != binding_transcript("s", "org-a", b"n" * 32, b"r" * 32, 8, "m1")
    True
    """
    fields = (str(session_id), str(party_id), bytes(run_nonce), bytes(roster_digest),
              int(node_id), str(message_id))
    return transcript(LABEL, *fields)


def prove_binding(identity_key, session_id: str, party_id: str, run_nonce: bytes,
                  roster_digest: bytes, node_id: int, message_id: str) -> bytes:
    """The node side: the 64-byte proof (Ed25519 under the party's identity key).

    >>> from protocols import generate_identity
    >>> len(prove_binding(generate_identity(), "s", "org-a", b"n" * 32, b"r" * 32, 7, "m1"))
    64
    """
    return sign(identity_key, binding_transcript(session_id, party_id, run_nonce,
                                                 roster_digest, node_id, message_id))


def check_binding(pinned: dict, hellos: dict, roster_digest, session_id: str, node_id: int,
                  message_id: str, party, proof) -> str:
    """The server side: return ``party`` if ``proof`` binds it to ``node_id`` and
    ``message_id`` in this session run; raise :class:`NodeBindingError` otherwise.

    ``pinned``: party -> pinned identity public key; ``hellos``: party -> the hello of the
    roster (the coordinator's ``hellos``); ``roster_digest``: the coordinator's.

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> from protocols import generate_identity, public_key_bytes
    >>> key = generate_identity()
    >>> pinned = {"org-a": public_key_bytes(key)}
    >>> hellos = {"org-a": SimpleNamespace(run_nonce=b"n" * 32)}
    >>> proof = prove_binding(key, "s", "org-a", b"n" * 32, b"r" * 32, 7, "m1")
    >>> check_binding(pinned, hellos, b"r" * 32, "s", 7, "m1", "org-a", proof)
    'org-a'
    >>> try:  # the same proof from node 8
    ...     check_binding(pinned, hellos, b"r" * 32, "s", 8, "m1", "org-a", proof)
    ... except NodeBindingError as error:
    ...     print(error.node, error.party, error.reason[:33])
    8 org-a its binding proof does not verify
    """
    if not party:
        raise NodeBindingError(node_id, party, "the reply names no party")
    party = str(party)
    if party not in pinned:
        raise NodeBindingError(node_id, party, "not a party of the session config")
    if roster_digest is None or party not in hellos:
        raise NodeBindingError(node_id, party, "that party is not in the session's roster")
    if not proof:
        raise NodeBindingError(node_id, party, "the reply carries no binding proof")
    try:
        verify(pinned[party], binding_transcript(session_id, party, hellos[party].run_nonce,
                                                 roster_digest, node_id, message_id),
               bytes(proof), party=party, phase="binding")
    except AuthenticationError:
        raise NodeBindingError(
            node_id, party, "its binding proof does not verify under the party's pinned "
            "identity key for this node, message, run nonce and roster (a node claiming "
            "another party, or a proof copied from another node, message or session)"
        ) from None
    return party
