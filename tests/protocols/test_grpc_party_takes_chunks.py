"""A gRPC party takes the share chunks relayed to it in while it is still sending its own
(protocols/_grpc_party.py, ``run_party``: ``_drain(between=arrived)``), so that they do
not pile up in its read-ahead queue: about n d / l field elements at n = 1,000,000
(0.39 GB) if it waited until its own last chunk was sent (issue 22).

The parties run in threads of this process (not forked processes), so that the test can
see the order of what each party did: after every share chunk a party sends, it looks for
chunks that have arrived (``_Prefetched.share_nowait``), and the chunks it finds there are
received as they come. One party sends slowly (a slow uplink), so that the others'
chunks reach it while it is still sending. The session's D is exact either way; the order
is what the test checks."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from protocols import SessionParameters
from protocols import _grpc_party
from protocols._grpc_local import LocalSession
from protocols._grpc_party import party_from_config, run_party
from protocols._tls import party_credentials
from protocol_helpers import plaintext_sq_distances, random_data

pytestmark = [pytest.mark.network, pytest.mark.timeout(120)]


@pytest.mark.slow
def test_a_grpc_party_takes_in_relayed_chunks_between_its_own_share_chunks(monkeypatch):
    data = random_data([300, 260, 280], 8, seed=31)
    params = SessionParameters(dim=8, bound=1.0, scale_bits=8, chunk_bytes=4096)
    events = {name: [] for name in data}  # per party: "sent" / "looked" / "took", in order
    local_party = threading.local()

    original_send = _grpc_party._Link.send
    original_nowait = _grpc_party._Prefetched.share_nowait

    def send(link, env):
        if env.HasField("share"):
            events[local_party.name].append("sent")
            if local_party.name == "party-0":
                time.sleep(0.2)  # a slow uplink: the others' chunks reach it meanwhile
        return original_send(link, env)

    def share_nowait(stream):
        env = original_nowait(stream)
        events[local_party.name].append("looked" if env is None else "took")
        return env

    monkeypatch.setattr(_grpc_party._Link, "send", send)
    monkeypatch.setattr(_grpc_party._Prefetched, "share_nowait", share_nowait)

    with LocalSession(data, params, deadline=30) as local:
        server = local.server().start()
        errors = []

        def party_thread(name):
            local_party.name = name
            try:
                party = party_from_config(local.config, name, data[name], parameters=params)
                run_party(party, f"127.0.0.1:{server.port}",
                          credentials=party_credentials(local.config, name),
                          connect_timeout=10, timeout=60)
            except Exception as error:  # reported below, with the party's name
                errors.append((name, error))

        threads = [threading.Thread(target=party_thread, args=(n,), daemon=True)
                   for n in data]
        try:
            for thread in threads:
                thread.start()
            outcome = server.run()
        finally:
            for thread in threads:
                thread.join(30)
            server.stop()
    assert not errors, errors
    assert not any(thread.is_alive() for thread in threads)
    rows = np.concatenate(list(data.values()))
    assert np.array_equal(outcome.integer, plaintext_sq_distances(rows, 1.0, 8))

    for name, seen in events.items():
        sent = [i for i, e in enumerate(seen) if e == "sent"]
        assert len(sent) >= 4, (name, len(sent))  # several chunks: the order means something
        # after every share chunk but the last, the party looked for arrived chunks before
        # it sent the next one
        for a, b in zip(sent, sent[1:]):
            assert {"looked", "took"} & set(seen[a + 1:b]), (name, seen[a:b + 1])
    # party-0 sends slowly, so the others' chunks reach it while it still sends: it takes
    # them in then, not after its own last chunk
    seen = events["party-0"]
    assert "took" in seen[:max(i for i, e in enumerate(seen) if e == "sent")], seen
