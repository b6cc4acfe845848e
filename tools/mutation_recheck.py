#!/usr/bin/env python3
"""Re-run the survivors of a kept ``tools/mutation.py`` run against the tests as they are now.

After ``python tools/mutation.py MODULE TESTS... --keep DIR`` and new tests written for its
survivors, this copies the current test files into DIR's mutated tree and runs each
surviving mutant again (mutmut's own ``MUTANT_UNDER_TEST`` switch, one forked pytest per
mutant, the packages imported once), without re-running the mutants that were already
killed. It prints the mutants that still survive and the updated score.

Usage::

    python tools/mutation_recheck.py DIR TEST_FILE... [--pytest-arg ARG ...] [--only GLOB ...]

``--only GLOB`` re-runs only the survivors whose mutmut name matches (repeatable), so each
function's survivors can be re-run against the tests that concern it (``--pytest-arg=-k``).
The tests run once without a mutant first (they must pass; numba's kernels and the test
modules are then warm in the parent that every mutant's child is forked from). A mutant
whose tests outlast ``--timeout`` is reported as ``timeout`` and counted apart: on a loaded
machine it is usually slow, not killed.

Give it the new test files only: a survivor already passed the old ones, so only the
new tests can kill it (and the recheck is much faster).

``--timeouts`` also re-runs the mutants mutmut stopped at its CPU-time limit (counted as
killed by mutmut and tools/mutation.py). On the shared machine that limit is easily
reached by numba compiling in the forked worker or by BLAS threads, so a "timeout" may be
a survivor: give the old test files as well then, and each such mutant is reported as
killed, survived or timeout (again, here with a wall-clock limit of ``--timeout``).

A developer tool like tools/mutation.py; docs/testing.md records its results.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_one(name: str, args: list[str], timeout: float) -> str:
    pid = os.fork()
    if pid == 0:  # child: the mutant on, pytest quiet, exit status = pytest's
        os.environ["MUTANT_UNDER_TEST"] = name
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        import pytest
        os._exit(int(pytest.main(args)))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            code = os.waitstatus_to_exitcode(status)
            return "survived" if code == 0 else "killed"
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return "timeout"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", help="the --keep DIR of tools/mutation.py")
    parser.add_argument("tests", nargs="+")
    parser.add_argument("--pytest-arg", action="append", default=[])
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per mutant")
    parser.add_argument("--only", action="append", default=[], metavar="GLOB",
                        help="re-run only these of the survivors (repeatable), e.g. the ones "
                             "a previous recheck left; the others count as surviving")
    parser.add_argument("--timeouts", action="store_true",
                        help="re-run the mutants mutmut timed out too (give the old tests)")
    args = parser.parse_args(argv)
    mutants = Path(args.dir).resolve() / "tree" / "mutants"
    metas = list(mutants.rglob("*.py.meta"))
    status = {}
    for meta in metas:
        status.update(json.loads(meta.read_text())["exit_code_by_key"])
    timeouts = {36, -24, 24, 152, 255}   # mutmut's exit codes counted as "timeout"
    # survivors and "no tests" (33: no selected test covered the function) are re-run, as
    # tools/mutation.py counts both as not killed
    every = sorted(k for k, v in status.items()
                   if v in (0, 33) or (args.timeouts and v in timeouts))
    survivors = [k for k in every
                 if not args.only or any(fnmatch.fnmatch(k, g) for g in args.only)]
    left = len(every) - len(survivors)  # not selected by --only: still survivors
    tested = {k: v for k, v in status.items() if v is not None}
    for test in args.tests:  # the tests as they are now
        target = mutants / test
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / test, target)
    os.chdir(mutants)
    sys.path.insert(0, str(mutants))
    os.environ["PYTHONPATH"] = str(mutants)
    import finite_field, protocols, omnifc  # noqa: F401,E401  (imported once, then forked)
    pytest_args = ["-x", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
                   *args.pytest_arg, *args.tests]
    os.environ["MUTANT_UNDER_TEST"] = ""  # no mutant: the original code
    import pytest
    saved = os.dup(1), os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    try:  # in this process: the children forked below start warm
        clean = int(pytest.main(pytest_args))
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
    if clean != 0:
        print(f"the tests fail without a mutant (pytest exit {clean})", file=sys.stderr)
        return 2
    still, slow = [], []
    for name in survivors:
        verdict = run_one(name, pytest_args, args.timeout)
        if verdict == "survived":
            still.append(name)
        elif verdict == "timeout":
            slow.append(name)
        print(f"{verdict:9s} {name}", flush=True)
    killed = len(tested) - len(still) - len(slow) - left
    what = "survivors or timeouts" if args.timeouts else "survivors"
    print(f"\n{len(tested)} mutants tested, {len(survivors)} {what} re-run, {len(still)} "
          f"survive now, {len(slow)} timed out, {left} not re-run (--only); score "
          f"{100.0 * killed / len(tested):.1f}%")
    return 0 if not still and not slow else 1


if __name__ == "__main__":
    sys.exit(main())
