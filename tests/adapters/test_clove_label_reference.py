"""benchmarks/clove_label_reference.py: the references behind CLoVE's label-shift ceiling,
checked against scipy, brute force and the generator itself."""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
from scipy.stats import dirichlet_multinomial

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def ref(clove_reference):
    return clove_reference


def test_loglik_is_scipys_dirichlet_multinomial_up_to_the_shared_coefficient(ref):
    rng = np.random.default_rng(4)
    counts = rng.integers(0, 30, size=6)
    a1, a2 = rng.uniform(0.1, 20, size=6), rng.uniform(0.1, 20, size=6)
    n = int(counts.sum())
    mine = ref.label_count_loglik(counts, a1) - ref.label_count_loglik(counts, a2)
    theirs = (dirichlet_multinomial.logpmf(counts, a1, n)
              - dirichlet_multinomial.logpmf(counts, a2, n))
    assert mine == pytest.approx(theirs, rel=1e-10, abs=1e-10)


def test_bayes_assignment_is_the_best_assignment_with_the_sizes(ref):
    """9 clients in groups of 5, 2 and 2: every one of the 756 assignments tried."""
    rng = np.random.default_rng(9)
    sizes = [5, 2, 2]
    for _ in range(5):
        loglik = rng.normal(0, 3, size=(9, 3))
        best = max((a for a in itertools.product(range(3), repeat=9)
                    if np.bincount(a, minlength=3).tolist() == sizes),
                   key=lambda a: sum(loglik[i, g] for i, g in enumerate(a)))
        assert ref.bayes_assignment(loglik, sizes).tolist() == list(best)


def test_group_priors_replay_the_generators_draw(ref):
    """The priors the generator drew (recorded from its own Dirichlet call) are replayed."""
    from omnifc.fl import _data

    drawn, real = [], np.random.default_rng

    class Recording:
        def __init__(self, *args, **kwargs):
            self._rng = real(*args, **kwargs)

        def dirichlet(self, alpha, size=None):
            out = self._rng.dirichlet(alpha, size=size)
            if size is not None:                     # the group priors, not a client's
                drawn.append(out)
            return out

        def __getattr__(self, name):
            return getattr(self._rng, name)

    with mock.patch.object(_data.np.random, "default_rng", Recording):
        clients, groups, *_ = ref.case("wine", 3, 73)
    assert np.array_equal(drawn[0], ref.group_priors("wine", 3, 73))
    assert np.bincount(groups).tolist() == [5, 2, 2] and len(clients) == 9


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_quick_run_counts_its_rows():
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "clove_label_reference.py"),
                           "--quick"], capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    rows = [line.split() for line in lines[1:-1]]
    assert [r[1:3] for r in rows] == [["breast_cancer", "2"], ["wine", "2"]]
    bayes, hist = sum(int(r[3]) for r in rows), sum(int(r[4]) for r in rows)
    assert f"bayes (told the priors) {bayes}/2, histograms (label-free) {hist}/2" in lines[-1]
