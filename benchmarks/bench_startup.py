"""Start-up benchmark: how long a command, ``import omnifc`` and the demo's join phase take.

Each subject is a fresh interpreter, timed in alternation with the baseline
``python -c "import numpy"`` (which every command needs), so machine load hits both alike;
medians of several runs. The ratio column is subject / baseline: lower is better, 1.0x
means "as cheap as importing numpy". CPU seconds (user + system of the child) are shown
too: on a shared machine they move less than wall time.

"party: up to its hello" is what a party process started as a fresh interpreter pays
before it can join (imports, config, identity key, rows, the signed hello). A loopback
session (``omnifc demo``) forks its parties from one server that imported those modules
once (protocols/_party_processes.py), so its join phase pays the imports once, not once
per party. The demo starts that server first, so that it loads while the demo imports
scikit-learn and loads its data set. The demo is run as a user types it (``omnifc demo``,
a fresh interpreter each run), and its join phase read from its per-phase table.

Targets (issue 25, item 7; wall seconds on a quiet machine): ``omnifc --help`` <= 1 s,
``import omnifc`` <= 1.5 s, the demo's join phase (iris, 4 parties over gRPC with mutual
TLS, one process per party) <= 1.25 s, half of the 2.5 s measured before.

    python benchmarks/bench_startup.py [--repeats 5] [--skip-demo] [--check]
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: name -> (python arguments, target wall seconds or None)
SUBJECTS = {
    "python -c pass": (["-c", "pass"], None),
    "import numpy (baseline)": (["-c", "import numpy"], None),
    "import omnifc": (["-c", "import omnifc"], 1.5),
    "omnifc --help": (["-m", "omnifc", "--help"], 1.0),
    "omnifc --version": (["-m", "omnifc", "--version"], 1.0),
    "omnifc demo --help": (["-m", "omnifc", "demo", "--help"], 1.0),
    "party process imports": (["-c", "import protocols._grpc_party"], None),
}
BASELINE = "import numpy (baseline)"
JOIN_TARGET = 1.25

#: What a party process does before it can join: its imports, the session config, its
#: identity key and rows, and the signed hello (``python -m protocols._grpc_party`` stops
#: here only to connect). Arguments: config, party, rows.
HELLO_CHILD = """
import sys
import numpy as np
import protocols._grpc_party as gp
from protocols._config import load_session_config
from protocols._party_data import load_party_data
party = gp.party_from_config(load_session_config(sys.argv[1]), sys.argv[2],
                             load_party_data(sys.argv[3]))
assert [env.WhichOneof("body") for env in party.start()] == ["hello"]
"""
HELLO_SUBJECT = "party: up to its hello"


def hello_subject(local) -> list[str]:
    """The python arguments of :data:`HELLO_CHILD` for party-0 of an open LocalSession."""
    return ["-c", HELLO_CHILD, str(local.config_path), "party-0",
            str(local.data_paths["party-0"])]


def run_child(args: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one fresh interpreter running ``args``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, *args], cwd=ROOT, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


#: The join-phase line of ``omnifc demo``'s per-phase table ("  join   0.170 s   ...").
JOIN_LINE = re.compile(r"^\s+join\s+([0-9.]+) s", re.MULTILINE)


def demo_join_seconds() -> tuple[float, float]:
    """(the join phase of ``omnifc demo`` (iris, 4 parties) as its coordinator reports it,
    the whole command's wall seconds): the command as a user types it, a fresh
    interpreter each run, so that everything the command starts is inside it."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "omnifc", "demo", "--no-progress"], cwd=ROOT,
                          check=True, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    found = JOIN_LINE.search(done.stdout)
    if found is None:
        raise RuntimeError(f"no join phase in the demo's output:\n{done.stdout}")
    return float(found.group(1)), wall


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description="Start-up times of omnifc's commands, its import and the demo's join "
                    "phase, each against `python -c \"import numpy\"` in the same run.")
    parser.add_argument("--repeats", type=int, default=5,
                        help="runs of each subject (medians are reported)")
    parser.add_argument("--skip-demo", action="store_true",
                        help="do not time the demo's join phase (4 party processes)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 1 run of each, no demo (its figures say little)")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when a target is missed")
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats, args.skip_demo = 1, True

    sys.path.insert(0, str(ROOT))
    import numpy as np

    from protocols import SessionParameters
    from protocols._grpc_local import LocalSession

    rng = np.random.default_rng(0)
    local = LocalSession({f"party-{i}": rng.uniform(0, 1, (37, 4)) for i in range(4)},
                         SessionParameters(dim=4, bound=1.0, scale_bits=16, nonnegative=True))
    subjects = dict(SUBJECTS)
    subjects[HELLO_SUBJECT] = (hello_subject(local), None)
    try:
        return _measure(args, subjects)
    finally:
        local.close()


def _measure(args, subjects) -> int:
    for subject_args, _ in subjects.values():  # warm-up: bytecode and numba caches
        run_child(subject_args)
    wall = {name: [] for name in subjects}
    cpu = {name: [] for name in subjects}
    joins, demos = [], []
    for _ in range(args.repeats):
        for name, (subject_args, _) in subjects.items():
            seconds, cpu_seconds = run_child(subject_args)
            wall[name].append(seconds)
            cpu[name].append(cpu_seconds)
        if not args.skip_demo:
            join, demo = demo_join_seconds()
            joins.append(join)
            demos.append(demo)

    base = statistics.median(wall[BASELINE])
    load = os.getloadavg()[0]
    print(f"bench_startup: {args.repeats} run(s) each, load average {load:.2f} on "
          f"{os.cpu_count()} CPUs")
    print("ratio = subject wall / baseline wall (import numpy), lower is better")
    header = f"{'subject':<26} {'wall':>8} {'cpu':>8} {'ratio':>7}  {'target':<10} verdict"
    print(header)
    print("-" * len(header))
    missed = []
    for name, (_, target) in subjects.items():
        seconds, cpu_seconds = statistics.median(wall[name]), statistics.median(cpu[name])
        verdict = "-"
        if target is not None:
            verdict = "met" if seconds <= target else "NOT met"
            if seconds > target:
                missed.append(name)
        print(f"{name:<26} {seconds:7.3f}s {cpu_seconds:7.3f}s {seconds / base:6.2f}x  "
              f"{'-' if target is None else f'<= {target:g} s':<10} {verdict}")
    if joins:
        join = statistics.median(joins)
        verdict = "met" if join <= JOIN_TARGET else "NOT met"
        if join > JOIN_TARGET:
            missed.append("demo join phase")
        print(f"{'demo join phase':<26} {join:7.3f}s {'':>8} {join / base:6.2f}x  "
              f"{f'<= {JOIN_TARGET:g} s':<10} {verdict}")
        demo = statistics.median(demos)
        print(f"{'omnifc demo (all of it)':<26} {demo:7.3f}s {'':>8} {demo / base:6.2f}x  "
              f"{'-':<10} -")
    print("targets are wall seconds on a quiet machine; with load average "
          f"{load:.1f} read the ratio and CPU columns")
    if args.check and missed:
        print(f"target(s) missed: {', '.join(missed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
