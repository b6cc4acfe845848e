"""Progress inside a long clustering step (issue 25, item 10): the clusterings say how far
their long loops are as rate-limited INFO records (library code logs), and the CLI renders
them in its phase display after "clustering N rows" (the CLI renders)."""

from __future__ import annotations

import logging
import re
import types

import numpy as np
import pytest

from omnifc import plaintext_distance_store
from omnifc._clustering import _progress, fit_method
from omnifc.cli import _session_io
from omnifc.cli._session_io import clustering_progress, phase_progress
from omnifc.cli.cmd_serve import clustering_callback

#: The logger under which the clusterings say how far their long steps are.
CLUSTERING_PROGRESS = _progress.__name__


def _blobs(n_per=40, seed=3):
    rng = np.random.default_rng(seed)
    centres = rng.uniform(-20, 20, (3, 4))
    x = np.concatenate([c + rng.normal(size=(n_per, 4)) for c in centres])
    rows = np.round(x).astype(np.int64)
    return rows, ((rows[:, None, :] - rows[None, :, :]) ** 2).sum(-1).astype(np.float64)


def _said(caplog):
    return [r.getMessage() for r in caplog.records if r.name == CLUSTERING_PROGRESS]


@pytest.fixture
def every_step(monkeypatch, caplog):
    # no rate limit: every step is said (the limit itself is tested below)
    monkeypatch.setattr(_progress, "EVERY", 0.0)
    caplog.set_level(logging.INFO, logger=CLUSTERING_PROGRESS)
    return caplog


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_each_long_loop_says_every_step_in_order(every_step):
    _, d = _blobs()
    n = len(d)
    fit_method(d, "kmeans", 3, random_state=0, n_init=4)
    assert _said(every_step) == [f"k-means: classical MDS of the {n} x {n} matrix"] + [
        f"k-means: Lloyd run {i} of 4" for i in range(1, 5)]
    every_step.clear()
    details = fit_method(d, "kmedoids", 3, random_state=0)
    rounds = details["n_iter"]
    assert rounds >= 1
    assert _said(every_step) == [f"k-medoids: swap round {i} (at most 100)"
                                 for i in range(1, rounds + 1)]
    every_step.clear()
    details = fit_method(d, "fcm", 3, random_state=0, max_iter=50)
    said = _said(every_step)
    assert said[0] == f"fuzzy c-means: classical MDS of the {n} x {n} matrix"
    assert said[1:] == [f"fuzzy c-means: iteration {i} (at most 50)"
                        for i in range(1, details["n_iter"] + 1)]
    every_step.clear()
    fit_method(d, "spectral", 3, random_state=0)
    assert _said(every_step) == [f"spectral: eigenvectors of the {n} x {n} affinity, then "
                                 "kmeans on them"]


@pytest.mark.timeout(300)
def test_the_streamed_mds_says_each_pass_over_d(every_step):
    rows, _ = _blobs()
    store = plaintext_distance_store(rows, scale_bits=0, memory_budget=0, tile_bytes=4000)
    fit_method(store, "kmeans", 3, random_state=0, out_of_core=True, n_init=2,
               n_components=4, n_iter=3)
    said = _said(every_step)
    assert said[:5] == [f"streamed MDS: pass over D {i} of 5" for i in range(1, 6)]
    assert said[5:] == ["k-means: Lloyd run 1 of 2", "k-means: Lloyd run 2 of 2"]


def test_steps_are_rate_limited_but_the_first_and_last_are_always_said(monkeypatch, caplog):
    caplog.set_level(logging.INFO, logger=CLUSTERING_PROGRESS)
    clock = iter(np.arange(0.0, 100.0, 0.5))          # each step 0.5 s after the last
    monkeypatch.setattr(_progress.time, "monotonic", lambda: float(next(clock)))
    steps = _progress.Steps("k-means", "Lloyd run", total=10)
    for run in range(1, 11):
        steps.step(run)
    # EVERY = 2 s: runs 1, 5 and 9 (2 s apart), and 10 as the last
    assert steps.said == [f"k-means: Lloyd run {i} of 10" for i in (1, 5, 9, 10)]
    assert _said(caplog) == steps.said
    unbounded = _progress.Steps("k-medoids", "swap round", at_most=100)
    for number in range(1, 5):                      # stops early: no forced last line
        unbounded.step(number)
    assert unbounded.said == ["k-medoids: swap round 1 (at most 100)"]  # 1.5 s in all


@pytest.mark.timeout(300)
def test_the_cli_renders_a_long_clustering_as_lines_of_the_decode_phase(monkeypatch, capsys,
                                                                        caplog):
    # what `omnifc serve` prints on a pipe while the coordinator clusters: after its
    # "[4/5] decode" line, one indented line per DETAIL_EVERY seconds (0 here: every
    # record), and none of them printed again as a log line
    monkeypatch.setattr(_progress, "EVERY", 0.0)
    monkeypatch.setattr(_session_io, "DETAIL_EVERY", 0.0)
    monkeypatch.setattr(_session_io.sys.stderr, "isatty", lambda: False, raising=False)
    caplog.set_level(logging.WARNING)
    _, d = _blobs()
    bar, on_phase = phase_progress(desc="serve")
    on_phase("decode", 1)
    config = types.SimpleNamespace(clustering=types.SimpleNamespace(method="kmeans",
                                                                    n_clusters=3))
    clustering = clustering_callback(config, lambda detail: on_phase(
        "decode", 1, f"clustering: {detail}"))
    labels = clustering(d)
    bar.close()
    assert len(labels) == len(d)
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "[4/5] decode"
    assert err[1:] == [f"      decode: clustering: k-means: classical MDS of the {len(d)} x "
                       f"{len(d)} matrix"] + [
        f"      decode: clustering: k-means: Lloyd run {i} of 10" for i in range(1, 11)]
    assert _said(caplog) == []                     # rendered, not logged twice
    progress = logging.getLogger(CLUSTERING_PROGRESS)
    assert progress.propagate and progress.level == logging.NOTSET  # restored after


def test_a_failing_display_never_breaks_the_clustering(monkeypatch):
    monkeypatch.setattr(_progress, "EVERY", 0.0)
    monkeypatch.setattr(logging, "raiseExceptions", False)  # handleError stays quiet

    def broken(detail):
        raise RuntimeError("display gone")
    _, d = _blobs()
    with clustering_progress(broken):
        labels = fit_method(d, "kmedoids", 3, random_state=0)["labels"]
    assert re.fullmatch(r"[012]+", "".join(map(str, labels)))
