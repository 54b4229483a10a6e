"""Docs true to the code: ``make help`` has a line for every Makefile target,
``docs/layout.md`` names every module under ``scripts/`` and no other, and
every ``python -m scripts.X`` command and every ``scripts/...py`` path written
in README.md and ``docs/*.md`` names a module that exists."""

from __future__ import annotations

import re
import subprocess

from scripts.common.paths import REPO

SCRIPTS = REPO / "scripts"


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


def layout_tree_modules() -> set[str]:
    """The modules docs/layout.md's tree names: the fenced block that starts
    with ``scripts/``, one ``path/relative/to/scripts.py  description`` a line."""
    text = (REPO / "docs" / "layout.md").read_text()
    tree = re.search(r"^```text\nscripts/\n(.*?)^```", text, re.M | re.S)
    assert tree is not None, "docs/layout.md has no ```text block starting with scripts/"
    return {line.split()[0] for line in tree.group(1).splitlines() if line.strip()}


def test_layout_names_every_scripts_module():
    modules = {p.relative_to(SCRIPTS).as_posix() for p in SCRIPTS.rglob("*.py") if "__pycache__" not in p.parts}
    named = layout_tree_modules()
    assert sorted(modules - named) == []  # modules the layout does not name
    assert sorted(named - modules) == []  # names in the layout that are no module


def written_in_docs(pattern: str) -> dict[str, set[str]]:
    """What ``pattern`` (a regex with one group) matches in README.md and
    docs/*.md, each with the files that write it."""
    found: dict[str, set[str]] = {}
    for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for name in re.findall(pattern, path.read_text()):
            found.setdefault(name, set()).add(path.relative_to(REPO).as_posix())
    return found


def runnable(module: str) -> bool:
    """``python -m module`` has something to run: ``scripts/a/b.py`` or a
    package ``scripts/a/b/`` with ``__main__.py``."""
    path = REPO.joinpath(*module.split("."))
    return path.with_suffix(".py").is_file() or (path / "__main__.py").is_file()


def test_documented_commands_name_modules_that_exist():
    commands = written_in_docs(r"python3? -m (scripts(?:\.\w+)*)")
    # the docs write the main commands (so an empty scan cannot pass)
    assert {"scripts.series", "scripts.series.base", "scripts.series.drift", "scripts.validation.smoke",
            "scripts.validation.matrix", "scripts.bench"} <= set(commands)
    missing = {module: sorted(files) for module, files in commands.items() if not runnable(module)}
    assert missing == {}


def test_documented_script_paths_exist():
    """Every ``scripts/...py`` path written in README.md and docs/*.md is a
    file (layout.md's tree lists paths relative to scripts/, checked above)."""
    written = written_in_docs(r"\b(scripts/[\w/]+\.py)\b")
    assert "scripts/bench/pool_overhead.py" in written  # the scan finds what the docs write
    assert {name: sorted(files) for name, files in written.items() if not (REPO / name).is_file()} == {}
