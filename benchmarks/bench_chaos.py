"""Chaos run: many gRPC sessions with network faults and process kills from a seeded schedule.

Each session runs the coordinator in this process and every party in its own process
behind its own loopback fault proxy (``protocols/_fault_proxy.py``, driven by
``protocols/_fault_sessions.py``). Each party's link gets a fault drawn from the schedule
(latency and jitter, a bandwidth cap, a reset mid-stream, a pause shorter or longer than
the evaluation deadline, a half-open link, a corrupted byte in either direction, or none),
and some sessions SIGKILL a party when the coordinator enters a phase. Byte offsets are
drawn within the volume each link carried in a fault-free calibration session of the same
shape (run first, not counted). The exact D is checked against a numpy int64 oracle of the
quantized rows, the labels each party saved against the coordinator's.

Reported counts: exact D (and how many of those reported a party undelivered), clean abort
within the deadline (the coordinator raised an OmniFCError, every party exited 1 with an
error line), abort without a clear cause at some end, hung (an end past its bound), wrong D
or labels, results lost (a party without its labels that the coordinator reported as
delivered), files left behind, processes left behind, proxy threads left running.

``--check`` exits 1 when any of hung, unclear abort, wrong, lost or left behind is > 0.
``--quick``: 3 tiny sessions (a smoke run).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import random
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from protocols import SessionParameters  # noqa: E402
from protocols._config import Deadlines  # noqa: E402
from protocols._fault_sessions import (MAX_SLACK, SLACK, classify,  # noqa: E402
                                       party_bound, run_faulted_session)

#: Kinds of link fault the schedule draws from (with "none" for a clean link).
FAULT_KINDS = ("none", "latency", "rate", "reset", "short-pause", "long-pause", "half-open",
               "corrupt-up", "corrupt-down")
#: Phases at which a party process may be killed.
KILL_PHASES = ("shares", "evaluation", "decode")
BAD = ("hung", "unclear-abort", "wrong", "lost", "files_left", "processes_left",
       "threads_left")


def oracle(rows: np.ndarray, bound: float, scale_bits: int) -> np.ndarray:
    """Integer squared distances of the quantized rows, numpy int64 (no overflow at these
    magnitudes: d * (2 * bound * 2^q)^2 < 2^63)."""
    q = np.floor(np.clip(rows, -bound, bound) * 2.0 ** scale_bits + 0.5).astype(np.int64)
    out = np.zeros((len(q), len(q)), dtype=np.int64)
    for column in q.T:
        diff = column[:, None] - column[None, :]
        out += diff * diff
    return out


def draw_fault(rng: random.Random, kind: str, volume: dict, deadlines: Deadlines) -> str | None:
    """The proxy spec of ``kind``; byte offsets drawn within the calibrated volume."""
    up, down = max(volume["up"], 2), max(volume["down"], 2)
    at = rng.randrange(1, up)
    return {
        "none": None,
        "latency": f"latency={rng.choice((5, 20, 50))}ms,jitter={rng.choice((0, 5, 20))}ms,"
                   "dir=both",
        "rate": f"rate={max(1, int(up / (0.3 * deadlines.evaluation)))}B/s",
        "reset": f"reset@bytes={at}",
        "short-pause": f"pause={0.3 * deadlines.evaluation:g}s@bytes={at}",
        "long-pause": f"pause={1.5 * deadlines.evaluation:g}s@bytes={at}",
        "half-open": f"half-open@bytes={at}",
        "corrupt-up": f"corrupt@bytes={at}",
        "corrupt-down": f"corrupt@bytes={rng.randrange(1, down)},dir=down",
    }[kind]


def schedule(seed: int, session: int, names: list, volume: dict, deadlines: Deadlines,
             fault_rate: float, kill_rate: float) -> tuple:
    """``(faults, kills)`` of one session: each party's link is faulted with probability
    ``fault_rate``, and with probability ``kill_rate`` one party is killed in a phase."""
    rng = random.Random(f"chaos:{seed}:{session}")
    faults, kinds = {}, {}
    for name in names:
        kind = rng.choice(FAULT_KINDS[1:]) if rng.random() < fault_rate else "none"
        kinds[name] = kind
        spec = draw_fault(rng, kind, volume[name], deadlines)
        if spec:
            faults[name] = spec
    kills = {}
    if rng.random() < kill_rate:
        kills[rng.choice(names)] = rng.choice(KILL_PHASES)
    return faults, kinds, kills


def party_data(n: int, m: int, dim: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    sizes = [n // m + (1 if i < n % m else 0) for i in range(m)]
    return {f"party-{i}": rng.uniform(-1.0, 1.0, (size, dim)) for i, size in enumerate(sizes)}


def cluster(view) -> np.ndarray:
    """The coordinator's 'clustering': each row's nearest of the first three rows."""
    return np.asarray(view)[:, :3].argmin(axis=1)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description="Chaos run: gRPC sessions with link faults and process kills from a "
                    "seeded schedule; counts exact D, clean aborts, hung, wrong, lost and "
                    "what was left behind.")
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--n", type=int, default=5000, help="rows in total")
    parser.add_argument("--m", type=int, default=7, help="parties")
    parser.add_argument("--dim", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0, help="seeds the schedule and data")
    parser.add_argument("--adversaries", type=int, default=1,
                        help="A (integrity detect): with l = t = 1, K = 3, so m - 3 - A "
                             "parties may drop out of a round")
    parser.add_argument("--fault-rate", type=float, default=0.4,
                        help="probability that a party's link is faulted")
    parser.add_argument("--kill-rate", type=float, default=0.3,
                        help="probability that a session kills one party process")
    parser.add_argument("--evaluation", type=float, default=None,
                        help="evaluation deadline (s); default 3x the calibration's, >= 8")
    parser.add_argument("--quick", action="store_true", help="smoke run: 3 tiny sessions")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if anything hung, was wrong, lost or left behind")
    parser.add_argument("--json", help="write the counts and every session here")
    args = parser.parse_args(argv)
    if args.quick:
        args.sessions, args.n, args.m, args.dim = 3, 60, 4, 3
        args.adversaries, args.fault_rate, args.kill_rate = 0, 0.5, 0.3
    logging.basicConfig(level=logging.ERROR)
    logging.getLogger("omnifc").setLevel(logging.CRITICAL)
    logging.getLogger("protocols").setLevel(logging.CRITICAL)

    parameters = SessionParameters(dim=args.dim, bound=1.0, scale_bits=8, segments=1,
                                   noise_segments=1, integrity="detect",
                                   adversaries=args.adversaries)
    data = party_data(args.n, args.m, args.dim, args.seed)
    rows = np.concatenate(list(data.values()))
    expected = oracle(rows, 1.0, 8)
    names = list(data)
    load_before = os.getloadavg()[0]
    started = time.monotonic()

    # calibration: a fault-free session of the same shape (not counted)
    calibration_deadlines = Deadlines(join=60, shares=120, evaluation=300, result=30)
    print(f"[calibration] fault-free session, n = {args.n}, m = {args.m}", file=sys.stderr,
          flush=True)
    calibration = run_faulted_session(data, parameters, calibration_deadlines,
                                      cluster=cluster, seed=args.seed)
    verdict, reason = classify(calibration, expected)
    if verdict != "exact":
        print(f"calibration session did not give the exact D: {verdict} ({reason})",
              file=sys.stderr)
        return 1
    phases = dict((phase, when) for when, phase, _ in calibration.phases)
    evaluation_seconds = phases.get("decode", calibration.seconds) - phases.get("evaluation", 0)
    volume = calibration.volumes
    e = args.evaluation or max(5.0 if args.quick else 8.0, round(3 * evaluation_seconds + 1))
    deadlines = Deadlines(join=10 if args.quick else 20,
                          shares=max(8.0, round(3 * phases.get("evaluation", 1) + 5)),
                          evaluation=e, result=5 if args.quick else 10)

    counts = {key: 0 for key in ("exact", "undelivered_reported", "abort", "unclear-abort",
                                 "hung", "wrong", "lost", "files_left", "processes_left",
                                 "threads_left")}
    sessions = []
    for index in range(args.sessions):
        faults, kinds, kills = schedule(args.seed, index, names, volume, deadlines,
                                        args.fault_rate, args.kill_rate)
        print(f"[{index + 1}/{args.sessions}] faults {faults or 'none'} kills "
              f"{kills or 'none'}", file=sys.stderr, flush=True)
        wall = time.monotonic()
        run = run_faulted_session(data, parameters, deadlines, faults=faults, kills=kills,
                                  cluster=cluster, seed=args.seed * 7919 + index)
        verdict, reason = classify(run, expected)
        counts[verdict] += 1
        if verdict == "exact" and run.outcome.undelivered:
            counts["undelivered_reported"] += 1
        counts["files_left"] += len(run.files_left)
        counts["processes_left"] += len(run.processes_left)
        counts["threads_left"] += run.threads_left
        fired = {name: [what for _, what, _, _ in events] for name, events in run.fired.items()
                 if events}
        sessions.append({"session": index, "faults": faults, "kinds": kinds, "kills": kills,
                         "fired": fired, "verdict": verdict, "reason": reason[:300],
                         "coordinator_seconds": run.seconds,
                         "party_seconds": {n: p.seconds for n, p in run.parties.items()},
                         "party_errors": {n: p.error for n, p in run.parties.items()
                                          if p.error},
                         "logs": {n: p.log for n, p in run.parties.items()
                                  if verdict not in ("exact", "abort")},
                         "wall_seconds": time.monotonic() - wall})
        print(f"    -> {verdict}: {reason[:160]}", file=sys.stderr, flush=True)
    load_after = os.getloadavg()[0]

    print(f"bench_chaos: {args.sessions} session(s), n = {args.n}, m = {args.m}, d = "
          f"{args.dim}, l = t = 1, integrity detect, A = {args.adversaries}, seed {args.seed}")
    print(f"deadlines: join {deadlines.join:g} s, shares {deadlines.shares:g} s, evaluation "
          f"{deadlines.evaluation:g} s, result {deadlines.result:g} s (calibration "
          f"evaluation {evaluation_seconds:.2f} s)")
    print(f"bounds: party {party_bound(deadlines):g} s (its session timeout), coordinator its "
          f"deadlines; + slack")
    print(f"        (slack: {SLACK:g} s x load per CPU, at most {MAX_SLACK:g} s)")
    print(f"load average {load_before:.2f} before, {load_after:.2f} after, on "
          f"{os.cpu_count()} CPUs; {time.monotonic() - started:.0f} s in all")
    labels = {"exact": "exact D", "undelivered_reported": "  of which a party reported "
              "undelivered", "abort": "clean abort within the deadline",
              "unclear-abort": "abort without a clear error at some end", "hung": "hung",
              "wrong": "wrong D or labels", "lost": "results lost",
              "files_left": "files left behind", "processes_left": "processes left behind",
              "threads_left": "proxy threads left running"}
    for key, text in labels.items():
        print(f"{text:<48} {counts[key]:>5}")
    fired = sum(1 for s in sessions for events in s["fired"].values() for _ in events)
    print(f"faults fired {fired}, kills scheduled "
          f"{sum(len(s['kills']) for s in sessions)}")
    bad = {key: counts[key] for key in BAD if counts[key]}
    if args.json:
        Path(args.json).write_text(json.dumps({
            "sessions": sessions, "counts": counts, "n": args.n, "m": args.m,
            "seed": args.seed, "deadlines": dataclasses.asdict(deadlines),
            "load": [load_before, load_after], "bad": bad}, indent=1, default=str))
    if args.check and bad:
        print(f"chaos check failed: {bad}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
