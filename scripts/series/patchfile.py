"""The patch files of a line's series: the quilt ``series`` file, a patch as
its DEP-3 header and its diff (``Patch``), the ``Applied-Upstream`` field,
and ``lint`` (listing, patch numbers, DEP-3 headers, ``tests.toml``).

A line's patches live in ``patches/<base version>/`` (``scripts.series.lines``);
functions taking ``patches_dir`` default to the selected line's directory."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

from scripts.common.paths import REPO
from scripts.series.lines import (PATCHES_ROOT, Line, LineError, get_line, line_names, next_number,
                                  other_lines_patches, patch_number, retired_numbers)

DEP3_REQUIRED = ("Description", "Author", "Last-Update")
DEP3_ONE_OF = ("Origin", "Forwarded")
# DEP-3's Description: a short summary on the field's own line (the whole
# "Description: ..." line under 80 characters), then what the change is, why
# and where upstream stands, kept short: how it was found goes to the
# changelog or the commit message.
DESCRIPTION_LINE_MAX = 79
DESCRIPTION_MAX_LINES = 25
# Written by apply for the distribution version, never by a patch.
GENERATED = ("_version.py",)


class SeriesError(RuntimeError):
    """The series is malformed, or a patch does not apply or cannot be refreshed."""


class PatchDoesNotApply(SeriesError):
    """A patch of the series does not apply; names the patch, file and hunk."""


def line_dir(patches_dir: Path | None = None) -> Path:
    """``patches_dir``, or the selected line's directory (``patches/<line>``)."""
    if patches_dir is not None:
        return Path(patches_dir)
    try:
        return get_line().dir
    except LineError as e:
        raise SeriesError(str(e)) from None


def read_series(series: Path | None = None) -> list[str]:
    """Patch file names of a quilt ``series`` file (the selected line's by
    default), in order."""
    series = series or line_dir() / "series"
    names = []
    for lineno, line in enumerate(series.read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, *opts = line.split()
        if opts not in ([], ["-p1"]):
            raise SeriesError(f"{series}:{lineno}: unsupported options {opts} (only -p1)")
        names.append(name)
    return names


@dataclass
class Patch:
    """A patch file split into its DEP-3 header and its diff."""

    header: str
    diff: str

    @classmethod
    def read(cls, path: Path) -> "Patch":
        """The patch file at ``path``: the header up to git format-patch's
        ``---`` line (the diffstat after it is left out: refresh writes it
        anew), the diff from the first ``diff --git``; a header-only patch
        (just made by ``new``) has an empty diff."""
        text = path.read_text()
        i = text.find("\ndiff --git ")
        if i < 0:  # a new patch, header only (scripts.series.patches new)
            i = len(text) - 1
        head = text[: i + 1]
        # the header ends at git format-patch's '---' line; the diffstat after it is regenerated
        j = head.find("\n---\n")
        return cls(head[: j + 1] if j >= 0 else head, text[i + 1:])

    def fields(self) -> dict[str, str]:
        """DEP-3 fields of the header (continuation lines folded in)."""
        out: dict[str, str] = {}
        key = None
        for line in self.header.splitlines():
            m = re.match(r"^([A-Za-z][A-Za-z-]*):\s?(.*)$", line)
            if m:
                key = m.group(1)
                out[key] = m.group(2)
            elif key and line.startswith(" "):
                out[key] += "\n" + line.strip()
        return out


def lint(patches_dir: Path | None = None) -> list[str]:
    """Problems of a line's series (the selected line's by default) without
    applying it: unlisted or missing patch files, patch numbers
    (``lint_numbers``), DEP-3 headers without Description, Author,
    Last-Update and one of Origin/Forwarded or whose fields contradict each
    other (``_dep3_problems``), headers naming commands or files that do not
    exist, Descriptions whose summary line is 80 characters or longer or
    that run past ``DESCRIPTION_MAX_LINES`` lines (``_description_problems``),
    and ``tests.toml`` keys that name no patch. Empty when the series is
    clean."""
    patches_dir = line_dir(patches_dir)
    problems = []
    names = read_series(patches_dir / "series")
    for dup in sorted({n for n in names if names.count(n) > 1}):
        problems.append(f"{dup}: listed more than once in the series")
    for f in sorted(p.name for p in patches_dir.glob("*.patch")):
        if f not in names:
            problems.append(f"{f}: not listed in the series")
    problems += lint_numbers(Line(patches_dir.name, patches_dir), names)
    base_version = _line_version(patches_dir)
    headers: dict[str, dict[str, str]] = {}
    for name in names:
        path = patches_dir / name
        if not path.exists():
            problems.append(f"{name}: listed in the series but missing")
            continue
        patch = Patch.read(path)
        for generated in GENERATED:
            if f"diff --git a/vllm/{generated} " in patch.diff:
                problems.append(f"{name}: changes vllm/{generated}, which apply writes; drop that hunk")
        fields = patch.fields()
        # DEP-3 accepts git format-patch's Subject and From for Description and Author.
        fields.setdefault("Description", fields.get("Subject", "").removeprefix("[PATCH] "))
        fields.setdefault("Author", fields.get("From", ""))
        for key in DEP3_REQUIRED:
            if not fields.get(key, "").strip():
                problems.append(f"{name}: DEP-3 header lacks {key}")
        if fields.get("Last-Update", "").strip() and not re.fullmatch(
                r"\d{4}-\d{2}-\d{2}", fields["Last-Update"].strip()):
            problems.append(f"{name}: Last-Update must be a date, YYYY-MM-DD")
        if not any(k in fields for k in DEP3_ONE_OF):
            problems.append(f"{name}: DEP-3 header needs Origin or Forwarded")
        problems += _description_problems(name, patch.header, fields)
        problems += _dep3_problems(name, fields, base_version)
        problems += [f"{name}: {p}" for p in header_reference_problems(patch.header)]
        headers[name] = fields
    problems += _same_upstream_change_problems(headers)
    return problems + lint_tests_map(names, patches_dir / "tests.toml")


def _line_version(patches_dir: Path) -> str | None:
    """The base version in ``patches_dir/base.toml``, or None without one."""
    try:
        return tomllib.loads((patches_dir / "base.toml").read_text())["base"]["version"]
    except (FileNotFoundError, KeyError):
        return None


def lint_numbers(line: Line, names: list[str]) -> list[str]:
    """Problems of a line's patch numbers: a patch not named ``NNNN-topic.patch``,
    two patches with one number, a patch numbered as a number ``numbers.toml``
    records as unused, withdrawn or dropped (a number is never given to other
    content), a patch numbered as another line's patch of another topic
    (``other_lines_patches``: one sequence over every line), and a number below
    the highest in use that is neither in the series, nor in ``numbers.toml``,
    nor another line's patch (nothing would say why it is missing)."""
    problems = []
    try:
        retired = retired_numbers(line)
    except (LineError, tomllib.TOMLDecodeError) as e:
        return [f"{line.numbers_file.name}: {e}"]
    numbers: dict[str, list[str]] = {}
    for name in names:
        number = patch_number(name)
        if number is None:
            problems.append(f"{name}: a patch is named NNNN-topic.patch (lower case, digits, dashes)")
            continue
        numbers.setdefault(number, []).append(name)
    for number, taken in sorted(numbers.items()):
        if len(taken) > 1:
            problems.append(f"{', '.join(taken)}: one number for {len(taken)} patches")
        for kind, table in retired.items():
            if number in table:
                problems.append(f"{taken[0]}: number {number} is recorded as {kind} in {line.numbers_file.name} "
                                f"({table[number]}); a number is never given to other content: "
                                f"use the next free one, {next_number(line, names)}")
    others = other_lines_patches(line)
    for number, taken in sorted(numbers.items()):
        theirs = others.get(number)
        if theirs is not None and theirs[0] not in taken:
            problems.append(f"{taken[0]}: number {number} is {theirs[0]} on line {theirs[1]}; a number is never "
                            f"given to other content: use the next free one, {next_number(line, names)}")
    known = set(numbers) | set(others) | {n for table in retired.values() for n in table}
    top = max((int(n) for n in known), default=0)
    missing = [f"{n:04d}" for n in range(1, top) if f"{n:04d}" not in known]
    if missing:
        problems.append(f"{line.numbers_file.name}: patch numbers {', '.join(missing)} are neither in the series "
                        "nor recorded: say why under [unused] or [withdrawn]")
    return problems


def lint_layout(root: Path = PATCHES_ROOT) -> list[str]:
    """Problems of ``patches/`` itself: anything but ``lines.toml`` and line
    directories (a patch file left at the top, as a merge from before the
    lines can leave one), and a ``lines.toml`` whose default is no line."""
    from scripts.series.lines import LINES_FILE, default_line

    problems = []
    lines = set(line_names(root))
    for entry in sorted(root.iterdir()):
        if entry.name == LINES_FILE or entry.name in lines:
            continue
        fix = (f"move it into its line (git mv patches/{entry.name} patches/<line>/) and list it in that "
               "line's series" if entry.name.endswith(".patch") or entry.name in ("series", "tests.toml",
                                                                                 "base.toml") else
               "patches/ holds lines.toml and one directory per line")
        problems.append(f"patches/{entry.name}: not part of a line: {fix}")
    try:
        default_line(root)
    except LineError as e:
        problems.append(str(e))
    return problems


# Debian's DEP-3: Forwarded is "no", "not-needed" or where it was sent (a URL);
# Applied-Upstream is the release that carries the change, optionally with the
# URL or commit where upstream has it. How a release was found belongs in the
# Description.
_URL = r"https?://\S+"
_APPLIED = re.compile(rf"v?(?P<version>[0-9][^,\s]*)(,\s*(?P<where>{_URL}|[0-9a-f]{{7,40}}))?")
_UPSTREAM_ORIGIN = re.compile(rf"(upstream|backport)(,\s*{_URL})?")
_UPSTREAM_CHANGE = re.compile(r"https://github\.com/vllm-project/vllm/(?:pull|commit)/\S+")


def _description_problems(name: str, header: str, fields: dict[str, str]) -> list[str]:
    """DEP-3's Description: its first line, the ``Description:`` line itself
    (or git format-patch's ``Subject:`` without one), is a short summary of
    at most ``DESCRIPTION_LINE_MAX`` characters, and the whole field (summary
    and continuation lines) at most ``DESCRIPTION_MAX_LINES`` lines."""
    description = fields.get("Description", "")
    if not description.strip():
        return []  # lint reports the missing field
    problems = []
    key = "Description" if re.search(r"(?m)^Description:", header) else "Subject"
    first = re.search(rf"(?m)^{key}:.*$", header)
    if not description.split("\n", 1)[0].strip():
        problems.append(f"{name}: the Description's first line is empty: DEP-3's first line is a short summary "
                        "('Description: <summary>'), the lines after it say more")
    elif first is not None and len(first.group(0)) > DESCRIPTION_LINE_MAX:
        problems.append(f"{name}: the {key} line is {len(first.group(0))} characters: DEP-3's first line is a "
                        f"short summary, the whole '{key}: ...' line at most {DESCRIPTION_LINE_MAX}; say the "
                        "rest in the lines after it")
    lines = len(description.split("\n"))
    if lines > DESCRIPTION_MAX_LINES:
        problems.append(f"{name}: the Description runs to {lines} lines, more than {DESCRIPTION_MAX_LINES}: say what "
                        "the change is, why and where upstream stands; how it was found goes to the changelog or "
                        "the commit message")
    return problems


def _dep3_problems(name: str, fields: dict[str, str], base_version: str | None = None) -> list[str]:
    """DEP-3 as Debian means it, its fields agreeing with each other:
    ``Forwarded`` is ``no``, ``not-needed`` or a URL; ``not-needed`` only for
    distribution-specific changes (the Description says why in a paragraph
    starting "Distribution-specific:") or for a change upstream has (Origin
    upstream/backport, or Applied-Upstream set); a change upstream carries
    (``Applied-Upstream``) was not left unforwarded (``Forwarded: no``);
    ``Applied-Upstream`` is a release newer than the line's base, optionally
    with a URL or commit; a reimplementation of an upstream change says
    ``Origin: backport, <its URL>``, a change taken from upstream
    ``Origin: upstream, <its URL>``, and neither is ``Forwarded: no`` (the
    change is upstream's: nothing to forward)."""
    problems = []
    forwarded = fields.get("Forwarded", "").strip()
    origin = fields.get("Origin", "").split("\n")[0].strip()
    if forwarded and forwarded not in ("no", "not-needed") and not re.fullmatch(_URL, forwarded):
        problems.append(f"{name}: Forwarded must be 'no', 'not-needed' or the URL it was sent to "
                        f"(got {forwarded!r})")
    if forwarded == "not-needed" and not (
            "Applied-Upstream" in fields
            or _UPSTREAM_ORIGIN.fullmatch(origin)
            or re.search(r"(?m)^Distribution-specific:", fields.get("Description", ""))):
        problems.append(f"{name}: 'Forwarded: not-needed' is for distribution-specific changes: "
                        "say why in a Description paragraph starting 'Distribution-specific:', "
                        "or use 'Forwarded: no' for a change upstream could take")
    if forwarded == "no" and "Applied-Upstream" in fields:
        problems.append(f"{name}: 'Forwarded: no' with Applied-Upstream: upstream carries the change, so it "
                        "needs no forwarding: 'Forwarded: not-needed' (or the URL it was sent to)")
    if origin.startswith("backport") and not re.fullmatch(rf"backport,\s*{_URL}", origin):
        problems.append(f"{name}: 'Origin: backport' names the upstream change it reimplements: "
                        "'Origin: backport, <PR URL>'")
    if re.match(r"upstream\b", origin) and not re.fullmatch(rf"upstream,\s*{_URL}", origin):
        problems.append(f"{name}: 'Origin: upstream' names the upstream change it takes: "
                        "'Origin: upstream, <commit or PR URL>'")
    kind = re.match(r"(upstream|backport)\b", origin)
    if kind and forwarded == "no":
        problems.append(f"{name}: 'Origin: {kind.group(1)}' with 'Forwarded: no': the change is upstream's, so "
                        "there is nothing to forward: 'Forwarded: not-needed'")
    m = re.fullmatch(rf"(\w+),\s*({_URL})", origin)
    if m and m.group(1) not in ("backport", "upstream") and _UPSTREAM_CHANGE.fullmatch(m.group(2)):
        problems.append(f"{name}: Origin {origin!r} names an upstream change: a reimplementation of it says "
                        f"'Origin: backport, {m.group(2)}'")
    try:
        release = applied_upstream(fields)
    except SeriesError as e:
        problems.append(f"{name}: {e}")
        release = None
    if release is not None and base_version is not None:
        from packaging.version import Version

        if release <= Version(base_version):
            problems.append(f"{name}: Applied-Upstream {release} is not newer than the line's base "
                            f"{base_version}: a patch the base carries has nothing to change")
    return problems


def _same_upstream_change_problems(headers: dict[str, dict[str, str]]) -> list[str]:
    """Patches taking or reimplementing one upstream change (the same URL in
    ``Origin: upstream, <URL>`` or ``Origin: backport, <URL>``) agree on
    Forwarded and Applied-Upstream."""
    by_change: dict[str, list[str]] = {}
    for name, fields in headers.items():
        m = re.fullmatch(rf"(?:upstream|backport),\s*({_URL})", fields.get("Origin", "").split("\n")[0].strip())
        if m:
            by_change.setdefault(m.group(1), []).append(name)
    problems = []
    for url, names in sorted(by_change.items()):
        for key in ("Forwarded", "Applied-Upstream"):
            values = {headers[n].get(key, "").strip() for n in names}
            if len(values) > 1:
                problems.append(f"{', '.join(names)}: take or reimplement {url} but disagree on {key} "
                                f"({' / '.join(sorted(v or '(none)' for v in values))})")
    return problems


def runnable_module(module: str, root: Path = REPO) -> bool:
    """``python -m module`` has something to run under ``root``: ``a/b.py``
    or a package ``a/b/`` with ``__main__.py``."""
    path = root.joinpath(*module.split("."))
    return path.with_suffix(".py").is_file() or (path / "__main__.py").is_file()


def header_reference_problems(text: str, root: Path = REPO) -> list[str]:
    """What a patch header (or any text) names that does not exist under
    ``root``: ``python -m scripts...`` commands that are no runnable module,
    ``scripts/...py`` and ``tests/...py`` files that are not there (the check
    docs get in tests/tooling/test_docs.py)."""
    problems = []
    for module in sorted(set(re.findall(r"python3? -m (scripts(?:\.\w+)*)", text))):
        if not runnable_module(module, root):
            problems.append(f"names the command 'python -m {module}', which does not exist")
    for path in sorted(set(re.findall(r"\b((?:scripts|tests)/[\w/]+\.py)\b", text))):
        ours = path.startswith("scripts/") or (root / path.split("/")[0] / path.split("/")[1]).is_dir()
        if ours and not (root / path).is_file():  # (not upstream's tests/models/..., which headers may cite)
            problems.append(f"names {path}, which does not exist")
    return problems


def applied_upstream(fields: dict[str, str]):
    """The release (``packaging.version.Version``) a patch's DEP-3
    ``Applied-Upstream`` field names, or None without the field. Raises
    ``SeriesError`` unless the field is a release version, optionally with a
    URL or commit (how it was found belongs in the Description)."""
    from packaging.version import InvalidVersion, Version  # not needed by the base's system python3

    if "Applied-Upstream" not in fields:
        return None
    value = fields["Applied-Upstream"].strip()
    m = _APPLIED.fullmatch(value)
    try:
        if m is not None:
            return Version(m.group("version"))
    except InvalidVersion:
        pass
    raise SeriesError("Applied-Upstream must be the upstream release that carries the change, "
                      "optionally with its URL or commit, e.g. 'Applied-Upstream: 0.29.0, "
                      "https://github.com/vllm-project/vllm/pull/1'; how it was found goes in the "
                      f"Description (got {value!r})")


def lint_tests_map(names: list[str], tests_toml: Path, collect: bool = False) -> list[str]:
    """Problems of a line's ``tests.toml`` (each patch's unit tests, run by
    ``drift test-upstream``): a key that names no patch of the series, and,
    with ``collect``, a node id pytest does not collect (run from the
    repository root for the line the file belongs to, ``VDIST_LINE`` set to
    its directory's name: tests of another line's seams are deselected).
    Empty when the file is absent or clean."""
    if not tests_toml.exists():
        return []
    table = tomllib.loads(tests_toml.read_text()).get("tests", {})
    problems = [f"{tests_toml.name}: {key} is not a patch of the series"
                for key in table if key not in names]
    if collect:
        ids = sorted({node for nodes in table.values() for node in nodes})
        files = sorted({node.split("::", 1)[0] for node in ids if (REPO / node.split("::", 1)[0]).exists()})
        proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                               "-p", "no:cacheprovider", *files],
                              cwd=REPO, env={**os.environ, "VDIST_LINE": tests_toml.parent.name},
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if proc.returncode not in (0, 5):  # a crash or a collection error: say so, not "not collected" for each
            tail = "\n".join(proc.stdout.strip().splitlines()[-15:])
            return problems + [f"{tests_toml.name}: pytest could not collect the mapped tests "
                               f"(exit {proc.returncode}); its output ends:\n{tail}"]
        collected = set(re.findall(r"(?m)^(tests/\S+::\S+?)(?:\[.*\])?$", proc.stdout))
        problems += [f"{tests_toml.name}: {node} is not collected by pytest"
                     for node in ids if node not in collected]
    return problems
