"""Names shared by the Flower server workflow and the Flower client handler.

One place for the message type, record keys and node-config keys, like Flower's
``secaggplus_constants``: the server and the client read the same names.
"""

from __future__ import annotations

#: The ClientApp action the workflow sends (``app.query(ACTION)`` on the client side).
ACTION = "omnifc"
#: The Flower message type of every omnifc message (``query.omnifc``).
MESSAGE_TYPE = f"query.{ACTION}"

#: The ConfigRecord of a message's content that carries omnifc.
RECORD = "omnifc"
#: Keys inside :data:`RECORD`.
KEY_SESSION = "session"          # str: the session id
KEY_START = "start"              # bool: start the party (send the hello)
KEY_ENVELOPES = "envelopes"      # list[bytes]: serialized omnifc.v1.Envelope, in order
KEY_TRANSPORT = "transport"      # str: "flower" (envelopes in messages; the default) or
                                 # "grpc" (the whole session over omnifc's own gRPC + mutual
                                 # TLS, to the coordinator address of the pinned session config)
KEY_PHASE = "phase"              # str, in a "grpc" reply: the party's phase at its end
KEY_ERROR = "error"              # str, in a "grpc" reply: why it failed ("" if it did not)
KEY_PARTY = "party"              # str, in a "grpc" reply: the party this node claims to run
KEY_PROOF = "proof"              # bytes, in a "grpc" reply: the party's Ed25519 signature
                                 # binding it to this node and message (omnifc.flower._binding)
KEY_PART = "part"                # str, in a start message: which part of a multi-part
                                 # embedding this session carries (e.g. FMCL's "z" and "t")

#: The two data planes (:data:`KEY_TRANSPORT`).
TRANSPORT_FLOWER = "flower"
TRANSPORT_GRPC = "grpc"

#: The ConfigRecord of the node's ``context.state`` that holds the party between messages.
STATE_RECORD = "omnifc.party"
STATE_SESSION = "session"        # str
STATE_SEED = "seed"              # bytes: the party's 32-byte randomness key (node-local secret)
STATE_RECEIVED = "received"      # list[bytes]: every envelope the party consumed, in order
STATE_PHASE = "phase"            # str: the party's phase after the last message
STATE_ERROR = "error"            # str: why the party failed ("" while it has not)
STATE_PART = "part"              # str: the embedding part of the session (multi-part only)

#: The ConfigRecord of the node's ``context.state`` listing every session this node started
#: (a session is started once per node, whichever sessions came between).
STARTED_RECORD = "omnifc.started"
STARTED_SESSIONS = "sessions"    # list[str]

#: Node-config keys (``flower-supernode --node-config`` / the simulation's node config).
NODE_PARTY = "omnifc-party"                     # the party id of this node
NODE_SESSION_CONFIG = "omnifc-session-config"   # path of the session config TOML
NODE_IDENTITY = "omnifc-identity"               # path of this party's identity key
