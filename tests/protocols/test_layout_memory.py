"""A layout needs memory for its entries only: under an address-space limit (RLIMIT_AS,
in a child process) that the full n x n result cannot fit, the landmarks layout of the same
rows runs to its exact result.

n = 12,000 rows: the full layout's coordinator result alone is 12,000^2 int32 = 576 MB, over
the 400 MB the child may add to what it uses after a warm-up session; D[:, L] for L = 16
is 0.8 MB (as int32; the decode makes an int64 copy).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
HEADROOM = 400 * 2**20
N, DIM, LANDMARKS = 12_000, 2, tuple(range(5, 12_000, 750))


def _child(layout: str) -> int:
    import resource

    import protocols
    from protocols import SessionParameters, run_memory_session
    from protocol_helpers import quantize

    print("MODULE", protocols.__file__, flush=True)
    rng = np.random.default_rng(5)
    data = {f"party-{i}": rng.uniform(-1, 1, (N // 3, DIM)) for i in range(3)}
    extra = {} if layout == "full" else dict(layout="landmarks", layout_rows=LANDMARKS)
    params = SessionParameters(dim=DIM, bound=1.0, scale_bits=8, **extra)
    # warm-up (numba caches, imports) on a few rows, before the limit
    run_memory_session({k: v[:5] for k, v in data.items()},
                       SessionParameters(dim=DIM, bound=1.0, scale_bits=8,
                                         **({} if layout == "full" else
                                            dict(layout="landmarks", layout_rows=(1, 2)))))
    with open("/proc/self/status") as status:
        baseline = next(int(line.split()[1]) * 1024 for line in status
                        if line.startswith("VmSize:"))
    resource.setrlimit(resource.RLIMIT_AS, (baseline + HEADROOM, baseline + HEADROOM))
    try:
        outcome, _ = run_memory_session(data, params)
    except Exception as error:  # noqa: BLE001 - report what ran out
        cause = error.__cause__ if error.__cause__ is not None else error
        print("FAILED", type(cause).__name__, flush=True)
        return 0
    q = quantize(np.concatenate(list(data.values())), 1.0, 8)
    expected = ((q[:, None, :] - q[None, list(LANDMARKS), :]) ** 2).sum(-1)
    print("EXACT" if np.array_equal(outcome.integer, expected) else "WRONG", flush=True)
    return 0


def _run(layout: str) -> str:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT), str(Path(__file__).parent), str(Path(__file__).parent.parent),
         os.environ.get("PYTHONPATH", "")]))  # tests/ holds the oracles module
    child = subprocess.run([sys.executable, __file__, layout], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=280)
    assert f"MODULE {ROOT}" in child.stdout, child.stdout + child.stderr[-2000:]
    assert child.returncode == 0, child.stdout + child.stderr[-2000:]
    return child.stdout


@pytest.mark.timeout(300)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc")
def test_the_landmarks_layout_runs_where_the_full_layout_cannot_fit():
    assert "FAILED MemoryError" in _run("full")
    assert "EXACT" in _run("landmarks")


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1]))
