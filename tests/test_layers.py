"""The layers point one way: finite_field <- protocols <- omnifc.

Each check runs in a fresh interpreter so that modules imported by other tests cannot
hide a forbidden import.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

FORBIDDEN = {
    # galois is the test oracle only: no production module imports it.
    "finite_field": ["grpc", "google.protobuf", "cryptography", "sklearn", "protocols", "omnifc",
                     "galois"],
    "protocols": ["sklearn", "omnifc", "galois"],
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


# -- the surface each layer offers the next (issue 20, "Surface") --------------------------

import ast  # noqa: E402
import pathlib  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]


def imports_from(package_dir: pathlib.Path, lower: str):
    """``(file, line, module, name)`` for every import of ``lower`` (or one of its modules)
    anywhere in ``package_dir``, function-level imports included."""
    found = []
    for path in sorted(package_dir.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            where = str(path.relative_to(ROOT)), getattr(node, "lineno", 0)
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and \
                    (node.module == lower or node.module.startswith(lower + ".")):
                found += [(*where, node.module, alias.name) for alias in node.names]
            elif isinstance(node, ast.Import):
                found += [(*where, alias.name, None) for alias in node.names
                          if alias.name == lower or alias.name.startswith(lower + ".")]
    return found


def private_imports(found):
    return [(f, line, module) for f, line, module, _ in found
            if any(part.startswith("_") for part in module.split(".")[1:])]


def names_outside_all(found, package):
    return sorted({(module, name) for _, _, module, name in found
                   if module == package.__name__ and name is not None
                   and name != "*" and name not in package.__all__})


@pytest.mark.parametrize("upper, lower", [("omnifc", "protocols"),
                                          ("omnifc", "finite_field"),
                                          ("protocols", "finite_field")])
def test_a_layer_uses_only_the_public_names_of_the_layer_below(upper, lower):
    import importlib

    found = imports_from(ROOT / upper, lower)
    assert found, f"{upper} imports nothing from {lower}?"
    assert private_imports(found) == []
    assert names_outside_all(found, importlib.import_module(lower)) == []


def test_the_surface_check_catches_a_private_import(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "mod.py").write_text(
        "from protocols import Party\n"
        "def f():\n"
        "    from protocols._party import as_protocol_error\n"
        "    import protocols._tls\n"
        "    from protocols import _not_exported\n")
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        found = imports_from(package, "protocols")
    finally:
        ROOT = saved
    assert private_imports(found) == [("pkg/mod.py", 3, "protocols._party"),
                                      ("pkg/mod.py", 4, "protocols._tls")]
    import protocols
    assert names_outside_all(found, protocols) == [("protocols", "_not_exported")]


def test_names_exported_for_the_party_process_load_lazily():
    code = ("import sys, protocols\n"
            "before = 'protocols._grpc_party' in sys.modules\n"
            "protocols.join_from_config\n"
            "print(before, 'protocols._grpc_party' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT)
    assert out.stdout.split() == ["False", "True"]
