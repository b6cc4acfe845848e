"""What ``serve`` and ``join`` share: where results go, progress display, reuse warnings."""

from __future__ import annotations

import contextlib
import datetime
import logging
import pathlib
import sys

logger = logging.getLogger(__name__)

#: Results are saved under ``./omnifc-results/<session id>/`` unless told otherwise.
RESULTS_DIR = "omnifc-results"


def add_output_arguments(parser, *, what: str) -> None:
    parser.add_argument("--out", metavar="DIR",
                        help=f"folder for {what} (default: ./{RESULTS_DIR}/<session id>)")


def add_tls_refusal(parser) -> None:
    """``--insecure`` is not a serve/join flag: say where TLS is switched off instead."""
    import argparse

    parser.add_argument("--insecure", action="store_true", help=argparse.SUPPRESS)


def refuse_insecure_flag(args) -> None:
    from finite_field import ParameterError

    if getattr(args, "insecure", False):
        raise ParameterError("--insecure is not a command-line switch for serve/join: every "
                             "participant must agree, so TLS is switched off in the session "
                             "config ([tls] enabled = false, logged as a warning)")


def output_dir(args, config, files=(), explicit=()) -> pathlib.Path:
    """The folder for this run's result ``files``; earlier results are never overwritten.

    Checked before the session starts, created only when there are results to save (a
    failed session leaves no empty folder behind: :func:`save_folder`). An explicit ``--out`` (or an explicit file such as
    ``--labels-out``) that already holds one of this run's files is refused, saying how to
    go on. In the default ``./omnifc-results/<session id>/``, a rerun of the same session
    keeps the earlier results and writes to ``<session id>-run2/`` (``-run3``, ...): the
    first free folder, which the command prints.
    """
    from finite_field import ParameterError

    taken = [str(path) for path in explicit if path and pathlib.Path(path).exists()]
    if args.out:
        folder = pathlib.Path(args.out)
        taken += [str(folder / name) for name in files if (folder / name).exists()]
    if taken:
        raise ParameterError(
            f"refusing to overwrite the results of an earlier run: {', '.join(taken)} "
            f"already exist(s); choose another --out folder (or file), or move those files "
            f"away first (without --out, each rerun gets a fresh folder under "
            f"./{RESULTS_DIR}/)")
    if not args.out:
        base = pathlib.Path(RESULTS_DIR) / config.session_id
        folder, run = base, 1
        while any((folder / name).exists() for name in files):
            run += 1
            folder = base.with_name(f"{config.session_id}-run{run}")
        if folder != base:
            print(f"{base} holds the results of an earlier run of this session; they are "
                  f"kept, and this run's results go to {folder}", flush=True)
    return folder


def save_folder(folder: pathlib.Path) -> pathlib.Path:
    """``folder`` (from :func:`output_dir`), created now that there is something to save."""
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def warn_if_reused(config, role: str) -> None:
    """Record this run next to the config; warn when the same session already ran."""
    if config.path is None:
        return
    marker = pathlib.Path(str(config.path) + ".runs")
    try:
        previous = marker.read_text().splitlines() if marker.exists() else []
        mine = [line for line in previous if f" {role} " in f" {line} "]
        if mine:
            logger.warning("session %s was already run with this config (%s; see %s): reusing "
                           "a session's keys and config for another run is discouraged: make "
                           "a fresh session with `omnifc session new` from the parties' "
                           "cards (docs/deployment.md; `omnifc certs` is the one-machine "
                           "demo shortcut only)", config.session_id,
                           mine[-1], marker)
        with marker.open("a") as handle:
            handle.write(f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%dT%H:%M:%SZ}"
                         f" {role}\n")
    except OSError:  # a read-only config folder: no record, no warning
        pass


ORDER = ["join", "shares", "evaluation", "decode", "result"]

#: Without a terminal, at most one line of progress inside a phase per this many seconds.
DETAIL_EVERY = 10.0


def phase_progress(total_phases: int = 5, disable: bool = False, desc: str = "join"):
    """A progress display over the protocol phases, as an ``on_phase(phase, round,
    detail=None)`` callback (``detail``: what is done inside the phase, e.g. "40 of 120
    tiles"); thread-safe (the coordinator reports the decode from the thread running it).

    A tqdm bar on a terminal (the detail as its postfix); otherwise one plain line per
    phase (``[4/5] decode``) and at most one indented detail line per
    :data:`DETAIL_EVERY` seconds, so a log file or a pipe gets no bar redraws; nothing
    with ``disable``.
    """
    import threading
    import time

    from tqdm import tqdm

    tty = sys.stderr.isatty()
    bar = tqdm(total=total_phases, desc=desc, unit="phase", disable=disable or not tty,
               leave=False)
    seen = set()
    lock = threading.Lock()
    last = [0.0]

    def on_phase(phase, round_, detail=None):
        if phase not in ORDER or disable:
            return
        label = phase if round_ <= 1 else f"{phase} (round {round_})"
        with lock:
            if tty:
                bar.n = ORDER.index(phase)
                bar.set_description(label, refresh=False)
                bar.set_postfix_str(detail or "", refresh=False)
                bar.refresh()
                return
            now = time.monotonic()
            if label not in seen:
                seen.add(label)
                last[0] = now
                print(f"[{ORDER.index(phase) + 1}/{total_phases}] {label}", file=sys.stderr,
                      flush=True)
            elif detail and now - last[0] >= DETAIL_EVERY:
                last[0] = now
                print(f"      {label}: {detail}", file=sys.stderr, flush=True)
    return bar, on_phase


class _Forward(logging.Handler):
    def __init__(self, on_detail) -> None:
        super().__init__(logging.INFO)
        self.on_detail = on_detail

    def emit(self, record) -> None:
        try:
            self.on_detail(record.getMessage())
        except Exception:  # a display must never break the clustering
            self.handleError(record)


@contextlib.contextmanager
def clustering_progress(on_detail):
    """Inside the block, the clusterings' progress records (rate-limited INFO records of
    :mod:`omnifc._clustering._progress`) go to ``on_detail(text)`` (the phase display)
    instead of the log; ``on_detail=None`` leaves them as they are."""
    if on_detail is None:
        yield
        return
    from .._clustering import _progress as steps  # the module whose records these are

    progress = logging.getLogger(steps.__name__)
    handler = _Forward(on_detail)
    before = progress.level, progress.propagate
    progress.setLevel(logging.INFO)
    progress.propagate = False  # rendered as progress, not printed again as a log line
    progress.addHandler(handler)
    try:
        yield
    finally:
        progress.removeHandler(handler)
        progress.setLevel(before[0])
        progress.propagate = before[1]
