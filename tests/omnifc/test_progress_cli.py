"""Progress through ``omnifc serve`` / ``omnifc join`` in subprocesses (issue 25 item 10):
every phase [1/5]..[5/5] on every side, each once, plain lines when stderr is not a
terminal; and the coordinator's progress inside its phases, from the sans-IO state
machine."""

from __future__ import annotations

import re

import numpy as np
import pytest

from test_fail_closed_cli import NAMES, join, make_session, start_serve, wait_all

PHASES = ["join", "shares", "evaluation", "decode", "result"]


@pytest.mark.network
@pytest.mark.timeout(300)
def test_every_side_shows_every_phase_once(tmp_path):
    config = make_session(tmp_path / "s")
    rng = np.random.default_rng(7)
    for i, name in enumerate(NAMES):
        np.save(tmp_path / f"{name}.npy", rng.uniform(-1, 1, (4 + i, 3)))
    serve, port = start_serve(tmp_path, config, progress=True)
    parties = [join(tmp_path, config, name, port, f"{name}.npy", progress=True)
               for name in NAMES]
    try:
        assert not wait_all([serve, *parties], 240)
    finally:
        for process in [serve, *parties]:
            process.stop()
    for process in [serve, *parties]:
        assert process.popen.returncode == 0, process.err
        lines = [line for line in process.err.splitlines() if re.match(r"\[\d/5\]", line)]
        assert lines == [f"[{i + 1}/5] {phase}" for i, phase in enumerate(PHASES)], \
            process.err
        assert "\r" not in process.err                     # a pipe: no bar redraws


def test_the_coordinator_reports_every_phase_and_its_tiles():
    from protocols import Coordinator, SessionParameters
    from protocols._memory import run_memory_session

    seen = []

    class Watched(Coordinator):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.progress = lambda phase, round_, detail: seen.append((phase, detail))

    rng = np.random.default_rng(8)
    data = {f"party-{i}": rng.uniform(-1, 1, (n, 3)) for i, n in enumerate([3, 4, 2])}
    params = SessionParameters(dim=3, bound=1.0, scale_bits=8)
    run_memory_session(data, params, cluster=lambda d: np.zeros(len(d), dtype=np.int64),
                       coordinator_class=Watched)
    phases = [phase for phase, detail in seen if detail is None]
    assert phases == PHASES[1:]                         # the coordinator starts in join
    tiles = [detail for phase, detail in seen if phase == "evaluation" and detail]
    total = int(re.match(r"\d+ of (\d+) tiles", tiles[-1]).group(1))
    assert tiles == [f"{k} of {total} tiles" for k in range(1, total + 1)]
    decode = [detail for phase, detail in seen if phase == "decode" and detail]
    assert decode == ["decoding the evaluations of 3 responders", "clustering 9 rows"]
