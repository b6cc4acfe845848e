"""Reproduce the OmniFC paper's evaluation; same as ``omnifc reproduce``.

Usage: python benchmarks/reproduce.py [--paper clove|client2vec|flux|fmcl|omnifc|all] [--out DIR (default ./omnifc-reproduce)] [--quick]
"""

from __future__ import annotations

import sys

from omnifc.cli import main

if __name__ == "__main__":
    sys.exit(main(["reproduce", *sys.argv[1:]]))
