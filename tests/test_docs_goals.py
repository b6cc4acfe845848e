"""docs/adapters.md's summary of issue 24's goals points at sections that exist.

The table "Issue 24's goals: where each stands" names, per goal, the sections that hold its
figures ("quoted" names) or files (docs/...). Every quoted name must open a heading of the
page or a bold paragraph lead, and every file must exist, so the summary cannot point at a
section that was renamed or removed; README's pointer names the table's own heading."""

from __future__ import annotations

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "adapters.md"
TITLE = "Issue 24's goals: where each stands"


def _table_rows(text: str) -> list[list[str]]:
    """The goals table's rows (cells; the header dropped, the rule never starts with "| ")."""
    section = text.split(f"## {TITLE}\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ")]
    return [[c.strip() for c in re.split(r"(?<!\\)\|", row.strip()[1:-1])]
            for row in rows[1:]]


def _places(text: str) -> list[str]:
    """What may be pointed at: the page's headings and bold leads, without the markup."""
    heads = [m.group(1) for m in re.finditer(r"^#+ (.+)$", text, re.M)]
    bold = [m.group(1) for m in re.finditer(r"\*\*([^*]+)\*\*", text)]
    return heads + bold


def missing_targets(text: str, root: pathlib.Path = ROOT) -> list[str]:
    """The quoted section names no heading or bold lead of ``text`` starts with, and the
    docs/ files that do not exist, over every row's last cell."""
    places = _places(text)
    out = []
    for row in _table_rows(text):
        where = row[-1]
        for name in re.findall(r'"([^"]+)"', where):
            if not any(p.startswith(name) or p.lstrip("(").startswith(name) for p in places):
                out.append(name)
        out += [f for f in re.findall(r"docs/[\w/.*]+\.md", where)
                if not list(root.glob(f))]
    return out


def test_every_goal_points_at_sections_that_exist():
    text = PAGE.read_text()
    rows = _table_rows(text)
    assert len(rows) >= 14 and all(len(r) == 4 for r in rows)
    assert missing_targets(text) == []
    readme = (ROOT / "README.md").read_text()
    assert f'section "{TITLE}"' in readme


def test_a_renamed_section_or_a_missing_file_is_found():
    """The check bites: a heading renamed, a bold lead removed and a file that does not
    exist are each reported, by name."""
    text = PAGE.read_text()
    renamed = text.replace("### Unseen clients: the calibrated assignment",
                           "### Unseen clients: assigned")
    assert missing_targets(renamed) == ["Unseen clients: the calibrated assignment"]
    unbolded = text.replace("**Exact class weights for any sample counts",
                            "Exact class weights for any sample counts")
    assert missing_targets(unbolded) == ["Exact class weights for any sample counts"]
    moved = text.replace("| docs/reproduction/omnifc.md |", "| docs/reproduction/iris.md |")
    assert missing_targets(moved) == ["docs/reproduction/iris.md"]
