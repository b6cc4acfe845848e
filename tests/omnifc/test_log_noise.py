"""Issue 25 item 9: each message once, at a level that matches what it means to the user,
counted through the CLI as a user runs it."""

from __future__ import annotations

import logging
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "omnifc.cli"]

pytestmark = pytest.mark.slow


def omnifc(*args, cwd, timeout=240):
    return subprocess.run([*CLI, *map(str, args)], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "PYTHONPATH": str(ROOT)})


def unchecked_lines(text):
    return [line for line in text.splitlines() if "NO INTEGRITY CHECK" in line]


@pytest.mark.timeout(300)
def test_simulate_says_the_r0_warning_once(tmp_path):
    # m = 3 = 2l+2t-1: r = 0; the coordinator and three parties share this process
    done = omnifc("simulate", "--parties", "3", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert len(unchecked_lines(done.stderr)) == 1, done.stderr
    assert "WARNING" in unchecked_lines(done.stderr)[0]
    assert "exact         yes" in done.stdout


@pytest.mark.timeout(300)
def test_a_passing_audit_prints_no_warning_from_its_own_attacks(tmp_path):
    # checks 8 (a malicious coordinator) and 9 (deviating parties) run the attacks that
    # used to log "session failed" lines at WARNING
    done = omnifc("audit", "--checks", "8,9", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "overall: PASS" in done.stdout
    assert [line for line in done.stderr.splitlines() if "WARNING" in line] == []
    verbose = omnifc("-vv", "audit", "--checks", "9", cwd=tmp_path)
    assert verbose.returncode == 0
    simulated = [line for line in verbose.stderr.splitlines()
                 if "omnifc.audit._simulations DEBUG simulated session:" in line]
    assert any("failed in phase" in line for line in simulated)   # there, for who asks


@pytest.mark.timeout(400)
def test_quick_reproduction_says_the_r0_warning_at_most_once(tmp_path):
    pytest.importorskip("matplotlib")
    done = omnifc("reproduce", "--paper", "flux", "--quick", "--out", tmp_path / "r",
                  cwd=tmp_path, timeout=380)
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if "WARNING" in line]
    assert len(unchecked_lines(done.stderr)) <= 1 and len(warnings) <= 1, done.stderr


def test_the_audit_redirect_leaves_real_sessions_loud(caplog):
    from omnifc.audit._simulations import simulated_sessions
    from protocols import SessionParameters, run_memory_session

    data = {f"party-{i}": np.full((2, 2), float(i)) for i in range(3)}
    params = SessionParameters(dim=2, bound=4.0, scale_bits=4)
    with caplog.at_level(logging.DEBUG):
        with simulated_sessions():
            run_memory_session(data, params)
        inside = [r for r in caplog.records if "NO INTEGRITY CHECK" in r.getMessage()]
        assert inside and {r.name for r in inside} == {"omnifc.audit._simulations"}
        assert {r.levelname for r in inside} == {"DEBUG"}
        caplog.clear()
        run_memory_session(data, params)          # a real session afterwards
    loud = [r for r in caplog.records if "NO INTEGRITY CHECK" in r.getMessage()
            and r.levelno == logging.WARNING]
    assert len(loud) == 1 and loud[0].name == "protocols._coordinator"


def test_a_logger_made_during_the_audit_is_redirected_too(capsys):
    """A module imported while the checks run (a lazy import) makes its logger then; its
    records must not reach the user's handlers either."""
    from omnifc.audit._simulations import simulated_sessions

    handler = logging.StreamHandler()           # as the CLI puts one on each package root
    root = logging.getLogger("protocols")
    root.addHandler(handler)
    name = "protocols._made_during_the_audit_test"
    try:
        with simulated_sessions():
            logging.getLogger(name).warning("from a logger made inside the block")
        assert "from a logger made inside the block" not in capsys.readouterr().err
        logging.getLogger(name).warning("after the block")
        assert "after the block" in capsys.readouterr().err
    finally:
        root.removeHandler(handler)
        logging.Logger.manager.loggerDict.pop(name, None)
