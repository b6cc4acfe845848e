"""``omnifc bench``: run a benchmark script from the source checkout's ``benchmarks/``.

Benchmarks print medians of several runs and ratios against a baseline measured in the
same run; they live next to the package in a source checkout (``pip install -e .``), not
inside the installed package.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from finite_field import ParameterError

BENCHMARKS = {"kernels": "bench_kernels.py", "protocol": "bench_protocol.py",
              "reproduce": "reproduce.py", "scale": "bench_scale.py",
              "masks": "bench_masks.py", "integrity": "bench_integrity.py",
              "integrity-protocol": "bench_integrity_protocol.py",
              "flux-k-grid": "flux_k_grid.py", "k-selection": "bench_k_selection.py",
              "startup": "bench_startup.py", "flower": "bench_flower.py",
              "chaos": "bench_chaos.py", "reset": "bench_reset.py",
              "restart": "bench_restart.py",
              "clove-label-reference": "clove_label_reference.py",
              "flux-label-free-bound": "flux_label_free_bound.py",
              "flux-direction-free-bound": "flux_direction_free_bound.py",
              "flux-noise-level": "flux_noise_level.py",
              "flux-spiked-null": "flux_spiked_null.py"}


def benchmarks_dir() -> Path:
    return Path(__file__).resolve().parents[2] / "benchmarks"


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "bench", help="run a benchmark (" + ", ".join(BENCHMARKS) + ")",
        description="Run one of the benchmark scripts of a source checkout; every argument "
                    "after the name goes to the script, so `omnifc bench kernels --help` "
                    "shows the benchmark's own options (e.g. --quick, --check, --json).")
    parser.add_argument("name", choices=sorted(BENCHMARKS))
    parser.add_argument("args", nargs=argparse.REMAINDER,
                        help="arguments for the script (see omnifc bench NAME --help)")
    parser.set_defaults(handler=run)


def run(args) -> int:
    script = benchmarks_dir() / BENCHMARKS[args.name]
    if not script.is_file():
        raise ParameterError(f"benchmark script not found at {script}: benchmarks ship with "
                             "the source checkout (git clone, then pip install -e .)")
    # The script's exit status is the command's: 1 from --check when a target is missed.
    return subprocess.call([sys.executable, str(script), *args.args])
