"""The layers point one way: finite_field <- protocols <- omnifc.

Each check runs in a fresh interpreter so that modules imported by other tests cannot
hide a forbidden import.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

FORBIDDEN = {
    "finite_field": ["grpc", "google.protobuf", "cryptography", "sklearn", "protocols", "omnifc"],
    "protocols": ["sklearn", "omnifc"],
}


@pytest.mark.slow
@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_does_not_import_higher_layers(package):
    code = (
        "import importlib, pkgutil, sys\n"
        f"pkg = importlib.import_module({package!r})\n"
        "for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + '.'):\n"
        "    importlib.import_module(info.name)\n"
        f"bad = sorted(m for m in sys.modules for f in {FORBIDDEN[package]!r} "
        "if m == f or m.startswith(f + '.'))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"{package} imports {out.stdout.strip()}"


@pytest.mark.slow
def test_check_detects_a_forbidden_import():
    # The check above must be able to fail: importing sklearn in the same way is caught.
    code = "import sys, sklearn\nprint(','.join(m for m in sys.modules if m == 'sklearn'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "sklearn"
