"""Wall-clock stamps of this process for bench_flower.py's cost breakdown (``--trace``)."""

import json
import os
import time


def process_start() -> float:
    """When this process started (``time.time()`` scale; Linux /proc, 10 ms ticks), or
    NaN where /proc is missing."""
    try:
        with open("/proc/self/stat") as fh:
            ticks = int(fh.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as fh:
            uptime = float(fh.read().split()[0])
        return time.time() - (uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return float("nan")


def write(path, stamps: dict) -> None:
    """Save ``stamps`` as JSON at ``path`` (atomic rename)."""
    tmp = f"{path}.tmp"
    with open(tmp, "w") as fh:
        json.dump(stamps, fh)
    os.replace(tmp, path)
