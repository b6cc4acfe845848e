"""Kernels compile on their first call (finite_field._jit): a process that imports the
kernel modules -- a party process before it joins -- does not load numba; the kernels a
party warms in the background are then compiled, and their results are the same."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ,
       "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}

CHILD = r"""
import json, sys
import protocols._grpc_party                        # what a party process imports
import finite_field._aggregate as agg
from finite_field import _jit
before = "numba" in sys.modules
pending = [k.__qualname__ for k in _jit._REGISTRY if not k.compiled]
import numpy as np
masked = agg.masked_upload(np.array([[1, 2], [3, 4]]), 3, [[5, 6, 0, 0]], [[1, 1, 1, 1]], 7)
first = agg._masked_upload_kernel.compiled
left = [k.__qualname__ for k in _jit._REGISTRY if not k.compiled]
warmed = _jit.warm_up()
print(json.dumps({"numba_before": before, "pending": pending, "masked": masked.tolist(),
                  "first_compiled": first, "left": left, "warmed": warmed, "again": _jit.warm_up(),
                  "all": all(k.compiled for k in _jit._REGISTRY)}))
"""


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_party_process_imports_no_numba_and_warms_every_kernel_later():
    done = subprocess.run([sys.executable, "-c", CHILD], env=ENV, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout)
    assert got["numba_before"] is False                  # nothing compiled or imported yet
    assert {"_masked_upload_kernel", "_pairwise_upload_kernel", "_encode_kernel",
            "_panel", "_operands"} <= set(got["pending"])  # (names of the Python functions)
    assert got["masked"] == [[0, 4], [1, 4]]             # (3 v + add - sub) mod 7
    assert got["first_compiled"] is True                 # compiled by its first call
    # the first call compiled that kernel and the function it calls (_reduce), nothing
    # else; warm_up compiles exactly the kernels that had not run, once
    assert set(got["pending"]) - set(got["left"]) == {"_masked_upload_kernel", "_reduce"}
    assert got["warmed"] == len(got["left"]) and got["again"] == 0 and got["all"]
