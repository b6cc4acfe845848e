#!/usr/bin/env python3
"""Plant one known bug, run the tests that must catch it, restore the file.

Usage: ``python tools/plant.py [NAME ...]`` (all by default; ``--list`` shows them).
Exit status 0 when every planted bug made its tests fail and they pass without it (a test
file that already fails is reported BROKEN: it would "catch" any bug), 1 otherwise. Each
bug is one textual edit of a library file; the file is restored from its own bytes
afterwards (even on Ctrl-C), so the tree is left as it was. docs/testing.md explains each entry.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: name -> (file, old text, new text, tests that must fail)
BUGS = {
    "aad-none": ("protocols/_crypto.py",
                 [("encrypt(nonce, plaintext, aad)", "encrypt(nonce, plaintext, None)"),
                  ("decrypt(expected, bytes(ciphertext), aad)",
                   "decrypt(expected, bytes(ciphertext), None)")],
                 "tests/protocols/test_wire.py"),
    "aad-without-prime": ("protocols/_crypto.py",
                          [("receiver, prime_index, chunk_index)",
                            "receiver, chunk_index)")],
                          "tests/protocols/test_wire.py"),
    "aad-without-roster": ("protocols/_crypto.py",
                           [('transcript("share", self.session_id, self.roster_digest, round_,',
                             'transcript("share", self.session_id, round_,')],
                           "tests/protocols/test_wire.py"),
    "hkdf-without-roster": ("protocols/_crypto.py",
                            [('transcript("pair-key", session_id, roster_digest, first,',
                              'transcript("pair-key", session_id, first,')],
                            "tests/protocols/test_crypto.py"),
    "mask-view-unbound": ("protocols/_crypto.py",
                          [('transcript("mask-stream", view.digest, int(prime)',
                            'transcript("mask-stream", int(prime)')],
                          "tests/protocols/test_crypto.py"),
    "unpack-accepts-p": ("protocols/_messages.py",
                         [("int(values.max()) >= prime", "int(values.max()) > prime")],
                         "tests/protocols/test_wire.py"),
    "unpack-no-range-check": ("protocols/_messages.py",
                              [("if values.size and int(values.max()) >= prime:",
                                "if False:")],
                              "tests/protocols/test_wire.py"),
    "roster-duplicate": ("protocols/_party.py",
                         [("if names != order:", "if set(names) != set(order):")],
                         "tests/protocols/party/test_refusals.py"),
    "fixed-ephemeral-key": ("protocols/_crypto.py",
                            [("return cls(X25519PrivateKey.generate())",
                              "return cls(X25519PrivateKey.from_private_bytes(bytes(range(32))))")],
                            "tests/protocols/test_wire.py"),
    "round-start-replay": ("protocols/_party.py",
                           [("if start.round <= self._round:", "if start.round < self._round:")],
                           "tests/protocols/test_wire.py"),
    "second-grpc-stream": ("protocols/_grpc_coordinator.py",
                           [("if name in self.outboxes:", "if False:")],
                           "tests/protocols/test_grpc_streams.py"),
    "kmeanspp-side": ("omnifc/_clustering/_common.py",
                      [("np.searchsorted(np.cumsum(closest), draws)",
                        "np.searchsorted(np.cumsum(closest), draws, side='right')")],
                      "tests/omnifc/test_kmeanspp_seeding.py"),
    "raw-plaintext-d": ("omnifc/adapters/raw/__init__.py",
                        [("    if secure:\n        d = secure_distance_matrix",
                          "    if False:\n        d = secure_distance_matrix")],
                        "tests/adapters/test_protocol_really_runs.py"),
    "fmcl-plaintext-d": ("omnifc/adapters/fmcl/_secure.py",
                         [("    if secure:\n        owners = None", "    if False:\n        owners = None")],
                         "tests/adapters/test_protocol_really_runs.py"),
    "clove-plaintext-d": ("omnifc/adapters/clove/_simulation.py",
                          [("            if secure:\n                d = protect",
                            "            if False:\n                d = protect")],
                          "tests/adapters/test_protocol_really_runs.py"),
    "clove-plaintext-costs": ("omnifc/adapters/clove/_simulation.py",
                              [("            if secure:\n                cost = secure_group_sums",
                                "            if False:\n                cost = secure_group_sums")],
                              "tests/adapters/test_protocol_really_runs.py"),
    "sum-unmasked": ("protocols/_party.py",
                     [('masked = self.parameters.mode == "masked"', "masked = False")],
                     "tests/adapters/test_protocol_really_runs.py"),
    "kappa-unmatched": ("omnifc/experiments/_metrics.py",
                        [("return float(cohen_kappa_score(truth, aligned))",
                          "return float(cohen_kappa_score(truth, _dense(predicted, 'p')))")],
                        "tests/omnifc/test_clustering_reproduce.py"),
}


def _pytest(tests: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                           "--no-header", "-o", "addopts=", tests],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)


def _last_line(run: subprocess.CompletedProcess) -> str:
    lines = [line for line in run.stdout.splitlines() if line.strip()]
    return lines[-1] if lines else run.stderr[-200:]


def plant(name: str) -> bool:
    """True when the tests pass on the tree as it is and fail on the planted bug."""
    path, edits, tests = BUGS[name]
    file = ROOT / path
    original = file.read_bytes()
    text = original.decode()
    for old, new in edits:
        if text.count(old) != 1:
            print(f"{name}: the text to replace is not in {path} exactly once; update BUGS")
            return False
        text = text.replace(old, new)
    clean = _pytest(tests)  # a test that already fails would "catch" every bug
    if clean.returncode != 0:
        print(f"{name:24s} BROKEN  (the tests fail without the bug: {_last_line(clean)})")
        return False
    try:
        file.write_text(text)
        run = _pytest(tests)
    finally:
        file.write_bytes(original)
    caught = run.returncode == 1
    print(f"{name:24s} {'CAUGHT' if caught else 'MISSED'}  ({_last_line(run)})")
    return caught


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="bugs to plant (default: all)")
    parser.add_argument("--list", action="store_true", help="list the bugs and exit")
    args = parser.parse_args(argv)
    if args.list:
        for name, (path, _, tests) in BUGS.items():
            print(f"{name:24s} {path:34s} {tests}")
        return 0
    names = args.names or list(BUGS)
    unknown = sorted(set(names) - set(BUGS))
    if unknown:
        parser.error(f"unknown bug(s) {unknown}; --list shows them")
    return 0 if all([plant(n) for n in names]) else 1


if __name__ == "__main__":
    sys.exit(main())
