"""Docs true to the code: ``make help`` has a line for every Makefile target,
README's layout table names every module of ``scripts/``."""

from __future__ import annotations

import re
import subprocess

from scripts.series.base import REPO


def makefile_targets() -> list[str]:
    """Every explicit target of the Makefile (rules ``name:``, not ``:=``
    assignments or ``$(VAR)`` file targets)."""
    text = (REPO / "Makefile").read_text()
    return sorted({m for m in re.findall(r"^([a-z][\w-]*)\s*:(?!=)", text, re.M)})


def test_make_help_lists_every_target():
    out = subprocess.run(["make", "-s", "help"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    # "make  <description>" is the default target (all), "make name <description>" the others
    listed = {"all" if line.startswith("make  ") else line.split()[1]
              for line in out.splitlines() if line.startswith("make ")}
    assert set(makefile_targets()) - listed == set()
    assert listed - set(makefile_targets()) == set()


def test_readme_layout_names_every_scripts_module():
    row = next(line for line in (REPO / "README.md").read_text().splitlines() if line.startswith("| `scripts/`"))
    named = set(re.findall(r"`(\w+)\.py`", row))
    modules = {p.stem for p in (REPO / "scripts").glob("*.py") if p.stem != "__init__"}
    assert modules - named == set()
    assert named - modules == set()
