"""Every shell command shown in README.md and docs/*.md: run it, or at least parse it.

Commands are taken from fenced code blocks (bash, sh, shell, console or unlabeled), with
``\\`` continuations joined, ``# comments`` dropped and ``&&`` chains split. ``a|b|c``
inside one word stands for alternatives (each is taken); ``[...]`` marks optional parts
(dropped to run, kept to parse). Each command runs in its own temporary folder with a
timeout, through ``python -m omnifc.cli`` (so it tests this checkout, not an installed
script). Those that cannot run offline in seconds are listed in :data:`NOT_RUN` with the
reason; every ``omnifc`` command among them is still parsed by the real argument parser,
so a renamed or removed option in the docs fails here.
"""

from __future__ import annotations

import os
import pathlib
import re
import shlex
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PROGRAMS = ("omnifc", "python", "pip")

#: Command prefixes not run, and why. Everything else found in the docs is run.
NOT_RUN = {
    ("pip",): "installs packages from the network",
    ("python", "-m", "pytest"): "the test suite itself",
    ("omnifc", "reproduce"): "the whole evaluation: minutes (tests/omnifc/"
                             "test_clustering_reproduce.py runs a reduced grid)",
    ("omnifc", "bench"): "benchmarks: minutes, and timing is not a test",
    ("python", "tools/mutation.py"): "mutation testing: tens of minutes per module (a "
                                     "developer tool; docs/testing.md records its runs)",
    ("python", "tools/mutation_recheck.py"): "re-runs a kept mutation run's survivors (needs "
                                             "that run's folder; minutes)",
    ("omnifc", "demo"): "one process per party over gRPC, tens of seconds; run end to end by "
                        "tests/omnifc/test_demo.py",
    ("omnifc", "serve"): "waits for parties on the network; run end to end (with join) by "
                         "tests/omnifc/test_cli_serve_join.py",
    ("omnifc", "join"): "needs a running coordinator; see omnifc serve",
    ("python", "-m", "protocols._codegen"): "without --check it rewrites the checked-in "
                                            "generated code (the --check form runs)",
}


def _logical_lines(block: str):
    line = ""
    for raw in block.splitlines():
        if raw.rstrip().endswith("\\"):
            line += raw.rstrip()[:-1] + " "
            continue
        yield line + raw
        line = ""
    if line:
        yield line


def _strip_comment(line: str) -> str:
    return re.split(r"(?:^|\s)#", line, maxsplit=1)[0].strip()


def _alternatives(words):
    for i, word in enumerate(words):
        if "|" in word and not word.startswith(("'", '"')) and word != "|":
            out = []
            for choice in word.split("|"):
                out += _alternatives(words[:i] + [choice] + words[i + 1:])
            return out
    return [words]


def documented_commands():
    """``(file, command words)`` of every shell command in the docs, alternatives expanded."""
    found = []
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        for match in re.finditer(r"^```(\w*)[^\n]*\n(.*?)^```", text, re.S | re.M):
            if match.group(1) not in ("", "bash", "sh", "shell", "console"):
                continue
            for line in _logical_lines(match.group(2)):
                line = _strip_comment(line.removeprefix("$ "))
                for part in line.split("&&"):
                    words = part.split()
                    if words and words[0] in PROGRAMS:
                        for alternative in _alternatives(words):
                            found.append((path.relative_to(ROOT).as_posix(), alternative))
    return found


COMMANDS = documented_commands()


def reason_not_run(words):
    if words[:3] == ["python", "-m", "protocols._codegen"] and "--check" in words:
        return None
    for prefix, reason in NOT_RUN.items():
        if tuple(words[:len(prefix)]) == prefix:
            return reason
    return None


def without_optional(words):
    text = " ".join(words)
    return shlex.split(re.sub(r"\[[^\]]*\]", " ", text))


def with_optional(words):
    return shlex.split(" ".join(words).replace("[", " ").replace("]", " "))


def test_the_docs_show_commands():
    assert len(COMMANDS) >= 10
    assert any(words[:2] == ["omnifc", "audit"] for _, words in COMMANDS)


OMNIFC_COMMANDS = [(w, c) for w, c in COMMANDS if c[0] == "omnifc"]


@pytest.mark.slow
@pytest.mark.parametrize("where, words", OMNIFC_COMMANDS,
                         ids=[f"{w}:{' '.join(c)[:60]}" for w, c in OMNIFC_COMMANDS])
def test_documented_omnifc_command_parses(where, words):
    """Every ``omnifc`` command in the docs is accepted by the real argument parser."""
    from omnifc.cli import build_parser

    for variant in {tuple(without_optional(words[1:])), tuple(with_optional(words[1:]))}:
        if any(re.fullmatch(r"[A-Z][A-Z_]*", w) for w in variant):
            continue  # a placeholder such as N or PORT: only the variant without it parses
        try:
            build_parser().parse_args(list(variant))
        except SystemExit as stop:
            pytest.fail(f"{where}: `{' '.join(words)}` is refused by the parser "
                        f"(exit {stop.code})")


def _prepare(words, folder: pathlib.Path) -> None:
    """Files a documented command expects: the public cards of a key ceremony (made with
    ``omnifc keygen``, as each organization would), or a session made with ``omnifc certs``."""
    def omnifc(*args):
        subprocess.run([sys.executable, "-m", "omnifc.cli", *args], cwd=folder, check=True,
                       capture_output=True, timeout=300, env=_env())

    for i, word in enumerate(words):
        if i and words[i - 1] == "--out":
            continue  # what the command writes, not what it reads
        if word.endswith(".card.toml") and not (folder / word).exists():
            name = pathlib.Path(word).name.removesuffix(".card.toml")
            out = str((folder / word).parent)
            if word == words[words.index("--coordinator-card") + 1] \
                    if "--coordinator-card" in words else False:
                address = words[words.index("--address") + 1] if "--address" in words else ""
                host = address.rpartition(":")[0] or "127.0.0.1"
                omnifc("keygen", "--coordinator", name, "--host", host, "--out", out)
            else:
                omnifc("keygen", "--party", name, "--out", out)
        if word.endswith("session.toml") and not (folder / word).exists():
            out = (folder / word).parent
            subprocess.run([sys.executable, "-m", "omnifc.cli", "certs", "--out", str(out),
                            "--parties", "a,b,c", "--dim", "4"], cwd=folder, check=True,
                           capture_output=True, timeout=300, env=_env())


def _env():
    return {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), os.environ.get("PYTHONPATH", "")])}


@pytest.mark.network
@pytest.mark.timeout(900)
@pytest.mark.parametrize("where, words", COMMANDS,
                         ids=[f"{w}:{' '.join(c)[:60]}" for w, c in COMMANDS])
def test_documented_command_runs(where, words, tmp_path):
    reason = reason_not_run(words)
    if reason:
        pytest.skip(f"not run: {reason}")
    words = without_optional(words)
    _prepare(words, tmp_path)
    program = {"omnifc": [sys.executable, "-m", "omnifc.cli"],
               "python": [sys.executable]}[words[0]]
    result = subprocess.run(program + words[1:], cwd=tmp_path, capture_output=True, text=True,
                            timeout=600, env=_env())
    assert result.returncode == 0, (f"{where}: `{' '.join(words)}` exited "
                                    f"{result.returncode}\n{result.stdout[-2000:]}\n"
                                    f"{result.stderr[-2000:]}")


def test_ci_run_is_exactly_the_readme_test_command():
    """.ci/run runs README's test command, word for word (the main suite, then the protobuf
    matrix), so what the README promises is what CI runs."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"Install the test extras and run the tests.*?```bash\n(.*?)\n```",
                      readme, re.S)
    assert block is not None, "README lost its test command"
    (command,) = block.group(1).splitlines()
    assert "bash .ci/protobuf_matrix.sh" in command
    ci = [line for line in (ROOT / ".ci" / "run").read_text().splitlines()
          if line.strip() and not line.lstrip().startswith("#")]
    assert ci[-1] == command
