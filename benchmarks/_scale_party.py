"""One party's memory at scale, in this process: ``python benchmarks/_scale_party.py --rows N``.

What ``bench_scale --layout landmarks`` runs for each of its m party processes, for one
party only, so that its peak anonymous memory at n = 1,000,000 can be measured without the
other 16 processes (which do not fit beside it on a small machine when every party is
measured at once): party-00 loads its n/m MNIST-shaped rows (``_scale_data``, float64
``.npy`` as the session writes them, memory-mapped), quantizes them, sends its share
chunks (encrypted, then dropped here) and receives every other party's chunks (random
field elements encrypted under the pair keys, made here one chunk at a time), until it
says Ready; then it computes its first D[:, L] blocks (``--tiles``). The other parties
are real :class:`protocols.Party` objects that only sign their hello and their roster
confirmation (their rows are a broadcast array: no memory). The reconnect log is on
(``reconnect_grace`` 30 s, the default), as in the benchmark's sessions.

Prints the peak RssAnon (sampled every 20 ms) per step, above the process before the
party was made and in all. Not a test: no exactness is checked here (the session's
exactness is bench_scale's and the tests').
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _scale_data import DIM, SCALE_BITS, _data_blocks  # noqa: E402
from _scale_watch import _MemoryWatch  # noqa: E402


def _anon() -> int:
    return _MemoryWatch._status("RssAnon")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000, help="n, all parties")
    parser.add_argument("--parties", type=int, default=17)
    parser.add_argument("--segments", type=int, default=8)
    parser.add_argument("--landmarks", type=int, default=1000)
    parser.add_argument("--tiles", type=int, default=50, help="evaluation tiles computed")
    parser.add_argument("--dir", default=None)
    args = parser.parse_args(argv)

    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    import finite_field
    from protocols import Coordinator, Party, SessionParameters, public_key_bytes
    from protocols import load_party_data
    from protocols._crypto import PairKeys
    from protocols._generated import omnifc_pb2 as pb
    from protocols._messages import chunk_rows, envelope, pack

    finite_field.warm_up()
    n, m = args.rows, args.parties
    bounds = np.linspace(0, n, m + 1).astype(int)
    names = [f"party-{j:02d}" for j in range(m)]
    rows_of = dict(zip(names, np.diff(bounds).tolist()))
    folder = Path(args.dir or tempfile.mkdtemp(prefix="scale-party-"))
    path = folder / "party-00.npy"
    mine = np.lib.format.open_memmap(path, mode="w+", dtype=np.float64,
                                     shape=(rows_of[names[0]], DIM))
    _, blocks = _data_blocks(n, seed=0)
    for a, b, block in blocks:  # party-00's rows are the first n/m
        if a >= len(mine):
            break
        stop = min(b, len(mine))
        mine[a:stop] = block[:stop - a] / 2.0**SCALE_BITS
    mine.flush()
    del mine
    params = SessionParameters(dim=DIM, bound=1.0, scale_bits=SCALE_BITS,
                               segments=args.segments, noise_segments=1, nonnegative=True,
                               mode="masked", mask_degree=2, max_rows_per_party=n,
                               max_rows_total=n, layout="landmarks",
                               n_landmarks=args.landmarks)
    keys = {name: Ed25519PrivateKey.generate() for name in names}
    pinned = {name: public_key_bytes(key) for name, key in keys.items()}
    figures, base = {}, _anon()
    with _MemoryWatch() as watch:
        started = time.perf_counter()
        party = Party(names[0], load_party_data(path), session_id="s", parameters=params,
                      identity_key=keys[names[0]], pinned=pinned)
        others = {}
        for name in names[1:]:  # a hello and a confirmation only: rows that take no memory
            other = Party(name, np.zeros((1, DIM)), session_id="s", parameters=params,
                          identity_key=keys[name], pinned=pinned)
            other.quantized = np.broadcast_to(np.zeros(DIM, np.int16), (rows_of[name], DIM))
            others[name] = other
        everyone = {names[0]: party, **others}
        coordinator = Coordinator("s", params, names, pinned)
        figures["join"] = (watch.peak_anon, time.perf_counter() - started)
        queue = [(name, p.start()[0]) for name, p in everyone.items()]
        stream = None
        while queue:  # hellos, roster, confirmations: every message but party-00's shares
            sender, env = queue.pop(0)
            for dest, out in coordinator.receive(sender, env):
                if dest == names[0] and out.HasField("confirmations"):
                    stream = party.receive(out)
                elif dest in others and not out.HasField("confirmations"):
                    queue += [(dest, e) for e in everyone[dest].receive(out)]
                elif dest == names[0]:
                    queue += [(dest, e) for e in party.receive(out)]
        started = time.perf_counter()
        width = party.plan.segment_length
        senders = {name: PairKeys(session_id="s", me=name, peer=names[0],
                                  encryption_key=party.keys[name].encryption_key,
                                  mask_key=party.keys[name].mask_key,
                                  roster_digest=party.roster_digest) for name in names[1:]}
        incoming = [(name, k, i, a, b) for name in names[1:]
                    for k in range(len(party.plan.primes))
                    for i, (a, b) in enumerate(chunk_rows(rows_of[name], width,
                                                          params.chunk_bytes))]
        rng = np.random.default_rng(1)

        def deliver(name, k, i, a, b):
            """Chunk i of ``name``'s shares modulo prime k: random field elements,
            encrypted under the pair key, received by the party."""
            payload = pack(rng.integers(0, party.plan.primes[k], (b - a) * width))
            chunk = pb.ShareChunk(
                session_id="s", round=0, sender=name, receiver=names[0], prime_index=k,
                chunk_index=i, total_chunks=len(chunk_rows(rows_of[name], width,
                                                           params.chunk_bytes)),
                nonce=senders[name].nonce(name, 0, k, i),
                ciphertext=senders[name].encrypt(payload, round_=0, prime_index=k,
                                                 chunk_index=i))
            list(party.receive(envelope(share=chunk)))

        sent = 0
        for env in stream:  # interleaved as the gRPC party does: one in, one out
            sent += env.HasField("share")
            if incoming:
                deliver(*incoming.pop(0))
        for item in incoming:  # the rest, once its own are out
            deliver(*item)
        assert party.phase == "ready", party.phase
        figures["shares"] = (watch.peak_anon, time.perf_counter() - started)
        started = time.perf_counter()
        tiles = party.session.tiles(party.n_total)
        values = party.session.tile_values(party, 0, tiles)
        for index in range(min(args.tiles, len(tiles))):
            values(index)
        getattr(values, "close", lambda: None)()
        figures["evaluation"] = (watch.peak_anon, time.perf_counter() - started)
    os.remove(path)
    report = {"n": n, "parties": m, "rows": int(party.n_rows), "share_chunks_sent": sent,
              "base_anon_gb": base / 1e9, "log_bytes": party._log.bytes,
              "held": [str(h.dtype) for h in party.held],
              "quantized": str(party.quantized.dtype)}
    for step, (peak, seconds) in figures.items():
        report[step] = {"peak_anon_gb": round(peak / 1e9, 3),
                        "above_base_gb": round((peak - base) / 1e9, 3),
                        "seconds": round(seconds, 1)}
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
