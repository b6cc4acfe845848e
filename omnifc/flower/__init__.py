"""omnifc on Flower: secure distances and clustering as a Flower workflow (``omnifc[flower]``).

A ServerApp runs :class:`SecureDistanceWorkflow` (omnifc's coordinator over Flower's Grid
and Message API); every ClientApp registers omnifc's party with :func:`add_party` (a
``query.omnifc`` handler whose party state lives in the node's Context). Flower's server is
untrusted like omnifc's coordinator: it relays ciphertexts and sees masked tiles and D.
See docs/flower.md.

This subpackage imports flwr only when a message is built or handled: the ``protocols``
package never imports it.
"""

from ._client import (KeystreamSource, PartyHandler, PartySetup, add_party, party_status,
                      setup_from_node_config)
from ._constants import ACTION, MESSAGE_TYPE
from ._server import SecureDistanceWorkflow

__all__ = ["SecureDistanceWorkflow", "PartyHandler", "PartySetup", "add_party",
           "party_status", "setup_from_node_config", "KeystreamSource", "ACTION",
           "MESSAGE_TYPE"]
