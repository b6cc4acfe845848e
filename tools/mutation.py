#!/usr/bin/env python3
"""Mutation testing of one module with mutmut, against the tests that cover it.

A developer tool, not part of CI. It copies the working tree (tracked and untracked,
not ignored files, as they are now) to a temporary folder, so the checkout is never
mutated and you can keep working while it runs; writes a ``[mutmut]`` section for
``MODULE`` and the given test files into the copy's setup.cfg; runs ``mutmut run``
there (only the tests that cover a mutated function run for each mutant); and prints
the score and the diff of every surviving mutant. Record the outcome in docs/testing.md:
each survivor is either killed by a new test or explained as equivalent.

Usage::

    pip install mutmut              # 3.x; not a dependency of the package or its extras
    python tools/mutation.py protocols/_crypto.py tests/protocols/test_crypto.py \\
        tests/protocols/test_crypto.py tests/protocols/test_wire.py

``--keep DIR`` works in DIR and keeps it (``cd DIR/tree && mutmut browse`` to explore);
``--max-children`` sets mutmut's parallelism (default 2, the machine's cores).
Exit status: 0 when no mutant survived, 1 otherwise, 2 when mutmut itself failed.
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SECTION = """
[mutmut]
paths_to_mutate = {module}
tests_dir = {tests}
timeout_multiplier = {timeout_multiplier}
pytest_add_cli_args = -p
    no:cacheprovider{extra}
also_copy = finite_field
    protocols
    omnifc
    proto
    tests
    benchmarks
"""


def copy_tree(destination: Path) -> None:
    """The working tree's files (tracked + untracked, minus ignored) as they are now."""
    names = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                            "--exclude-standard"], cwd=ROOT, check=True,
                           capture_output=True).stdout.split(b"\0")
    for name in filter(None, names):
        source = ROOT / os.fsdecode(name)
        if source.is_file():
            target = destination / os.fsdecode(name)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


def mark_no_mutate(module: Path, functions) -> None:
    """Mark each named top-level ``def`` of the copied module ``# pragma: no mutate block``."""
    text = module.read_text()
    for name in functions:
        text, found = re.subn(rf"^(def {re.escape(name)}\(.*\):)[ \t]*$",
                              r"\1  # pragma: no mutate block", text, flags=re.M)
        if found != 1:
            raise SystemExit(f"--no-mutate {name}: expected one one-line 'def {name}(...):' "
                             f"in {module.name}, found {found}")
    module.write_text(text)


def mutmut(tree: Path, *args: str, log=None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(tree))
    return subprocess.run(["mutmut", *args], cwd=tree, env=env, text=True,
                          stdout=log or subprocess.PIPE, stderr=subprocess.STDOUT)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("module", help="the file to mutate, e.g. protocols/_crypto.py")
    parser.add_argument("tests", nargs="+", help="the test files that cover it")
    parser.add_argument("--keep", metavar="DIR", help="work in DIR and keep it")
    parser.add_argument("--max-children", type=int, default=2)
    parser.add_argument("--timeout-multiplier", type=float, default=15.0,
                        help="mutmut's CPU-time limit is 2 x this x (the tests' time + 1 s); "
                             "a lower one (3) stops mutants that make a test wait sooner")
    parser.add_argument("--only", action="append", default=[], metavar="GLOB",
                        help="run only the mutants whose mutmut name matches, e.g. "
                             "'protocols._party.xǁPartyǁ_on_roster__mutmut_*' (repeatable); "
                             "the score is then over those mutants")
    parser.add_argument("--no-mutate", action="append", default=[], metavar="FUNCTION",
                        help="leave this top-level function of MODULE unmutated (mutmut's "
                             "'# pragma: no mutate block', written in the copy only); needed "
                             "for a function compiled by numba.njit(signature)(f), which "
                             "mutmut's trampoline breaks at import (repeatable)")
    parser.add_argument("--pytest-arg", action="append", default=[], metavar="ARG",
                        help="one more pytest argument, e.g. --pytest-arg=-m "
                             "--pytest-arg='not network and not slow' (repeatable)")
    args = parser.parse_args(argv)
    if shutil.which("mutmut") is None:
        parser.error("mutmut is not installed: pip install mutmut")
    work = Path(args.keep or tempfile.mkdtemp(prefix="omnifc-mutation-")).resolve()
    tree = work / "tree"
    if tree.exists():
        shutil.rmtree(tree)
    copy_tree(tree)
    if args.no_mutate:
        mark_no_mutate(tree / args.module, args.no_mutate)
    with open(tree / "setup.cfg", "a") as cfg:
        cfg.write(SECTION.format(module=args.module, tests="\n    ".join(args.tests),
                                 extra="".join(f"\n    {a}" for a in args.pytest_arg),
                                 timeout_multiplier=args.timeout_multiplier))
    start = time.monotonic()
    with open(work / "mutmut.log", "w") as log:  # progress spinners: kept out of the terminal
        run = mutmut(tree, "run", "--max-children", str(args.max_children), *args.only,
                     log=log)
    if run.returncode != 0:
        print(f"mutmut run failed (exit {run.returncode}); see {work / 'mutmut.log'}",
              file=sys.stderr)
        return 2
    results = mutmut(tree, "results", "--all", "true").stdout
    status = dict(re.findall(r"^\s+(\S+): (.+)$", results, flags=re.M))
    if args.only:
        status = {name: value for name, value in status.items()
                  if any(fnmatch.fnmatch(name, glob) for glob in args.only)}
    counts: dict[str, int] = {}
    for value in status.values():
        counts[value] = counts.get(value, 0) + 1
    survivors = [name for name, value in status.items() if value in ("survived", "no tests")]
    for name in survivors:
        diff = mutmut(tree, "show", name).stdout
        changed = [line for line in diff.splitlines()
                   if line[:1] in "+-" and line[:3] not in ("+++", "---")]
        print(f"## {name} ({status[name]})")
        print("\n".join(changed))
    total = len(status)
    killed = counts.get("killed", 0) + counts.get("timeout", 0)
    score = 100.0 * killed / total if total else 0.0
    print(f"\n{args.module}: {total} mutants, {killed} killed, {len(survivors)} survived or "
          f"uncovered, score {score:.1f}% ({counts}; {time.monotonic() - start:.0f} s; "
          f"tests: {' '.join(args.tests)})")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if not survivors else 1


if __name__ == "__main__":
    sys.exit(main())
