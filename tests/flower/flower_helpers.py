"""An in-process Flower Grid: the ServerApp's Grid API delivered straight to ClientApps.

``LoopbackGrid`` implements ``flwr.serverapp.grid.Grid`` over real ``flwr.clientapp.ClientApp``
objects and one real ``flwr.app.Context`` per node (kept between messages, as a SuperNode
keeps it). Every message is passed through Flower's own ``Message`` objects; every node's
reply is produced by ``ClientApp.__call__`` (so mods and registration run as in Flower).
Each node handles a message in a **fresh** ClientApp by default (``fresh_apps=True``: a new
process per message, so the party must come back from the Context alone).

A node can be made to stop answering (``silence(node_id)``): ``send_and_receive`` then
returns without its reply, as Flower's does when the timeout passes (no real waiting: the
grid knows no reply will come). A ClientApp that raises answers with a Flower ``Error``
reply, as a SuperNode's does. Nodes can join later (``add_node``: a newcomer).

``Federation`` builds such a grid of omnifc parties (one identity key and Context each);
``register(app, name)`` adds the ClientApp's other handlers (train, evaluate).
"""

from __future__ import annotations

import itertools
import threading
import uuid

import pytest

pytest.importorskip("flwr", reason="flwr is not installed (pip install 'omnifc[flower]'); "
                    ".ci/protobuf_matrix.sh runs these tests in its low venv")

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey  # noqa: E402
from flwr.app import Context, Error, Message, RecordDict  # noqa: E402
from flwr.clientapp import ClientApp  # noqa: E402
from flwr.common.constant import ErrorCode  # noqa: E402
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

    def add_node(self, node_id: int, app, node_config: dict, factory=None) -> None:
        self.apps[node_id] = app
        if factory is not None:
            self.fresh_apps[node_id] = factory
        self.contexts[node_id] = Context(run_id=self._run_id, node_id=node_id,
                                         node_config=dict(node_config), state=RecordDict(),
                                         run_config={})

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

    def _stamp(self, message) -> None:
        """What the SuperLink sets on a pushed message (id, run, source), and the record."""
        message.metadata.__dict__["_message_id"] = uuid.uuid4().hex
        message.metadata.__dict__["_run_id"] = self._run_id
        message.metadata.__dict__["_src_node_id"] = SUPERLINK_NODE_ID
        self.sent.append(message)

    def push_messages(self, messages):
        ids = []
        for message in messages:
            self._stamp(message)
            node = message.metadata.dst_node_id
            if node in self.silent or node not in self.apps:
                ids.append(message.metadata.message_id)
                continue
            app = self.fresh_apps[node]() if node in self.fresh_apps else self.apps[node]
            try:
                reply = app(message, self.contexts[node])
            except Exception as exc:  # a SuperNode answers with an error reply
                reply = Message(Error(ErrorCode.CLIENT_APP_RAISED_EXCEPTION,
                                      f"{type(exc).__name__}: {exc}"), reply_to=message)
            reply.metadata.__dict__["_src_node_id"] = node
            self._replies[message.metadata.message_id] = reply
            ids.append(message.metadata.message_id)
        return ids

    def pull_messages(self, message_ids):
        out = [self._replies.pop(i) for i in message_ids if i in self._replies]
        self.received.extend(out)
        return out

    def send_and_receive(self, messages, *, timeout=None):
        return self.pull_messages(self.push_messages(messages))


class ThreadedGrid(LoopbackGrid):
    """LoopbackGrid whose nodes handle their messages concurrently (a thread per message),
    the replies pulled when ready (the gRPC data plane: every node's party runs the whole
    session inside its one message, so the nodes must run at once). ``drop_reply(node)``:
    that node handles its messages but its replies never arrive."""

    dropped: set = frozenset()
    #: set: replies are pulled as they come; clear (``hold_replies``): they wait (Flower's
    #: reply path, slow in a deployment) until ``release_replies``
    released = None

    def drop_reply(self, node_id: int) -> None:
        self.dropped = set(self.dropped) | {node_id}

    def hold_replies(self) -> None:
        """From now on no reply can be pulled until :meth:`release_replies`."""
        self.released = threading.Event()

    def release_replies(self) -> None:
        if self.released is not None:
            self.released.set()

    def answered(self) -> int:
        """How many replies wait to be pulled."""
        return len(self._replies)

    def pull_messages(self, message_ids):
        if self.released is not None and not self.released.is_set():
            return []
        return super().pull_messages(message_ids)

    def push_messages(self, messages):
        ids = []
        for message in messages:
            self._stamp(message)
            ids.append(message.metadata.message_id)
            node = message.metadata.dst_node_id
            if node in self.silent or node not in self.apps:
                continue
            threading.Thread(target=self._answer, args=(node, message), daemon=True).start()
        return ids

    def _answer(self, node, message):
        try:
            reply = self.apps[node](message, self.contexts[node])
        except Exception as exc:  # a SuperNode answers with an error reply
            reply = Message(Error(ErrorCode.CLIENT_APP_RAISED_EXCEPTION,
                                  f"{type(exc).__name__}: {exc}"), reply_to=message)
        reply.metadata.__dict__["_src_node_id"] = node
        if node not in self.dropped:
            self._replies[message.metadata.message_id] = reply


class Federation:
    """Flower nodes, each an omnifc party with its own identity key and Context.

    ``data``: party -> rows (or a dict part -> rows: a multi-part embedding; or the node's
    ``rows(context, session)``: rows that depend on the session);
    ``parameters``: SessionParameters, or a dict session -> SessionParameters.
    ``sessions``: session id -> the parties it pins (all of
    ``data`` in one session ``session_id`` by default). ``newcomers`` (party names of
    ``data``) join the grid only when :meth:`join` is called.
    """

    def __init__(self, data: dict, parameters, *, fresh: bool = True,
                 session_id: str = "flower-session-1", sessions=None, register=None,
                 newcomers=()) -> None:
        from omnifc.flower import PartySetup, add_party
        from omnifc.flower import _constants as C
        from protocols._identity import public_key_bytes

        self._PartySetup, self._add_party, self.C = PartySetup, add_party, C
        self.data = data
        self.parameters = parameters
        self.session_id = session_id
        self.sessions = dict(sessions or {session_id: list(data)})
        self.register = register
        self.keys = {name: Ed25519PrivateKey.generate() for name in data}
        self.public = {name: public_key_bytes(key) for name, key in self.keys.items()}
        self.pinned = {name: self.public[name] for name in self.sessions[session_id]}
        self.node_of = {name: 1000 + i for i, name in enumerate(data)}
        self.handlers = {}
        self.fresh = fresh
        waiting = set(newcomers)
        apps = {node: self._app(name) for name, node in self.node_of.items()
                if name not in waiting}
        factories = ({node: (lambda name=name: self._app(name))
                      for name, node in self.node_of.items() if name not in waiting}
                     if fresh else None)
        configs = {node: {C.NODE_PARTY: name} for name, node in self.node_of.items()
                   if name not in waiting}
        self.grid = LoopbackGrid(apps, configs, fresh_apps=factories)

    def join(self, name: str) -> None:
        node = self.node_of[name]
        self.grid.add_node(node, self._app(name), {self.C.NODE_PARTY: name},
                           (lambda: self._app(name)) if self.fresh else None)

    def _app(self, name: str) -> ClientApp:
        app = ClientApp()

        def setup(context):
            assert context.node_config[self.C.NODE_PARTY] == name
            return [self._PartySetup(name, session, self.parameters_of(session), self.keys[name],
                                     {p: self.public[p] for p in parties})
                    for session, parties in self.sessions.items() if name in parties]

        rows = self.data[name]   # rows, {part: rows}, or rows(context, session)
        self.handlers[name] = self._add_party(
            app, rows if callable(rows) else (lambda context: self.data[name]), setup=setup)
        if self.register is not None:
            self.register(app, name)
        return app

    def workflow(self, session_id=None, **options):
        from omnifc.flower import SecureDistanceWorkflow

        session = self.session_id if session_id is None else session_id
        pinned = {p: self.public[p] for p in self.sessions[session]}
        return SecureDistanceWorkflow(session, self.parameters_of(session), pinned,
                                      phase_timeout=2.0, join_timeout=1.0, **options)

    def parameters_of(self, session: str):
        """The session's parameters (``parameters``: one for all, or a dict by session)."""
        if isinstance(self.parameters, dict):
            return self.parameters[session]
        return self.parameters

    def status(self, name: str) -> dict:
        from omnifc.flower import party_status

        return party_status(self.grid.contexts[self.node_of[name]])

    def rebuilt_party(self, name: str):
        """The party as its node's Context alone rebuilds it (replay)."""
        context = self.grid.contexts[self.node_of[name]]
        handler = self.handlers[name]
        return handler._restore(context, context.state.config_records[self.C.STATE_RECORD])


def grpc_session(folder, data: dict, *, dim: int, bound: float, scale_bits: int,
                 deadline: float = 20.0, result_deadline: float = 5.0, register=None,
                 adversaries=None, wrap=None, more=()):
    """The demo key ceremony for the parties of ``data`` (one session config with the
    coordinator's TLS key, on a free loopback port) and a :class:`ThreadedGrid` whose node
    2000 + i runs party i of ``data`` (``rows = data[name]``) over omnifc's gRPC data plane.
    ``register(app, name)`` adds the ClientApp's other handlers; ``wrap(name, app)`` may
    return a replacement app (an attacker around the honest one). ``more``: SessionParameters
    of further sessions over the same keys (then the first item returned is the list of
    configs, and ``data[name]`` may be a dict of parts). Returns (config, grid, node of
    party)."""
    from flwr.clientapp import ClientApp

    from omnifc.flower import PartySetup, add_party
    from omnifc.flower import _constants as C
    from omnifc.flower._local import free_port
    from protocols import (SessionParameters, generate_certificates, load_identity,
                           load_session_config, parameters_from_config)
    from protocols._config import SESSION_FIELDS, ConfigParameters, Deadlines

    options = {} if adversaries is None else {"adversaries": adversaries}
    params = SessionParameters(dim=dim, bound=bound, scale_bits=scale_bits, **options)
    deadlines = Deadlines(join=deadline, shares=deadline, evaluation=deadline,
                          result=result_deadline)
    certs = generate_certificates(
        folder / "certs", list(data), coordinator_address=f"127.0.0.1:{free_port()}",
        parameters=ConfigParameters.of(params), deadlines=deadlines,
        **{f.name: getattr(params, f.name) for f in SESSION_FIELDS})
    config = load_session_config(certs.config)
    extra = [more_session(folder / "certs", list(data), p, deadlines) for p in more]
    apps, configs, node_of = {}, {}, {}
    for i, name in enumerate(data):
        app = ClientApp()
        identity = load_identity(folder / "certs" / f"{name}.identity.pem")
        setups = [PartySetup(name, c.session_id, parameters_from_config(c), identity,
                             {p.name: p.identity_public_key for p in c.parties}, c)
                  for c in [config] + extra]
        add_party(app, lambda context, name=name: data[name],
                  setup=lambda context, s=setups: s)
        if register is not None:
            register(app, name)
        if wrap is not None:
            app = wrap(name, app)
        node_of[name] = 2000 + i
        apps[2000 + i], configs[2000 + i] = app, {C.NODE_PARTY: name}
    if more:
        return [config] + extra, ThreadedGrid(apps, configs), node_of
    return config, ThreadedGrid(apps, configs), node_of


def more_session(certs, parties: list, params, deadlines):
    """One more session config over the same keys (``omnifc session new`` on the cards the
    ceremony wrote), on another free loopback port, with ``params``."""
    from omnifc.flower._local import free_port
    from protocols import dump_session_config, load_card, load_session_config, new_session_config
    from protocols._config import SESSION_FIELDS, ConfigParameters

    cards = [load_card(certs / f"{name}.card.toml") for name in parties]
    config = new_session_config(
        cards, load_card(certs / "coordinator.card.toml"), f"127.0.0.1:{free_port()}",
        parameters=ConfigParameters.of(params), deadlines=deadlines,
        **{f.name: getattr(params, f.name) for f in SESSION_FIELDS})
    for name in ["coordinator"] + list(parties):
        config = config.with_keys(name, certs)
    path = certs / f"session-{config.session_id}.toml"
    dump_session_config(config, path, overwrite=False)
    return load_session_config(path)
