"""Library modules log under their own module name; the CLI shows the three package roots."""

from __future__ import annotations

import ast
import logging
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("omnifc", "protocols", "finite_field")


def hand_named_loggers(paths):
    """``(file, line, source)`` of every ``getLogger(...)`` call whose name is not
    ``__name__`` (a string literal, an f-string, no argument: the root logger)."""
    found = []
    for path in paths:
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name != "getLogger":
                continue
            arg = node.args[0] if node.args else None
            if isinstance(arg, ast.Name) and arg.id == "__name__":
                continue
            if isinstance(arg, ast.Attribute) and arg.attr == "__name__":
                continue  # another module's own name (module.__name__)
            if path.name == "_logging.py" and path.parent.name == "cli" and \
                    isinstance(arg, ast.Name):
                continue  # the CLI configures the package roots it lists
            found.append((str(path.relative_to(ROOT)), node.lineno, ast.unparse(node)))
    return found


def test_no_library_module_hand_writes_a_logger_name():
    paths = [p for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))
             if "_generated" not in p.parts]
    assert len(paths) > 50
    assert hand_named_loggers(paths) == []


def test_the_check_catches_a_hand_written_name(tmp_path):
    bad = tmp_path / "mod.py"
    bad.write_text('import logging\nlogger = logging.getLogger("omnifc.protocols")\n'
                   'ok = logging.getLogger(__name__)\nroot = logging.getLogger()\n')
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        found = hand_named_loggers([bad])
    finally:
        ROOT = saved
    assert [(f, line) for f, line, _ in found] == [("mod.py", 2), ("mod.py", 4)]


def test_module_loggers_sit_under_the_package_roots():
    from protocols import _coordinator
    from omnifc import _secure
    assert _coordinator.logger.name == "protocols._coordinator"
    assert _secure.logger.name == "omnifc._secure"


@pytest.mark.timeout(120)
def test_the_cli_shows_each_package_root_once_and_nothing_else():
    code = ("import logging\n"
            "from omnifc.cli._logging import configure_logging\n"
            "configure_logging()\n"
            "configure_logging()\n"  # a second call replaces the handlers
            "for name in ('omnifc._secure', 'protocols._coordinator', "
            "'finite_field._plan'):\n"
            "    logging.getLogger(name).warning('seen from %s', name)\n"
            "    logging.getLogger(name).info('info from %s', name)\n"
            "logging.getLogger('somebody.else').setLevel(logging.INFO)\n"
            "logging.getLogger('somebody.else').info('not ours')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=110)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    for name in ("omnifc._secure", "protocols._coordinator", "finite_field._plan"):
        assert sum(line.endswith(f"{name} WARNING seen from {name}") for line in lines) == 1
    assert not any("info from" in line or "not ours" in line for line in lines)
    assert len(lines) == 3


def test_verbose_level_reaches_every_root():
    from omnifc.cli._logging import PACKAGE_ROOTS, configure_logging
    saved = {name: (logging.getLogger(name).level, list(logging.getLogger(name).handlers))
             for name in PACKAGE_ROOTS}
    try:
        configure_logging(logging.INFO)
        assert {logging.getLogger(n).getEffectiveLevel() for n in PACKAGE_ROOTS} == \
            {logging.INFO}
        assert set(PACKAGE_ROOTS) == set(PACKAGES)
    finally:
        for name, (level, handlers) in saved.items():
            logger = logging.getLogger(name)
            logger.setLevel(level)
            logger.handlers[:] = handlers
