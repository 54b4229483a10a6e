"""The patch files of the series: the quilt ``series`` file, a patch as its
DEP-3 header and its diff (``Patch``), the ``Applied-Upstream`` field, and
``lint`` (headers, listing, ``patches/tests.toml``)."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

from scripts.common.paths import REPO

PATCHES = REPO / "patches"
SERIES = PATCHES / "series"
DEP3_REQUIRED = ("Description", "Author", "Last-Update")
DEP3_ONE_OF = ("Origin", "Forwarded")
# Written by apply for the distribution version, never by a patch.
GENERATED = ("_version.py",)


class SeriesError(RuntimeError):
    """The series is malformed, or a patch does not apply or cannot be refreshed."""


class PatchDoesNotApply(SeriesError):
    """A patch of the series does not apply; names the patch, file and hunk."""


def read_series(series: Path = SERIES) -> list[str]:
    """Patch file names of a quilt ``series`` file, in order."""
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


def lint(patches_dir: Path = PATCHES) -> list[str]:
    """Problems of the series without applying it: unlisted or missing patch
    files, DEP-3 headers without Description, Author, Last-Update and one of
    Origin/Forwarded, an Applied-Upstream field that does not start with a
    release version. Empty when the series is clean."""
    problems = []
    names = read_series(patches_dir / "series")
    for dup in sorted({n for n in names if names.count(n) > 1}):
        problems.append(f"{dup}: listed more than once in patches/series")
    for f in sorted(p.name for p in patches_dir.glob("*.patch")):
        if f not in names:
            problems.append(f"{f}: not listed in patches/series")
    for name in names:
        path = patches_dir / name
        if not path.exists():
            problems.append(f"{name}: listed in patches/series but missing")
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
        problems += _dep3_forwarding_problems(name, fields)
    return problems + lint_tests_map(names, patches_dir / "tests.toml")


# Debian's DEP-3: Forwarded is "no", "not-needed" or where it was sent (a URL);
# Applied-Upstream is the release that carries the change, optionally with the
# URL or commit where upstream has it. How a release was found belongs in the
# Description.
_URL = r"https?://\S+"
_APPLIED = re.compile(rf"v?(?P<version>[0-9][^,\s]*)(,\s*({_URL}|[0-9a-f]{{7,40}}))?")
_UPSTREAM_ORIGIN = re.compile(rf"(upstream|backport)(,\s*{_URL})?|other,\s*https://github\.com/vllm-project/\S+")


def _dep3_forwarding_problems(name: str, fields: dict[str, str]) -> list[str]:
    """DEP-3 as Debian means it: ``Forwarded`` is ``no``, ``not-needed`` or a
    URL, and ``not-needed`` only for distribution-specific changes (the
    Description says why in a paragraph starting "Distribution-specific:")
    or for upstream's own change (Origin upstream/backport, or other with an
    upstream URL, or Applied-Upstream set); ``Applied-Upstream`` is a release
    version, optionally with a URL or commit, nothing else."""
    problems = []
    forwarded = fields.get("Forwarded", "").strip()
    if forwarded and forwarded not in ("no", "not-needed") and not re.fullmatch(_URL, forwarded):
        problems.append(f"{name}: Forwarded must be 'no', 'not-needed' or the URL it was sent to "
                        f"(got {forwarded!r})")
    if forwarded == "not-needed" and not (
            "Applied-Upstream" in fields
            or _UPSTREAM_ORIGIN.fullmatch(fields.get("Origin", "").split("\n")[0].strip())
            or re.search(r"(?m)^Distribution-specific:", fields.get("Description", ""))):
        problems.append(f"{name}: 'Forwarded: not-needed' is for distribution-specific changes: "
                        "say why in a Description paragraph starting 'Distribution-specific:', "
                        "or use 'Forwarded: no' for a change upstream could take")
    try:
        applied_upstream(fields)
    except SeriesError as e:
        problems.append(f"{name}: {e}")
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
    """Problems of ``patches/tests.toml`` (each patch's unit tests, run by
    ``drift test-upstream``): a key that names no patch of the series, and,
    with ``collect``, a node id pytest does not collect (run from the
    repository root). Empty when the file is absent or clean."""
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
                              cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        collected = set(re.findall(r"(?m)^(tests/\S+::\S+?)(?:\[.*\])?$", proc.stdout))
        problems += [f"{tests_toml.name}: {node} is not collected by pytest"
                     for node in ids if node not in collected]
    return problems
