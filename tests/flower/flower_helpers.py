"""An in-process Flower Grid: the ServerApp's Grid API delivered straight to ClientApps.

``LoopbackGrid`` implements ``flwr.serverapp.grid.Grid`` over real ``flwr.clientapp.ClientApp``
objects and one real ``flwr.app.Context`` per node (kept between messages, as a SuperNode
keeps it). Every message is passed through Flower's own ``Message`` objects; every node's
reply is produced by ``ClientApp.__call__`` (so mods and registration run as in Flower).
Each node handles a message in a **fresh** ClientApp by default (``fresh_apps=True``: a new
process per message, so the party must come back from the Context alone).

A node can be made to stop answering (``silence(node_id)``): ``send_and_receive`` then
returns without its reply, as Flower's does when the timeout passes (no real waiting: the
grid knows no reply will come).
"""

from __future__ import annotations

import itertools
import uuid

import pytest

pytest.importorskip("flwr", reason="flwr is not installed (pip install 'omnifc[flower]'); "
                    ".ci/protobuf_matrix.sh runs these tests in its low venv")

from flwr.app import Context, Message, RecordDict  # noqa: E402
from flwr.common.constant import SUPERLINK_NODE_ID
from flwr.serverapp.grid import Grid
from flwr.supercore.task_identity import TaskIdentity


class LoopbackGrid(Grid):
    def __init__(self, apps: dict, node_configs: dict, *, run_id: int = 7,
                 fresh_apps=None) -> None:
        """``apps``: node_id -> ClientApp (or a zero-argument factory when ``fresh_apps``)."""
        self.apps = dict(apps)
        self.fresh_apps = fresh_apps or {}
        self.contexts = {node: Context(run_id=run_id, node_id=node,
                                       node_config=dict(node_configs[node]),
                                       state=RecordDict(), run_config={})
                         for node in self.apps}
        self._run_id = run_id
        # who the ServerApp process is (a real one is told by the SuperLink)
        TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = (
            run_id, SUPERLINK_NODE_ID, 1)
        self._run = None
        self.silent: set = set()
        self.sent: list = []      # every message the server pushed
        self.received: list = []  # every reply the server pulled
        self._replies: dict = {}
        self._ids = itertools.count(1)

    def silence(self, node_id: int) -> None:
        self.silent.add(node_id)

    # -- Grid API --------------------------------------------------------------------
    def set_run(self, run) -> None:
        self._run = run

    @property
    def run(self):
        return self._run

    def create_message(self, content, message_type, dst_node_id, group_id, ttl=None):
        return Message(content=content, dst_node_id=dst_node_id, message_type=message_type,
                       group_id=group_id, ttl=ttl)

    def get_node_ids(self):
        return list(self.apps)

    def push_messages(self, messages):
        ids = []
        for message in messages:
            message.metadata.__dict__["_message_id"] = uuid.uuid4().hex
            message.metadata.__dict__["_run_id"] = self._run_id
            message.metadata.__dict__["_src_node_id"] = SUPERLINK_NODE_ID
            self.sent.append(message)
            node = message.metadata.dst_node_id
            if node in self.silent or node not in self.apps:
                ids.append(message.metadata.message_id)
                continue
            app = self.fresh_apps[node]() if node in self.fresh_apps else self.apps[node]
            reply = app(message, self.contexts[node])
            self._replies[message.metadata.message_id] = reply
            ids.append(message.metadata.message_id)
        return ids

    def pull_messages(self, message_ids):
        out = [self._replies.pop(i) for i in message_ids if i in self._replies]
        self.received.extend(out)
        return out

    def send_and_receive(self, messages, *, timeout=None):
        return self.pull_messages(self.push_messages(messages))
