"""Peak memory and CPU of this process and of the party processes, sampled while a bench_scale
session runs (RssAnon and VmHWM from /proc, per phase for the layouts)."""

from __future__ import annotations

import os
import statistics
import threading
import time


class _Sampler:
    """Calls ``_sample()`` every ``interval`` seconds in a background thread while entered,
    and once more on exit."""

    def __init__(self, interval):
        self.interval, self._stop = interval, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            self._sample()
            time.sleep(self.interval)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self._sample()


class _MemoryWatch(_Sampler):
    """Peak RssAnon sampled in a background thread; VmHWM read at the end."""

    def __init__(self, interval=0.02):
        super().__init__(interval)
        self.peak_anon = self.peak_rss = 0

    @staticmethod
    def _status(field):
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
        return 0

    def _sample(self):
        self.peak_anon = max(self.peak_anon, self._status("RssAnon"))
        self.peak_rss = self._status("VmHWM")


class _ProcessWatch(_Sampler):
    """Peak RssAnon / VmHWM and CPU seconds of other processes, sampled every 0.2 s."""

    def __init__(self, interval=0.2):
        super().__init__(interval)
        self.pids, self.peak_anon, self.peak_rss, self.cpu = {}, {}, {}, {}

    def add(self, name, pid):
        self.pids[name] = pid

    def _sample(self):
        tick = os.sysconf("SC_CLK_TCK")
        for name, pid in list(self.pids.items()):
            try:
                with open(f"/proc/{pid}/status") as fh:
                    status = dict(line.split(":", 1) for line in fh if ":" in line)
                with open(f"/proc/{pid}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
            except (OSError, ValueError):
                continue  # exited
            anon = int(status.get("RssAnon", "0 kB").split()[0]) * 1024
            hwm = int(status.get("VmHWM", "0 kB").split()[0]) * 1024
            self.peak_anon[name] = max(self.peak_anon.get(name, 0), anon)
            self.peak_rss[name] = max(self.peak_rss.get(name, 0), hwm)
            self.cpu[name] = (int(fields[11]) + int(fields[12])) / tick  # utime + stime


class _PhaseWatch(_Sampler):
    """Peak RssAnon of this process and of others, per phase of the session (the
    coordinator's phase, set by its phase callback), sampled every ``interval`` seconds."""

    def __init__(self, interval=0.1):
        super().__init__(interval)
        self.phase, self.pids, self.peaks = "start", {"coordinator": "self"}, {}
        self.cpu, self.cpu_until = {}, {}

    def add(self, name, pid):
        self.pids[name] = pid

    def _sample(self):
        tick = os.sysconf("SC_CLK_TCK")
        phase = self.phase
        for name, pid in list(self.pids.items()):
            try:
                with open(f"/proc/{pid}/status") as fh:
                    anon = next((int(line.split()[1]) * 1024 for line in fh
                                 if line.startswith("RssAnon:")), 0)
                with open(f"/proc/{pid}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
            except (OSError, ValueError, StopIteration):
                continue  # exited
            per = self.peaks.setdefault(phase, {})
            per[name] = max(per.get(name, 0), anon)
            self.cpu[name] = (int(fields[11]) + int(fields[12])) / tick
            self.cpu_until.setdefault(phase, {})[name] = self.cpu[name]

    def summary(self) -> dict:
        """{phase: [coordinator peak, largest party peak, coordinator CPU seconds, median
        party CPU seconds]}: the CPU each process spent in the phase (process CPU, as
        sampled: a phase shorter than the interval may count in the next one)."""
        out, before = {}, {}
        for phase, per in self.peaks.items():
            parties = [v for k, v in per.items() if k != "coordinator"]
            until = self.cpu_until.get(phase, {})
            spent = {k: v - before.get(k, 0.0) for k, v in until.items()}
            before.update(until)
            party_cpu = [v for k, v in spent.items() if k != "coordinator"]
            out[phase] = [per.get("coordinator", 0), max(parties, default=0),
                          spent.get("coordinator", 0.0),
                          statistics.median(party_cpu) if party_cpu else 0.0]
        return out
