"""The lines of the distribution: one patch series per upstream base, each in
its own directory ``patches/<base version>/``:

- ``base.toml``: the base's facts (``scripts.series.base``), and only there;
- ``series``: the patch order (quilt's format);
- ``tests.toml``: each patch's unit tests (``drift test-upstream``);
- ``numbers.toml``: the patch numbers of the line that are not in its series,
  and why (a number once given to a patch is never given to other content);
- ``NNNN-topic.patch``: the patches.

Which line ``make`` acts on without ``LINE=`` is not a fact of any base: it
is ``default`` in ``patches/lines.toml`` (the current line). Its
``maintenance`` list names the older lines still released (bug fixes only):
``make test`` of the current line also runs their share of the tests (unit
tests, the smoke job, one matrix row per family). A command's line is, in
this order, its ``--line`` option, the environment's ``VDIST_LINE`` (the
Makefile exports ``LINE`` as that), else the default.

Command line (the Makefile reads the default line with it, before any venv
exists: standard library only)::

    python -m scripts.series.lines default     # the default line, e.g. 0.32.0
    python -m scripts.series.lines maintenance # the maintenance lines, e.g. 0.26.0
    python -m scripts.series.lines released    # the default line, then the maintenance lines
    python -m scripts.series.lines candidates  # the lines being brought up (in neither), oldest first
    python -m scripts.series.lines list        # every line, oldest first

A line directory that ``lines.toml`` names neither ``default`` nor in
``maintenance`` nor in ``end_of_life`` is a *candidate*: a line being brought
up (a rebase's result under review), linted at the series level only. A line
in ``end_of_life`` is kept for history (its directory, its tests' ``line``
marks) and is neither built, tested, linted nor released.

    python -m scripts.series.lines end-of-life # the lines past their end of life, e.g. 0.26.0
"""

from __future__ import annotations

import os
import re
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

from scripts.common.paths import REPO

PATCHES_ROOT = REPO / "patches"
LINES_FILE = "lines.toml"
LINE_ENV = "VDIST_LINE"
_NUMBER = re.compile(r"(\d{4})-[a-z0-9][a-z0-9-]*\.patch")
NUMBER_KINDS = ("unused", "withdrawn", "dropped", "deferred")


class LineError(RuntimeError):
    """A line that does not exist, or a malformed ``lines.toml`` / ``numbers.toml``."""


def _version_key(name: str) -> tuple:
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"[.+-]", name))


@dataclass(frozen=True)
class Line:
    """One line: ``name`` is its base version (``0.26.0``), ``dir`` its
    directory (``patches/0.26.0``)."""

    name: str
    dir: Path

    @property
    def base_file(self) -> Path:
        return self.dir / "base.toml"

    @property
    def series_file(self) -> Path:
        return self.dir / "series"

    @property
    def tests_file(self) -> Path:
        return self.dir / "tests.toml"

    @property
    def numbers_file(self) -> Path:
        return self.dir / "numbers.toml"


def line_names(root: Path = PATCHES_ROOT) -> list[str]:
    """Every line under ``root`` (a directory holding a ``base.toml``), oldest base first."""
    if not root.is_dir():
        return []
    return sorted((p.name for p in root.iterdir() if (p / "base.toml").is_file()), key=_version_key)


def default_line(root: Path = PATCHES_ROOT) -> str:
    """``default`` of ``<root>/lines.toml``. Raises ``LineError`` when the
    file or the key is missing or names no line."""
    path = root / LINES_FILE
    try:
        name = tomllib.loads(path.read_text())["default"]
    except FileNotFoundError:
        raise LineError(f"{path} is missing: it names the default line (default = \"<base version>\")") from None
    except (KeyError, tomllib.TOMLDecodeError) as e:
        raise LineError(f"{path}: needs default = \"<base version>\" ({e})") from None
    if name not in line_names(root):
        raise LineError(f"{path}: default line {name!r} has no directory {root / name} with a base.toml "
                        f"(lines: {', '.join(line_names(root)) or 'none'})")
    return name


def _listed_lines(root: Path, key: str, example: str) -> list[str]:
    """The list ``key`` of ``<root>/lines.toml`` (empty when absent), oldest
    first. Raises ``LineError`` for a name that is no line, the default line
    itself, or a value that is not a list of strings."""
    path = root / LINES_FILE
    try:
        names = tomllib.loads(path.read_text()).get(key, [])
    except (FileNotFoundError, tomllib.TOMLDecodeError) as e:
        raise LineError(f"{path}: cannot be read ({e})") from None
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise LineError(f"{path}: {key} must be a list of base versions, e.g. [\"{example}\"]")
    default = default_line(root)
    for name in names:
        if name not in line_names(root):
            raise LineError(f"{path}: {key} line {name!r} has no directory {root / name} with a base.toml")
        if name == default:
            raise LineError(f"{path}: {name} is the default line; it cannot be in {key}")
    return sorted(names, key=_version_key)


def maintenance_lines(root: Path = PATCHES_ROOT) -> list[str]:
    """``maintenance`` of ``<root>/lines.toml``: the older lines still
    released with fixes, oldest first (``_listed_lines``; ``LineError`` as
    there, and for a line also past its end of life)."""
    names = _listed_lines(root, "maintenance", "0.26.0")
    both = sorted(set(names) & set(end_of_life_lines(root)), key=_version_key)
    if both:
        raise LineError(f"{root / LINES_FILE}: {', '.join(both)} in both maintenance and end_of_life")
    return names


def end_of_life_lines(root: Path = PATCHES_ROOT) -> list[str]:
    """``end_of_life`` of ``<root>/lines.toml``: the lines no longer released,
    kept for history, oldest first (``_listed_lines``; ``LineError`` as
    there)."""
    return _listed_lines(root, "end_of_life", "0.26.0")


def candidate_lines(root: Path = PATCHES_ROOT) -> list[str]:
    """The lines being brought up: every line of ``root`` that ``lines.toml``
    names neither ``default`` nor in ``maintenance`` nor in ``end_of_life``,
    oldest first. A
    candidate is linted at the series level (``make lint``: headers, numbers,
    strict apply to its flavors' sources, build patches to its sdist) and is
    neither built, tested nor released until ``lines.toml`` names it."""
    named = {default_line(root), *maintenance_lines(root), *end_of_life_lines(root)}
    return [n for n in line_names(root) if n not in named]


def get_line(name: str | None = None, root: Path = PATCHES_ROOT) -> Line:
    """The line ``name``; without it ``$VDIST_LINE``, else the default line.
    Raises ``LineError`` naming the lines there are."""
    name = name or os.environ.get(LINE_ENV) or default_line(root)
    if name not in line_names(root):
        raise LineError(f"no line {name!r}: {root / name} holds no base.toml "
                        f"(lines: {', '.join(line_names(root)) or 'none'})")
    return Line(name, root / name)


def patch_number(name: str) -> str | None:
    """The 4-digit number of a patch file name ``NNNN-topic.patch``, else None."""
    m = _NUMBER.fullmatch(name)
    return m.group(1) if m else None


def retired_numbers(line: Line) -> dict[str, dict[str, str]]:
    """``numbers.toml`` of ``line``: ``{kind: {number: why}}`` for the kinds
    ``unused`` (never given to a patch), ``withdrawn`` (a patch taken out of
    the series), ``dropped`` (carried by upstream: left behind by a
    rebase onto this base) and ``deferred`` (carried forward unported by
    ``rebase --defer``: its file in the line's ``deferred/``). A ``dropped``
    entry is a table (``patch``, ``upstream``: the release, ``found``: how),
    a ``deferred`` one (``patch``, ``reason``), given here as one string.
    Empty kinds when the file is absent; ``LineError`` for another kind or a
    key that is not a 4-digit number."""
    out: dict[str, dict[str, str]] = {k: {} for k in NUMBER_KINDS}
    if not line.numbers_file.exists():
        return out
    data = tomllib.loads(line.numbers_file.read_text())
    for kind, table in data.items():
        if kind not in NUMBER_KINDS:
            raise LineError(f"{line.numbers_file}: [{kind}] is not one of {', '.join(NUMBER_KINDS)}")
        for number, why in table.items():
            if not re.fullmatch(r"\d{4}", number):
                raise LineError(f"{line.numbers_file}: [{kind}] key {number!r} is not a 4-digit patch number")
            if isinstance(why, dict):
                why = ", ".join(f"{k} {v}" for k, v in why.items())
            out[kind][number] = str(why)
    return out


def other_lines_patches(line: Line) -> dict[str, tuple[str, str]]:
    """The patches of the other lines beside ``line`` (the directories of
    ``line.dir.parent`` holding a ``base.toml``, end-of-life lines included):
    ``{number: (patch file name, line name)}``, read from their ``series``
    files. Patch numbers are one sequence over every line: a patch carried
    from line to line keeps its number, and a number is never given to other
    content on another line."""
    out: dict[str, tuple[str, str]] = {}
    for name in line_names(line.dir.parent):
        other = Line(name, line.dir.parent / name)
        if other.dir.resolve() == line.dir.resolve() or not other.series_file.is_file():
            continue
        for entry in other.series_file.read_text().splitlines():
            entry = entry.split("#", 1)[0].strip()
            number = patch_number(entry)
            if number is not None:
                out.setdefault(number, (entry, name))
    return out


def next_number(line: Line, names: list[str]) -> str:
    """The next free patch number of ``line``: one more than every number in
    the series ``names``, in ``numbers.toml`` and in the other lines' series
    (``other_lines_patches``) and ``numbers.toml`` files."""
    used = ({patch_number(n) for n in names} - {None}) | set(other_lines_patches(line))
    lines = [line] + [Line(n, line.dir.parent / n) for n in line_names(line.dir.parent)
                      if (line.dir.parent / n).resolve() != line.dir.resolve()]
    for each in lines:
        for table in retired_numbers(each).values():
            used |= set(table)
    return f"{max((int(n) for n in used), default=0) + 1:04d}"


def main(argv: list[str] | None = None) -> int:
    """``python -m scripts.series.lines {default,maintenance,released,candidates,end-of-life,list}``; exit
    status 1 with the error for a ``LineError``."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        if argv == ["default"]:
            print(default_line())
        elif argv == ["maintenance"]:
            print("\n".join(maintenance_lines()))
        elif argv == ["list"]:
            print("\n".join(line_names()))
        elif argv == ["released"]:
            print("\n".join([default_line(), *maintenance_lines()]))
        elif argv == ["candidates"]:
            print("\n".join(candidate_lines()))
        elif argv == ["end-of-life"]:
            print("\n".join(end_of_life_lines()))
        else:
            print("usage: python -m scripts.series.lines {default,maintenance,released,candidates,end-of-life,list}",
                  file=sys.stderr)
            return 2
    except LineError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
