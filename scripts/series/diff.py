"""Git diffs read into files and hunks: the one diff parser of the series
tooling (``patches`` names a failing hunk with it, ``drift`` classifies
hunks with it)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from scripts.series.patchfile import SeriesError


@dataclass
class Hunk:
    """One ``@@`` hunk: its header line and body lines (with their ``' '``,
    ``'-'``, ``'+'`` or ``'\\'`` prefix)."""

    header: str
    lines: list[str]

    @property
    def old_start(self) -> int:
        """The first line (1-based) of the hunk in the file before the change."""
        return int(re.match(r"@@ -(\d+)", self.header).group(1))

    @property
    def funcname(self) -> str:
        """The text git put after the second ``@@`` (the enclosing line)."""
        return self.header.split("@@", 2)[2].strip() if self.header.count("@@") >= 2 else ""

    def old_lines(self) -> list[str]:
        """The hunk's lines before the change: context and removed lines."""
        return [line[1:] for line in self.lines if line[:1] in (" ", "-")]


@dataclass
class FileDiff:
    """The diff of one file: ``head`` (``diff --git`` to ``+++``), its hunks,
    and its paths (``old`` is None for a created file, ``new`` None for a
    deleted one)."""

    old: str | None
    new: str | None
    head: list[str]
    hunks: list[Hunk]

    def text(self, hunks: list[Hunk] | None = None) -> str:
        """This file's diff, with only ``hunks`` if given."""
        body = [line for h in (self.hunks if hunks is None else hunks) for line in [h.header, *h.lines]]
        return "".join(line + "\n" for line in [*self.head, *body])


def _strip_prefix(path: str) -> str | None:
    path = path.split("\t")[0]
    if path == "/dev/null":
        return None
    return path[2:] if path[:2] in ("a/", "b/") else path


def parse_diff(text: str) -> list[FileDiff]:
    """Split a git diff into files and hunks. Hunk bodies are read by the line
    counts of their ``@@`` header, so trailing text (a format-patch signature)
    is not taken for diff lines. Raises ``SeriesError`` on a malformed hunk."""
    files: list[FileDiff] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        if not lines[i].startswith("diff --git "):
            i += 1
            continue
        m = re.match(r"diff --git a/(\S+) b/(\S+)", lines[i])
        old, new = (m.group(1), m.group(2)) if m else (None, None)
        head = [lines[i]]
        i += 1
        while i < len(lines) and not lines[i].startswith(("@@", "diff --git ")):
            line = lines[i]
            head.append(line)
            if line.startswith("--- "):
                old = _strip_prefix(line[4:])
            elif line.startswith("+++ "):
                new = _strip_prefix(line[4:])
            elif line.startswith("new file mode"):
                old = None
            elif line.startswith("deleted file mode"):
                new = None
            i += 1
        hunks = []
        while i < len(lines) and lines[i].startswith("@@"):
            hm = re.match(r"@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@", lines[i])
            if not hm:
                raise SeriesError(f"malformed hunk header: {lines[i]!r}")
            n_old = int(hm.group(1)) if hm.group(1) is not None else 1
            n_new = int(hm.group(2)) if hm.group(2) is not None else 1
            header, body = lines[i], []
            i += 1
            while i < len(lines) and (n_old > 0 or n_new > 0 or lines[i].startswith("\\")):
                line = lines[i]
                tag = line[:1]
                if tag in (" ", ""):
                    n_old, n_new = n_old - 1, n_new - 1
                    line = line if tag else " "
                elif tag == "-":
                    n_old -= 1
                elif tag == "+":
                    n_new -= 1
                elif tag != "\\":
                    raise SeriesError(f"malformed hunk {header!r}: line {line!r}")
                body.append(line)
                i += 1
            if n_old or n_new:
                raise SeriesError(f"hunk {header!r} is shorter than its header says")
            hunks.append(Hunk(header, body))
        files.append(FileDiff(old, new, head, hunks))
    return files
