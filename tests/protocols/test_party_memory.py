"""A party's memory in the share exchange: under an address-space limit (RLIMIT_AS, in a
child process), a party of 200,000 rows loads its rows memory-mapped, quantizes them, and
encodes and sends its shares a block of rows at a time into a ``pairs`` session that
decodes its entries exactly; the old code's all-at-once encoding cannot fit under the same limit.

The child runs one whole session in memory (three parties, l = t = 1, d = 64, the
coordinator too), relaying every share chunk as soon as it is made (a party's output is
pulled one envelope at a time, the way the gRPC transport sends it). party-0 holds
200,000 rows; party-1 and party-2 two rows each. What the limit leaves (``HEADROOM``
above the address space after a warm-up session) holds the three parties' held shares
as uint32 (3 x 200,004 x 64 x 4 B = 154 MB) and party-0's int16 rows (26 MB) and one
block of shares; the old code needed, for party-0 alone, its rows as float64 and int64
with the quantization's float temporaries (about 0.5 GB), then every party's shares of
its rows at once as int64 (3 x 102 MB, with 300 MB of encoding inputs beside them).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

CHILD = textwrap.dedent("""
    import collections, resource, sys
    import numpy as np
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    import protocols
    from protocols import Coordinator, Party, SessionParameters, public_key_bytes
    from protocols import load_party_data

    print("MODULE", protocols.__file__, flush=True)
    folder, headroom, plant = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    if plant == "all-at-once":  # the old encoding: every party's shares of all rows
        import protocols._party as party_module
        party_module._ENCODE_ELEMENTS = 1 << 40  # one block of every row
    n0, dim = 200_000, 64
    rng = np.random.default_rng(11)
    # pairs across every chunk and party boundary, and random ones
    edges = [(0, 1), (0, 199_999), (4_095, 4_096), (199_999, 200_000), (200_001, 200_003),
             (123_456, 200_002)]
    drawn = {tuple(sorted(p)) for p in rng.integers(0, n0 + 4, (3_000, 2)).tolist()}
    pairs = tuple(edges + sorted(p for p in drawn - set(edges) if p[0] != p[1]))
    rows = {"party-0": rng.uniform(-1, 1, (n0, dim)), "party-1": rng.uniform(-1, 1, (2, dim)),
            "party-2": rng.uniform(-1, 1, (2, dim))}
    for name, x in rows.items():
        np.save(f"{folder}/{name}.npy", x)
    del rows, x

    def session(data, pairs):
        params = SessionParameters(dim=dim, bound=1.0, scale_bits=8, segments=1,
                                   noise_segments=1, integrity="off", reconnect_grace=0.0,
                                   layout="pairs", layout_rows=pairs)
        names = list(data)
        keys = {n: Ed25519PrivateKey.generate() for n in names}
        pinned = {n: public_key_bytes(k) for n, k in keys.items()}
        parties = {n: Party(n, data[n], session_id="s", parameters=params,
                            identity_key=keys[n], pinned=pinned) for n in names}
        coordinator = Coordinator("s", params, names, pinned)
        queue = collections.deque(("coordinator", n, p.start()[0]) for n, p in parties.items())
        outboxes = {n: collections.deque() for n in names}
        while coordinator.outcome is None:
            if queue:
                dest, sender, env = queue.popleft()
                if dest == "coordinator":
                    queue.extend((d, dest, e) for d, e in coordinator.receive(sender, env))
                else:
                    outboxes[dest].append(iter(parties[dest].receive(env)))
                continue
            for name in names:  # nothing in flight: the next envelope a party sends
                box = outboxes[name]
                env = None
                while box and env is None:
                    env = next(box[0], None)
                    if env is None:
                        box.popleft()
                if env is not None:
                    queue.append(("coordinator", name, env))
                    break
            else:
                raise SystemExit("STUCK")
        return coordinator.outcome

    def status(key):
        with open("/proc/self/status") as lines:
            return next(int(line.split()[1]) * 1024 for line in lines if line.startswith(key))

    # warm-up (numba caches, imports, thread pools) on a few rows, before the limit
    session({n: np.zeros((3, dim)) + i / 4 for i, n in enumerate(("a", "b", "c"))},
            ((0, 4), (2, 8)))
    data = {n: load_party_data(f"{folder}/{n}.npy") for n in ("party-0", "party-1", "party-2")}
    import ctypes, gc
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    base = status("VmSize:")
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (base + headroom, hard))
    try:
        outcome = session(data, pairs)
    except Exception as error:  # noqa: BLE001 - report what ran out
        cause = error.__cause__ if error.__cause__ is not None else error
        print("FAILED", type(cause).__name__, str(error)[:200], flush=True)
        raise SystemExit(0)
    resource.setrlimit(resource.RLIMIT_AS, (hard, hard))
    print("GROWTH", (status("VmPeak:") - base) >> 20, "MB", flush=True)
    # the reference: the rows quantized by the tests' oracle, numpy int64 arithmetic for
    # every entry, Python integers for sampled rows
    from oracles import quantize
    q = quantize(np.vstack([np.load(f"{folder}/{n}.npy") for n in data]), 1.0, 8)
    q = np.asarray(q, dtype=np.int64)
    i, j = np.array(pairs).T
    expected = ((q[i] - q[j]) ** 2).sum(-1)
    got = np.asarray(outcome.integer)
    python = all(int(got[e]) == sum((int(u) - int(v)) ** 2 for u, v in zip(q[a], q[b]))
                 for e, (a, b) in enumerate(pairs[:200]))
    print("EXACT" if np.array_equal(got, expected) and python else "WRONG", flush=True)
""")

#: What the child may add to its address space after the warm-up: the new code needs
#: about 0.3 GB (measured: GROWTH in its output), the old about 1 GB.
HEADROOM = 480 * 2**20


def _run(tmp_path, plant: str) -> str:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT), str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")]))
    child = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path), str(HEADROOM), plant],
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=280)
    out = child.stdout + child.stderr[-3000:]
    assert f"MODULE {ROOT}" in child.stdout, out
    assert child.returncode == 0, out
    return child.stdout


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc")
def test_a_200k_row_party_encodes_and_holds_its_shares_where_all_at_once_cannot(tmp_path):
    out = _run(tmp_path, "none")
    assert "EXACT" in out and "FAILED" not in out, out
    out = _run(tmp_path, "all-at-once")
    assert "FAILED MemoryError" in out, out
