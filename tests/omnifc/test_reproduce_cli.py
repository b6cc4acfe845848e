"""``omnifc reproduce`` as a user types it: the plotting extra is checked before any work,
and without ``--out`` the tracked ``docs/reproduction/`` is never the target."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _env(*front):
    path = os.pathsep.join([*map(str, front), str(ROOT), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1"}


def _omnifc(*args, cwd, env, timeout=240):
    return subprocess.run([sys.executable, "-m", "omnifc.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def no_matplotlib(tmp_path):
    """A folder that, first on PYTHONPATH, makes ``import matplotlib`` fail as if absent."""
    shim = tmp_path / "shim" / "matplotlib"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text("raise ImportError(\"No module named 'matplotlib'\")\n")
    return shim.parent


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("paper", ["fmcl", "omnifc", "all"])
def test_missing_plots_extra_is_refused_before_any_work(tmp_path, no_matplotlib, paper):
    out = tmp_path / "repro"
    done = _omnifc("reproduce", "--paper", paper, "--quick", "--out", str(out),
                   cwd=tmp_path, env=_env(no_matplotlib))
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert 'pip install "omnifc[plots]"' in done.stderr
    assert "matplotlib" in done.stderr
    assert "Traceback" not in done.stderr
    assert "writing to" not in done.stdout           # nothing announced ...
    assert not out.exists()                           # ... and nothing written
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shim"]
    assert "reproduced" not in done.stderr and "p=" not in done.stderr   # no experiment ran


@pytest.mark.timeout(280)
@pytest.mark.slow
def test_default_folder_is_omnifc_reproduce_in_the_working_directory(tmp_path):
    done = _omnifc("reproduce", "--paper", "fmcl", "--quick", cwd=tmp_path, env=_env())
    assert done.returncode == 0, done.stderr
    out = (tmp_path / "omnifc-reproduce").resolve()
    assert f"writing to {out}" in done.stdout
    assert (out / "fmcl.md").is_file() and (out / "fmcl.png").is_file()
    assert not (tmp_path / "docs").exists()


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_help_names_the_default_folder_and_the_extra(tmp_path):
    done = _omnifc("reproduce", "--help", cwd=tmp_path, env=_env())
    assert done.returncode == 0
    text = " ".join(done.stdout.split())
    assert "default: ./omnifc-reproduce" in text
    assert 'pip install "omnifc[plots]"' in text


def test_default_folder_is_not_the_tracked_reports():
    from omnifc.cli.cmd_reproduce import DEFAULT_OUT
    from omnifc.experiments.reproduce import run_reproduction
    import inspect

    assert pathlib.Path(DEFAULT_OUT).resolve() != (ROOT / "docs" / "reproduction").resolve()
    assert "docs" not in pathlib.Path(DEFAULT_OUT).parts
    default = inspect.signature(run_reproduction).parameters["out_dir"].default
    assert "docs" not in pathlib.Path(default).parts


def test_readme_install_covers_every_documented_command():
    """The first install line carries the plots extra, or the reproduce row names it."""
    readme = (ROOT / "README.md").read_text()
    install = re.search(r"```bash\n(pip install[^\n]*)\n```", readme).group(1)
    row = next(line for line in readme.splitlines() if line.startswith("| `omnifc reproduce"))
    assert "[plots]" in install or 'omnifc[plots]' in row
    docs = (ROOT / "docs" / "reproduction.md").read_text()
    assert "omnifc[plots]" in docs and "omnifc-reproduce" in docs
