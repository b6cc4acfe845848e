"""Regenerate the measured figures in docs/benchmarks.md and docs/audit.md.

Figures in the docs are written by this script, never by hand: it reruns each benchmark
``--reruns`` times (``--json``), and replaces the text between the markers
``<!-- figures:NAME:start -->`` and ``<!-- figures:NAME:end -->`` with a table of the
range (min-max) over the reruns, stamped with the date, the machine (CPU, cores, BLAS)
and the load average before and after. The audit summary comes from ``run_audit`` with a
seeded noise source, so its p-values are the same on every run (a real audit draws fresh
noise from the OS CSPRNG: its p-values differ run to run, its verdicts should not).

    python benchmarks/write_figures.py                    # all: ~10 min on 2 cores
    python benchmarks/write_figures.py --only protocol --reruns 5
    python benchmarks/write_figures.py --quick --docs /tmp/docs   # smoke run (tests)

``--quick`` passes ``--quick`` to the benchmarks (tiny shapes, figures meaningless) and
exists so that the suite runs every code path of this script; never commit its output.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SECTIONS = {"protocol": "benchmarks.md", "kernels": "benchmarks.md", "audit": "audit.md"}


def machine() -> str:
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next((line.split(":", 1)[1].strip() for line in fh
                        if line.startswith("model name")), "?")
    except OSError:
        pass
    blas = ""
    try:
        from threadpoolctl import threadpool_info
        pools = [p for p in threadpool_info() if p.get("user_api") == "blas"]
        if pools:
            p = pools[0]
            blas = f"; {p.get('internal_api')} {p.get('version')} ({p.get('architecture')})"
    except ImportError:
        pass
    import numpy
    return (f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, "
            f"numpy {numpy.__version__}{blas}")


def run_json(script: str, extra: list[str], quick: bool) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "figures.json"
        command = [sys.executable, str(HERE / script), "--json", str(out), *extra]
        if quick:
            command.append("--quick")
        print("running", " ".join(command[1:]), file=sys.stderr, flush=True)
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, timeout=3600)
        return json.loads(out.read_text())


def span(values, fmt: str = "{:.1f}", unit: str = "") -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    low, high = fmt.format(min(values)), fmt.format(max(values))
    return f"{low}{unit}" if low == high else f"{low}-{high}{unit}"


def loads(runs, before="load_before", after="load_after") -> str:
    first = [r[before][0] for r in runs if r.get(before)]
    last = [r[after][0] for r in runs if r.get(after)]
    return f"load average (1 min) {span(first, '{:.1f}')} before, {span(last, '{:.1f}')} after"


def stamp(runs, what: str) -> str:
    dates = sorted(r["date"] for r in runs)
    when = dates[0] if dates[0] == dates[-1] else f"{dates[0]} to {dates[-1]}"
    quick = " **(--quick smoke run: not meaningful)**" if runs[0].get("quick") else ""
    return (f"_Written by `python benchmarks/write_figures.py` on {when}: {len(runs)} "
            f"rerun(s) of {what}; {machine()}; {loads(runs)}. Ranges are min-max over "
            f"the reruns._{quick}")


def protocol_section(reruns: int, quick: bool) -> str:
    runs = [run_json("bench_protocol.py", [], quick) for _ in range(reruns)]
    r0 = runs[0]
    rows = [
        "| path | median per rerun | vs pdist | target | met |",
        "|---|---|---|---|---|",
        f"| pdist (`sqeuclidean`, condensed), the baseline | "
        f"{span([r['pdist_seconds'] * 1e3 for r in runs], '{:.2f}', ' ms')} | 1x | | |",
        f"| one party's distances mod p, n x n (`cross_sq_distances`) | "
        f"{span([r['party_kernel_seconds'] * 1e3 for r in runs], '{:.2f}', ' ms')} | "
        f"{span([r['party_kernel_seconds'] / r['pdist_seconds'] for r in runs], unit='x')} | | |",
        f"| in memory, end to end (coordinator and all parties in one process) | "
        f"{span([r['memory_seconds'] * 1e3 for r in runs], '{:.0f}', ' ms')} | "
        f"{span([r['memory_ratio'] for r in runs], unit='x')} | <= 10x | "
        f"{_met(runs, 'memory_target_met')} |",
    ]
    if "grpc_ratio" in r0:
        rows += [
            f"| gRPC + mutual TLS on loopback, after every party joined | "
            f"{span([r['grpc_protocol_seconds'] * 1e3 for r in runs], '{:.0f}', ' ms')} | "
            f"{span([r['grpc_ratio'] for r in runs], unit='x')} | <= 30x | "
            f"{_met(runs, 'grpc_target_met')} |",
            f"| gRPC + mutual TLS, wall time incl. starting the party processes | "
            f"{span([r['grpc_wall_seconds'] for r in runs], '{:.1f}', ' s')} | "
            f"{span([r['grpc_wall_ratio'] for r in runs], '{:.0f}', 'x')} | | |",
        ]
    phases = ", ".join(
        f"{phase} {span([r['memory_phases'][phase][0] * 1e3 for r in runs], '{:.1f}', ' ms')}"
        f" ({span([r['memory_phases'][phase][1] / 1e6 for r in runs], '{:.2f}', ' MB')})"
        for phase in r0["memory_phases"])
    return "\n".join([
        stamp(runs, f"`bench_protocol.py` (n = {r0['n']}, d = {r0['dim']}, "
                    f"m = {r0['parties']}, q = {r0['scale_bits']})"),
        "", *rows, "", f"Per phase in memory (seconds and bytes): {phases}."])


def _met(runs, key: str) -> str:
    """"k of n" reruns that met a target, or why it was not judged (another size)."""
    if any(r.get(key) is None for r in runs):
        return f"not judged at n = {runs[0]['n']} (defined for n = 2000)"
    return f"{sum(bool(r[key]) for r in runs)} of {len(runs)}"


def kernels_section(reruns: int, quick: bool) -> str:
    runs = [run_json("bench_kernels.py", [], quick) for _ in range(reruns)]
    for r in runs:
        r["load_before"] = r["environment"].get("loadavg")
        r["load_after"] = r["environment"].get("load_after")
    lines = ["| kernel | shape | ratio or rate | baseline | target | met |",
             "|---|---|---|---|---|---|"]
    for i, row in enumerate(runs[0]["rows"]):
        same = [r["rows"][i] for r in runs if i < len(r["rows"])]
        if str(row.get("target") or "").startswith(">=") or row.get("ratio") is None:
            value = span([_rate(s.get("rate")) for s in same], "{:.2f}", " G/s")
        else:
            value = span([s["ratio"] for s in same], "{:.2f}", "x")
        met = ("" if row.get("passed") is None else
               f"{sum(bool(s.get('passed')) for s in same)} of {len(same)}")
        lines.append(f"| `{row['kernel']}` | {row['shape']} | {value} | "
                     f"{row.get('baseline') or ''} | {row.get('target') or ''} | {met} |")
    return "\n".join([stamp(runs, "`bench_kernels.py` (p = 2^31 - 1)"), "", *lines])


def _rate(text) -> float | None:
    """The leading number of a rate such as "0.70 G el/s (output), ..." (None if absent)."""
    try:
        return float(str(text).split()[0])
    except (ValueError, IndexError):
        return None


def audit_section(reruns: int, quick: bool) -> str:
    import numpy as np

    sys.path.insert(0, str(ROOT))
    from omnifc.audit import AuditParameters, run_audit

    params = AuditParameters()
    started = datetime.datetime.now(datetime.timezone.utc)
    report = run_audit(params, noise_source=np.random.default_rng(0),
                       checks=(1, 2, 6, 7) if quick else None)
    checks = getattr(report, "checks", report)
    lines = ["| # | check | verdict | finding |", "|---|---|---|---|"]
    for check in checks:
        finding = " ".join(str(check.finding).split()).replace("|", "\\|")
        lines.append(f"| {check.number} | {check.title} | {str(check.verdict).upper()} | "
                     f"{finding} |")
    return "\n".join([
        f"_Written by `python benchmarks/write_figures.py --only audit` on "
        f"{started:%Y-%m-%d %H:%M} UTC: `run_audit(AuditParameters(), noise_source="
        f"np.random.default_rng(0))`, seeded so that every figure (p-values included) is "
        f"the same on each run; `omnifc audit` draws fresh noise, so its p-values vary._"
        + (" **(--quick smoke run)**" if quick else ""), "", *lines])


def check_markers(path: Path, name: str) -> None:
    start, end = f"<!-- figures:{name}:start -->", f"<!-- figures:{name}:end -->"
    text = path.read_text()
    if text.count(start) != 1 or text.count(end) != 1:
        raise SystemExit(f"{path} must hold the markers {start} and {end} once each")


def replace_section(path: Path, name: str, body: str) -> None:
    check_markers(path, name)
    start, end = f"<!-- figures:{name}:start -->", f"<!-- figures:{name}:end -->"
    text = path.read_text()
    head, rest = text.split(start)
    _, tail = rest.split(end)
    path.write_text(f"{head}{start}\n{body}\n{end}{tail}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="protocol,kernels,audit",
                        help="comma-separated sections (default: all three)")
    parser.add_argument("--reruns", type=int, default=3, help="runs of each benchmark")
    parser.add_argument("--docs", default=str(ROOT / "docs"), help="folder of the docs")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: the benchmarks' --quick mode (never commit it)")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = sorted(set(names) - set(SECTIONS))
    if unknown:
        parser.error(f"unknown section(s) {unknown}; choose from {sorted(SECTIONS)}")
    if args.reruns < 1:
        parser.error("--reruns must be at least 1")
    build = {"protocol": protocol_section, "kernels": kernels_section,
             "audit": audit_section}
    for name in names:  # fail before hours of benchmarks, not after
        check_markers(Path(args.docs) / SECTIONS[name], name)
    for name in names:
        body = build[name](args.reruns, args.quick)
        replace_section(Path(args.docs) / SECTIONS[name], name, body)
        print(f"wrote the {name} figures into {Path(args.docs) / SECTIONS[name]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
