"""The README says how long the suite takes and how to run a fast subset; the markers that
subset relies on select something sensible (process and gRPC tests out, unit tests in)."""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
FAST = 'python -m pytest -m "not slow and not network"'
MIXED = "tests/protocols/test_malicious_coordinator.py"  # in-memory and gRPC tests


def test_readme_shows_the_fast_subset_and_the_suite_duration():
    blocks = re.findall(r"```bash\n(.*?)```", README, re.S)
    assert any(FAST in block for block in blocks)       # a command a user can copy
    test_section = README[:README.index("## What it does")]
    assert re.search(r"\d+ s\b|\d+ minutes", test_section)
    for marker in ("network", "slow"):
        assert f"`{marker}`" in test_section


PLUGIN = """
import json, os

def pytest_collection_finish(session):
    with open(os.environ["OMNIFC_MARKERS_OUT"], "w") as out:
        json.dump({item.nodeid: sorted({m.name for m in item.iter_markers()})
                   for item in session.items}, out)
"""


FOLDERS = ("tests/omnifc", "tests/protocols")


def _markers_of_this_session(session, deselected):
    """What :func:`_collect_markers` returns, read from the running session's own items when
    it collected all of :data:`FOLDERS` and deselected nothing (a whole-suite run, as CI's:
    the same collection, already made, in every xdist worker); None otherwise."""
    config = session.config
    if deselected or config.getoption("ignore"):
        return None
    roots = [pathlib.Path(config.rootpath, arg) for arg in config.args]
    if any("::" in str(root) or not root.is_dir() for root in roots):
        return None
    for folder in FOLDERS:
        if not any(root.resolve() in (ROOT / folder).parents or root.resolve() == ROOT / folder
                   for root in roots):
            return None
    files = [path.relative_to(ROOT) for folder in FOLDERS
             for path in (ROOT / folder).rglob("*.py")]
    ignored = config.getoption("ignore_glob") or []
    if any(path.match(glob) or (ROOT / path).match(glob) for glob in ignored for path in files
           if path.name.startswith("test_")):
        return None
    return {item.nodeid: sorted({m.name for m in item.iter_markers()})
            for item in session.items if item.nodeid.startswith(tuple(f + "/" for f in FOLDERS))}


def _collect_markers(tmp_path):
    """Every test of tests/omnifc and tests/protocols with its markers: one collection
    (the subset's own ``-m`` is this expression over the same marker names)."""
    (tmp_path / "marker_dump.py").write_text(PLUGIN)
    out = tmp_path / "markers.json"
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                           "-p", "no:cacheprovider", "-p", "marker_dump",
                           "tests/omnifc", "tests/protocols"],
                          cwd=ROOT, capture_output=True, text=True, timeout=240,
                          env={**os.environ, "OMNIFC_MARKERS_OUT": str(out),
                               "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return json.loads(out.read_text())


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_fast_subset_leaves_out_the_process_tests_and_keeps_the_rest(tmp_path, request,
                                                                       deselected):
    markers = _markers_of_this_session(request.session, deselected) or \
        _collect_markers(tmp_path)
    every = set(markers)
    fast = {t for t, names in markers.items() if "slow" not in names and "network" not in names}
    listed = [line for line in subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         "-m", "not slow and not network", MIXED],
        cwd=ROOT, capture_output=True, text=True, timeout=240,
        env={**os.environ, "PYTHONPATH": str(ROOT)}).stdout.splitlines() if "::" in line]
    # pytest's own -m selects what the marker names say (checked on a mixed module)
    assert listed and set(listed) == {t for t in fast
                                      if t.startswith(MIXED + "::")}
    assert fast < every
    left_out = every - fast
    # every test that starts serve/join/demo processes or party processes over gRPC
    for module in ("tests/omnifc/test_cli_serve_join.py", "tests/omnifc/test_demo.py",
                   "tests/protocols/test_grpc.py", "tests/protocols/test_integrity_grpc.py"):
        in_module = {t for t in every if t.startswith(module + "::")}
        assert in_module and in_module <= left_out, module
    # the rerun session runs serve + three joins; the reproduce default runs a paper
    assert any("test_rerun_keeps_earlier_results" in t for t in left_out)
    assert any("test_default_folder_is_omnifc_reproduce" in t for t in left_out)
    # a file that mixes both keeps its in-memory attacks and leaves out its gRPC ones
    mixed = {t for t in every if t.startswith(MIXED)}
    assert mixed & fast and mixed & left_out
    # and the bulk stays: unit, oracle and in-memory tests
    assert len(fast) > 0.8 * len(every)
    for module in ("tests/omnifc/test_clustering.py", "tests/protocols/test_party_protections.py"):
        assert any(t.startswith(module + "::") for t in fast), module
