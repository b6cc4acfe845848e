"""The benchmark scripts of ``benchmarks/`` loaded as modules (they are scripts, not a
package), for tests that check or reuse what a benchmark defines."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path


def load_benchmark(name: str):
    """``benchmarks/<name>.py`` as a module, named ``benchmarks.<name>`` after its path (the
    name mutation testing expects of a file under benchmarks/: tools/mutation.py), and
    registered under that name before it runs, as an import would (dataclasses need it)."""
    path = Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"benchmarks.{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
