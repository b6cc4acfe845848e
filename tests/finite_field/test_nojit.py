"""The kernel source is right uncompiled: a tiny end-to-end run with NUMBA_DISABLE_JIT=1.

Runs in a fresh interpreter (the flag is read when numba is imported) and compares the
reconstructed distances with Python integers computed in this process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

SCRIPT = r"""
import json, sys
import numba
import numpy as np
import finite_field
import finite_field._kernels as kernels
from finite_field import (make_plan, encode_rows, evaluate_shares, weight_evaluation,
                          decode_sum, sq_distances)
import omnifc

compiled = sorted(name for name, obj in vars(kernels).items()
                  if isinstance(obj, numba.core.dispatcher.Dispatcher))
x = np.array(json.loads(sys.argv[1]))
# finite_field steps: two primes (q=20), l=2, t=1, every party responding.
plan = make_plan(x.shape[1], bound=2.0, scale_bits=20, segments=2, noise_segments=1,
                 parties=5)
rows = plan.quantizer.quantize(x).values
shares = encode_rows(plan, rows)
weights = [code.decoding_weights(range(5)) for code in plan.codes]
totals = [0] * len(plan.primes)
for j in range(5):
    evaluation = evaluate_shares(plan, [s[j] for s in shares])
    contribution = weight_evaluation(plan, [w[j] for w in weights], evaluation)
    totals = [(a + b) % p for a, b, p in zip(totals, contribution, plan.primes)]
steps = decode_sum(plan, totals)
# The public entry point, with a responding subset.
parties = {"a": x[:2], "b": x[2:3], "c": x[3:], "d": x[:1] * 0.5, "e": -x[:1]}
result = omnifc.secure_distance_matrix(parties, bound=2.0, scale_bits=20, segments=2,
                                       noise_segments=1, responders=["a", "c", "d", "e", "b"],
                                       max_clipped=1.0)  # the data exercise clipping
print(json.dumps({
    "disable_jit": bool(numba.config.DISABLE_JIT),
    "compiled": compiled,
    "primes": list(plan.primes),
    "rows": rows.tolist(),
    "steps": steps.tolist(),
    "public": result.integer_distances.tolist(),
    "sq_distances_mod_p": sq_distances(np.array([[0, 1], [3, 5]]), 7).tolist(),
    # a party's held shares are uint32: the pairs kernel must not subtract in uint32
    "paired_uint32": finite_field.paired_sq_distances(
        np.array([[0, 5], [6, 1]], dtype=np.uint32), [0, 1], [1, 0], 7).tolist(),
}))
"""


@pytest.mark.slow
def test_end_to_end_without_jit(oracle):
    x = np.random.Generator(np.random.PCG64(12)).uniform(-2.5, 2.5, size=(4, 3))
    env = dict(os.environ, NUMBA_DISABLE_JIT="1")
    out = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(x.tolist())], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["disable_jit"] is True
    assert report["compiled"] == []            # the kernels really ran as plain Python
    assert len(report["primes"]) == 2
    rows = oracle.quantize(x, 20, 2.0)
    assert report["rows"] == rows
    assert report["steps"] == oracle.sq_distances(rows)
    all_rows = oracle.quantize(np.concatenate([x[:2], x[2:3], x[3:], x[:1] * 0.5, -x[:1]]),
                               20, 2.0)
    assert report["public"] == oracle.sq_distances(all_rows)
    assert report["sq_distances_mod_p"] == [[0, 4], [4, 0]]
    assert report["paired_uint32"] == [((0 - 6) ** 2 + (5 - 1) ** 2) % 7] * 2
