"""The result of one audit check: a verdict, the evidence behind it, and how to reproduce it."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Check", "PASS", "FAIL", "WARN", "INFO", "VERDICTS"]

PASS, FAIL, WARN, INFO = "pass", "fail", "warn", "info"
#: ``fail`` makes ``omnifc audit`` exit non-zero; ``warn`` is a declared, accepted leak;
#: ``info`` reports facts that are neither (what the distance matrix itself reveals).
VERDICTS = (PASS, FAIL, WARN, INFO)


@dataclass
class Check:
    """One row of the audit report.

    Attributes
    ----------
    key : str
        Short identifier (``"algebraic_privacy"``...).
    number : int
        Position in the report (1-7).
    title : str
    verdict : {"pass", "fail", "warn", "info"}
    finding : str
        One sentence: what was found (the summary table shows it).
    reasons : list of str
        Why the check failed or warned (empty when it passed).
    details : list of str
        Markdown paragraphs: what was done and what it means.
    evidence : dict
        Plain data (JSON-serializable) backing the verdict.
    tables : list of (caption, header, rows)
        Tables for the Markdown report.
    figures : list of str
        PNG file names (relative to the report folder) written for this check.
    reproduce : str
        How to reproduce it (a command line or a Python snippet).
    """

    key: str
    number: int
    title: str
    verdict: str = INFO
    finding: str = ""
    reasons: list = field(default_factory=list)
    details: list = field(default_factory=list)
    evidence: dict = field(default_factory=dict)
    tables: list = field(default_factory=list)
    figures: list = field(default_factory=list)
    reproduce: str = ""
    plots: list = field(default_factory=list, repr=False)  # (file name, callable(path))

    @property
    def failed(self) -> bool:
        return self.verdict == FAIL

    def fail(self, reason: str) -> None:
        """Record a failure reason and set the verdict to ``fail``."""
        self.reasons.append(reason)
        self.verdict = FAIL

    def to_dict(self) -> dict:
        return {
            "number": self.number, "key": self.key, "title": self.title,
            "verdict": self.verdict, "finding": self.finding, "reasons": list(self.reasons),
            "details": list(self.details), "evidence": self.evidence,
            "tables": [{"caption": c, "header": list(h), "rows": [list(r) for r in rows]}
                       for c, h, rows in self.tables],
            "figures": list(self.figures), "reproduce": self.reproduce,
        }
