"""The audit report: a summary table first, then one section per check (Markdown, JSON, PNG)."""

from __future__ import annotations

import datetime
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ._model import FAIL, INFO, PASS, WARN, Check
from ._params import AuditParameters

__all__ = ["AuditReport"]

logger = logging.getLogger(__name__)

_BADGE = {PASS: "PASS", FAIL: "**FAIL**", WARN: "WARN", INFO: "INFO"}

THREAT_MODEL = [
    ("any ≤ t colluding parties", "nothing about others' data (views uniform)", "1, 2"),
    ("t+1 colluding parties", "other parties' data (the bound is tight)", "2"),
    ("coordinator, masked mode", "D only", "3"),
    ("anyone who learns D (the coordinator)", "the data up to a rigid motion; with ≥ d+1 known "
     "records, everything", "4"),
    ("coordinator, transparent mode", "g entirely: per-segment distance matrices", "3"),
    ("network observer", "nothing (TLS + AEAD)", "5"),
]


def _jsonable(value):
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (np.bool_,)):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    if isinstance(value, Path):
        return str(value)
    return value


def _cell(value) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def _table(header, rows) -> list[str]:
    lines = ["| " + " | ".join(_cell(h) for h in header) + " |",
             "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return lines


@dataclass
class AuditReport:
    """Every check's verdict and evidence for one set of session parameters.

    Attributes
    ----------
    parameters : AuditParameters
    checks : list of Check
    generated : str
        UTC timestamp.
    seconds : float
        How long the audit took.
    """

    parameters: AuditParameters
    checks: list
    generated: str = field(default_factory=lambda: datetime.datetime.now(
        datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"))
    seconds: float = 0.0
    written: list = field(default_factory=list)

    @property
    def passed(self) -> bool:
        """True when no check failed (``warn`` and ``info`` do not fail an audit)."""
        return not any(c.verdict == FAIL for c in self.checks)

    @property
    def failed_checks(self) -> list:
        return [c for c in self.checks if c.verdict == FAIL]

    def check(self, key) -> Check:
        """A check by key (``"algebraic_privacy"``) or number."""
        for c in self.checks:
            if c.key == key or c.number == key:
                return c
        raise KeyError(key)

    # -- rendering -------------------------------------------------------------------
    def summary_rows(self) -> list:
        return [[c.number, c.title, _BADGE[c.verdict], c.finding] for c in self.checks]

    def summary_markdown(self) -> str:
        """The summary table alone (also printed by the CLI)."""
        return "\n".join(_table(["#", "check", "verdict", "finding"], self.summary_rows()))

    def overall(self) -> str:
        if self.passed:
            warned = [c.number for c in self.checks if c.verdict == WARN]
            return ("PASS: no check failed" + (f" (warnings: checks {warned})" if warned else ""))
        return "FAIL: check(s) " + ", ".join(str(c.number) for c in self.failed_checks) + \
            " failed"

    def to_markdown(self) -> str:
        p = self.parameters
        desc = p.describe()
        lines = [
            "# omnifc privacy audit", "",
            f"Generated {self.generated} by omnifc {_version()} in {self.seconds:.1f} s. "
            f"Parameters: {desc['source']}.", "",
            f"**Overall: {self.overall()}.** `omnifc audit` exits non-zero when a check fails; "
            "`warn` marks a declared leak the deployment accepts, `info` a fact to know.", "",
            "## Summary", "", self.summary_markdown(), "",
            "## Session parameters", ""]
        lines += _table(["parameter", "value"], [
            ["d (features)", desc["dim"]], ["R (public clip bound)", desc["bound"]],
            ["q (scale bits)", desc["scale_bits"]],
            ["features in [0, R]", "yes" if desc["nonnegative"] else "no (signed)"],
            ["l (segments)", desc["segments"]], ["t (noise segments)", desc["noise_segments"]],
            ["m (parties)", desc["parties"]], ["mode", desc["mode"]],
            ["primes", ", ".join(map(str, desc["primes"] or [])) or "none valid"],
            ["α (interpolation points)", ", ".join(map(str, desc["alphas"]))],
            ["β (party points)", ", ".join(map(str, desc["betas"]))],
            ["n (rows, for the advice)", desc["rows"]]])
        lines += ["", "## Threat model and where each row is checked", "",
                  "From DESIGN.md §5; the last column names the checks below that test the row "
                  "on these parameters.", ""]
        lines += _table(["who", "learns", "checked by"], THREAT_MODEL)
        for c in self.checks:
            lines += ["", f"## {c.number}. {c.title}", "",
                      f"**Verdict: {_BADGE[c.verdict]}** — {c.finding}", ""]
            if c.reasons and c.verdict in (FAIL, WARN):
                lines += ["Reasons:", ""] + [f"- {r}" for r in c.reasons] + [""]
            for paragraph in c.details:
                lines += [paragraph, ""]
            for caption, header, rows in c.tables:
                lines += [f"*{caption}*", ""] + _table(header, rows) + [""]
            for figure in c.figures:
                if figure in self.written:
                    lines += [f"![{c.title}]({figure})", ""]
            if c.reproduce:
                lines += ["How to reproduce:", "", "```", c.reproduce, "```"]
        return "\n".join(lines) + "\n"

    def to_dict(self) -> dict:
        return _jsonable({
            "omnifc_version": _version(), "generated": self.generated,
            "seconds": round(self.seconds, 3), "parameters": self.parameters.describe(),
            "passed": self.passed, "overall": self.overall(),
            "summary": [{"number": c.number, "key": c.key, "title": c.title,
                         "verdict": c.verdict, "finding": c.finding} for c in self.checks],
            "checks": [c.to_dict() for c in self.checks]})

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, ensure_ascii=False)

    def write(self, out_dir) -> list:
        """Write report.md, report.json and the PNG figures into ``out_dir``; return paths."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        paths = []
        try:
            import matplotlib  # noqa: F401
            plotting = True
        except ImportError:  # pragma: no cover - matplotlib is in the test/plots extras
            plotting = False
            logger.warning("matplotlib is not installed: the report has no figures "
                           "(pip install omnifc[plots])")
        self.written = []
        for c in self.checks:
            for name, plot in c.plots:
                if plotting:
                    plot(out / name)
                    self.written.append(name)
                    paths.append(out / name)
            c.figures = [f for f in c.figures if f in self.written]
        (out / "report.md").write_text(self.to_markdown(), encoding="utf-8")
        (out / "report.json").write_text(self.to_json() + "\n", encoding="utf-8")
        paths += [out / "report.md", out / "report.json"]
        return paths


def _version() -> str:
    try:
        from .. import __version__
        return __version__
    except ImportError:  # pragma: no cover
        return "unknown"
