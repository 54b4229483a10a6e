"""Docs true to the code: ``make help`` has a line for every Makefile target,
``docs/layout.md`` names every module under ``scripts/`` and no other,
every ``python -m scripts.X`` command and every ``scripts/...py`` path written
in README.md and ``docs/*.md`` names a module that exists, and so does every
command and file the patch headers of every line name."""

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
    package ``scripts/a/b/`` with ``__main__.py`` (the rule series lint holds
    patch headers to)."""
    from scripts.series.patchfile import runnable_module

    return runnable_module(module, REPO)


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


def test_patch_headers_name_commands_and_files_that_exist():
    """The DEP-3 header of every patch file of every line (patches/*/*.patch)
    names only ``python -m scripts...`` commands that run and
    ``scripts/...py`` / ``tests/...py`` files that exist: series lint's
    check (``header_reference_problems``), run here too so that moving or
    removing a module fails the docs check as it does for the pages."""
    from scripts.series.lines import line_names
    from scripts.series.patchfile import Patch, header_reference_problems

    patches = sorted((REPO / "patches").glob("*/*.patch"))
    # every line's patches are scanned (so an empty scan cannot pass)
    assert {p.parent.name for p in patches} == set(line_names())
    problems = {p.relative_to(REPO).as_posix(): header_reference_problems(Patch.read(p).header, REPO)
                for p in patches}
    assert {name: found for name, found in problems.items() if found} == {}
    # the check itself finds a removed command and a missing file in a header
    assert header_reference_problems("Description: x\n run python -m scripts.gone and tests/unit/test_gone.py\n",
                                     REPO) == ["names the command 'python -m scripts.gone', which does not exist",
                                               "names tests/unit/test_gone.py, which does not exist"]


def restated_facts() -> dict[str, str]:
    """The pins of every line's base.toml that nothing else may restate: each
    sha256 (artifacts, bundled packages, upstream sources) and the torch pin
    (``torch==<version>``), with the line they belong to."""
    from scripts.series.base import load_base
    from scripts.series.lines import line_names

    facts = {}
    for line in line_names():
        base = load_base(line)
        pins = [a.sha256 for a in base.artifacts.values()] + [a.sha256 for a in base.upstream.values()]
        pins += [p.sha256 for pkgs in base.bundled.values() for p in pkgs]
        pins += [base.torch_requirement()] if base.torch else []
        facts.update(dict.fromkeys(pins, line))
    return facts


def scanned_files() -> list:
    """Everything but the lines themselves and the changelog (history): the
    pages, the Makefile, CI, requirements, setup.py and our Python. The
    bench's own environments (``requirements/bench-*.txt``: the peers,
    infinity-emb) pin their own torch, which is no line's base fact even
    when a line's base pins the same version."""
    files = [REPO / "README.md", REPO / "Makefile", REPO / "setup.py", REPO / "pyproject.toml",
             *sorted((REPO / "docs").glob("*.md")),
             *sorted(p for p in (REPO / "requirements").glob("*") if not p.name.startswith("bench-")),
             *sorted((REPO / "ci").rglob("*.*")), *sorted((REPO / ".ci").glob("*")),
             *sorted(p for d in ("scripts", "tests") for p in (REPO / d).rglob("*.py") if "__pycache__" not in p.parts)]
    return [f for f in files if f.is_file()]


def test_no_base_pin_is_restated_outside_base_toml():
    """Every base fact lives in its line's base.toml only: no page, Makefile,
    CI step, requirements file, script or test writes a pinned digest or a
    torch pin (they read them with scripts.series.base)."""
    facts = restated_facts()
    assert len(facts) >= 3  # the artifacts, the bundled package and the torch pin at least
    found = {f"{path.relative_to(REPO)}: {fact} (line {line})"
             for path in scanned_files() for fact, line in facts.items() if fact in path.read_text(errors="replace")}
    assert sorted(found) == []


def test_code_takes_the_platform_tag_from_the_base():
    """No string in our code (docstrings aside), the Makefile or CI names a
    line's platform tag: it is read from the artifacts' file names."""
    import ast

    from scripts.series.base import load_base
    from scripts.series.lines import line_names

    tags = {load_base(line).platform for line in line_names()}
    found = []
    for path in scanned_files():
        if path.suffix == ".py":
            tree = ast.parse(path.read_text())
            docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                          if isinstance(n, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                          and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
            strings = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
                       and id(n) not in docstrings]
        elif path.suffix == ".md":
            continue  # pages may describe a tag (docs/base-and-recipe.md, tcmalloc and glibc)
        else:
            strings = [path.read_text(errors="replace")]
        found += [f"{path.relative_to(REPO)}: {tag}" for tag in tags for text in strings if tag in text]
    assert found == []
